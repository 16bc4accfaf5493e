"""The contract in proto/ as other languages' tools take it: `buf lint` passes
with the exceptions buf.yaml lists, and Go and Java code generate with plain
protoc (no M flags, no options) from the include root proto/. The tools come
from Debian (protobuf-compiler, protoc-gen-go, protoc-gen-go-grpc,
protobuf-compiler-grpc-java-plugin, libprotobuf-java) and npm (@bufbuild/buf,
pinned in examples/grpc-node/package.json); scripts/test.sh installs them, and
a test whose tool is missing is skipped naming it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROTO = ROOT / "proto"
BUF = ROOT / "examples" / "grpc-node" / "node_modules" / ".bin" / "buf"
PROTOBUF_JAR = Path("/usr/share/java/protobuf.jar")
JAVA_GRPC_PLUGIN = Path("/usr/bin/grpc_java_plugin")  # Debian's name for protoc-gen-grpc-java
OURS = sorted(str(p.relative_to(PROTO)) for p in (PROTO / "ccr").rglob("*.proto"))


def _need(*tools: str | Path) -> None:
    missing = [str(t) for t in tools
               if (shutil.which(t) if isinstance(t, str) else (t if t.exists() else None)) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (scripts/test.sh installs them)")


def _run(*args: str | Path, cwd: Path = PROTO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, check=False)  # fmt: skip


def test_buf_lint_passes_with_the_documented_exceptions() -> None:
    _need(BUF)
    done = _run(BUF, "lint", cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


def test_go_code_generates_with_plain_protoc(tmp_path: Path) -> None:
    _need("protoc", "protoc-gen-go", "protoc-gen-go-grpc")
    done = _run("protoc", "-I.", f"--go_out={tmp_path}", f"--go-grpc_out={tmp_path}", *OURS)
    assert done.returncode == 0, done.stderr
    package = tmp_path / "ccrsim" / "gen" / "go" / "ccr" / "v1"  # go_package's path
    made = sorted(p.name for p in package.iterdir())
    assert made == ["admin.pb.go", "admin_grpc.pb.go", "cluster.pb.go", "cluster_grpc.pb.go",
                    "errors.pb.go", "replication.pb.go", "replication_grpc.pb.go"]
    assert "package ccrv1" in (package / "cluster.pb.go").read_text()


JAVA_MAIN = """
import ccrsim.ccr.v1.ErrorCode;
import ccrsim.ccr.v1.ErrorDetail;
import ccrsim.ccr.v1.ProduceRequest;

public class Main {
  public static void main(String[] args) throws Exception {
    ProduceRequest unset = ProduceRequest.newBuilder().setTopic("t").build();
    ProduceRequest none = ProduceRequest.newBuilder().setTopic("t").setAcks(0).build();
    ErrorDetail detail = ErrorDetail.parseFrom(ErrorDetail.newBuilder()
        .setCode(ErrorCode.ERROR_CODE_UNKNOWN_TOPIC).build().toByteArray());
    System.out.println(unset.hasAcks() + " " + none.hasAcks() + " " + detail.getCode());
  }
}
"""


def test_java_code_generates_with_plain_protoc_and_compiles(tmp_path: Path) -> None:
    _need("protoc", "javac", "java", PROTOBUF_JAR, JAVA_GRPC_PLUGIN)
    java = tmp_path / "java"
    java.mkdir()
    done = _run("protoc", "-I.", f"--java_out={java}", *OURS)
    assert done.returncode == 0, done.stderr
    # The gRPC stubs: the same plain call, with Debian's name for the plugin.
    done = _run("protoc", "-I.", f"--plugin=protoc-gen-grpc-java={JAVA_GRPC_PLUGIN}",
                f"--grpc-java_out={java}", *OURS)  # fmt: skip
    assert done.returncode == 0, done.stderr
    package = java / "ccrsim" / "ccr" / "v1"
    # java_multiple_files: a class per message, no *OuterClass.
    assert (package / "ProduceRequest.java").exists() and (package / "ClusterGrpc.java").exists()
    assert not list(package.glob("*OuterClass.java"))
    (java / "Main.java").write_text(JAVA_MAIN)
    classes = tmp_path / "classes"
    # -sourcepath: javac compiles only the classes Main needs.
    done = _run("javac", "-nowarn", "-d", classes, "-cp", PROTOBUF_JAR, "-sourcepath", java,
                java / "Main.java")  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = _run("java", "-cp", f"{classes}:{PROTOBUF_JAR}", "Main")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["false", "true", "ERROR_CODE_UNKNOWN_TOPIC"]
