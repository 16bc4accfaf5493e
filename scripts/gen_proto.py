"""Regenerate the Python gRPC code in proto/gen/ccr/ from the contracts in proto/.

Run: python scripts/gen_proto.py          (writes proto/gen/ccr/)
     python scripts/gen_proto.py --check  (exit 1 if proto/gen/ccr/ is stale)

The contracts are proto/ccr/v1/*.proto (hand-written); the code generated from
them lives apart, under proto/gen/, and is imported as `ccr.v1` (the package
path of the .proto files; pyproject.toml maps it there).

It also writes the table of error codes in docs/grpc.md (between its
`error-codes` markers): each ErrorCode of proto/ccr/v1/errors.proto with its
explanation, the gRPC status code the daemon sends it with
(linkd/grpc_errors.py) and whether it is retriable (linkd/core/errors.py), so
that the page cannot drift from the code.

The output depends only on proto/, the daemon's mapping and the pinned
grpcio-tools version, so the committed files are reproducible;
tests/test_proto_generated.py runs --check.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import sys
import tempfile
from pathlib import Path

from google.protobuf import descriptor_pb2
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
GEN_DIR = PROTO_DIR / "gen"
OUT_PACKAGE = "ccr"
DOC = ROOT / "docs" / "grpc.md"
TABLE_BEGIN = "<!-- error-codes:begin (written by python scripts/gen_proto.py) -->"
TABLE_END = "<!-- error-codes:end -->"


def generate(out_root: Path) -> list[Path]:
    # Only the project's own contracts: proto/google/ holds the standard
    # messages other languages need beside them (google.rpc.Status), which
    # Python imports from googleapis-common-protos.
    sources = sorted((PROTO_DIR / OUT_PACKAGE).rglob("*.proto"))
    if not sources:
        raise SystemExit(f"no .proto files under {PROTO_DIR}")
    include = Path(protoc.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_DIR}",
        f"-I{include}",
        f"--python_out={out_root}",
        f"--grpc_python_out={out_root}",
        f"--mypy_out={out_root}",
        f"--mypy_grpc_out={out_root}",
        *[str(s.relative_to(PROTO_DIR)) for s in sources],
    ]
    # The mypy plugins are console scripts installed beside this interpreter.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    code = protoc.main(args)
    if code != 0:
        raise SystemExit(f"protoc failed with exit code {code}")
    # Make every generated directory an importable package.
    for directory in [out_root / OUT_PACKAGE, *(out_root / OUT_PACKAGE).rglob("*")]:
        if directory.is_dir():
            init = directory / "__init__.py"
            if not init.exists():
                init.write_text(
                    '"""Generated from proto/ by scripts/gen_proto.py; do not edit."""\n'
                )
    return sorted(p for p in (out_root / OUT_PACKAGE).rglob("*") if p.is_file())


def _error_comments(tmp: Path) -> dict[str, str]:
    """Each ErrorCode value's comment in errors.proto, as one line."""
    out = tmp / "errors.pb"
    include = Path(protoc.__file__).parent / "_proto"
    code = protoc.main(["grpc_tools.protoc", f"-I{PROTO_DIR}", f"-I{include}",
                        "--include_source_info", f"--descriptor_set_out={out}",
                        "ccr/v1/errors.proto"])  # fmt: skip
    if code != 0:
        raise SystemExit(f"protoc failed with exit code {code}")
    [file] = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    [enum_index] = [i for i, e in enumerate(file.enum_type) if e.name == "ErrorCode"]
    # A group's heading ("--- Data path ---") rides on its first value's comment.
    comments = {
        tuple(loc.path): " ".join(
            " ".join(line.split())
            for line in loc.leading_comments.splitlines()
            if not line.strip().startswith("---")
        ).strip()
        for loc in file.source_code_info.location
    }
    values = file.enum_type[enum_index].value
    return {v.name: comments.get((5, enum_index, 2, i), "") for i, v in enumerate(values)}


def error_table(tmp: Path) -> str:
    """The markdown table of every error code, from the proto and the daemon."""
    sys.path.insert(0, str(ROOT))
    from linkd.core.errors import RETRIABLE, ErrorCode
    from linkd.grpc_errors import status_code_for

    comments = _error_comments(tmp)
    lines = [
        "| code | number | gRPC status | retriable | meaning |",
        "|---|---|---|---|---|",
    ]
    for code in ErrorCode:
        if code == ErrorCode.ERROR_CODE_UNSPECIFIED:
            continue
        status = status_code_for(code)
        text = comments[f"ERROR_CODE_{code.name}"].replace("|", "\\|")
        lines.append(
            f"| `{code.name}` | {int(code)} | `{status.name}` ({status.value[0]}) "
            f"| {'yes' if code in RETRIABLE else 'no'} | {text} |"
        )
    return "\n".join(lines)


def _doc_with_table(table: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    head, begin, rest = text.partition(TABLE_BEGIN)
    _old, end, tail = rest.partition(TABLE_END)
    if not begin or not end:
        raise SystemExit(f"{DOC.relative_to(ROOT)} lacks the markers {TABLE_BEGIN} ... {TABLE_END}")
    return f"{head}{TABLE_BEGIN}\n{table}\n{TABLE_END}{tail}"


def _tree(root: Path) -> dict[str, Path]:
    return {
        str(p.relative_to(root)): p
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_root = Path(tmp)
        generate(tmp_root)
        fresh = _tree(tmp_root / OUT_PACKAGE)
        target = GEN_DIR / OUT_PACKAGE
        if args.check:
            current = _tree(target) if target.exists() else {}
            stale = sorted(
                name
                for name in set(fresh) | set(current)
                if name not in fresh
                or name not in current
                or not filecmp.cmp(fresh[name], current[name], shallow=False)
            )
            stale = [f"{target.relative_to(ROOT)}/{name}" for name in stale]
            if _doc_with_table(error_table(tmp_root)) != DOC.read_text(encoding="utf-8"):
                stale.append(f"{DOC.relative_to(ROOT)} (its table of error codes)")
            if stale:
                print("generated code is stale; run: python scripts/gen_proto.py", file=sys.stderr)
                for name in stale:
                    print(f"  {name}", file=sys.stderr)
                return 1
            print(f"{target.relative_to(ROOT)}/ is current ({len(fresh)} files)")
            return 0
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(tmp_root / OUT_PACKAGE, target)
        DOC.write_text(_doc_with_table(error_table(tmp_root)), encoding="utf-8")
        print(f"wrote {len(fresh)} files under {target.relative_to(ROOT)}/ and the error table "
              f"of {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
