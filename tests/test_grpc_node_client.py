"""The gRPC API from another language: a Node.js client (@grpc/grpc-js and
@grpc/proto-loader, which scripts/test.sh installs) loads the contract from
proto/ alone, creates a link between two daemons, produces and reads back,
decodes a refusal's ErrorDetail and asks the standard health service
(examples/grpc-node/story.js, the example docs/grpc.md runs)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable

import pytest

from tests.harness import ROOT, Daemon

EXAMPLE = ROOT / "examples" / "grpc-node"
MODULES = ("@grpc/grpc-js", "@grpc/proto-loader")


def _missing() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed (scripts/test.sh installs Debian's nodejs and npm)"
    absent = [m for m in MODULES if not (EXAMPLE / "node_modules" / m).is_dir()]
    if absent:
        return (f"{', '.join(absent)} not installed under {EXAMPLE.relative_to(ROOT)} "
                "(scripts/test.sh installs them: npm install --prefix examples/grpc-node)")
    return None


def test_a_node_client_from_the_protos_alone(daemon_factory: Callable[..., Daemon]) -> None:
    missing = _missing()
    if missing:
        pytest.skip(missing)
    a, b = daemon_factory("A"), daemon_factory("B")
    done = subprocess.run(
        ["node", str(EXAMPLE / "story.js"), a.bootstrap, b.bootstrap],
        capture_output=True, text=True, timeout=180, cwd=ROOT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["health"] == ["SERVING", "SERVING"]
    refused = seen["link_refused"]
    assert refused["status"] == "INVALID_ARGUMENT"
    assert refused["detail"]["code"] == "ERROR_CODE_INVALID_LINK_CONFIG"
    assert "connection_direction is required" in refused["detail"]["message"]
    assert seen["read_on_a"] == ["hello from node", "second record"]
    assert seen["link_state"] == "LINK_STATE_FOLLOWING"
    assert seen["read_on_b"] == seen["read_on_a"]
    follower = seen["follower_write"]
    assert follower["status"] == "FAILED_PRECONDITION"
    assert follower["detail"]["code"] == "ERROR_CODE_FOLLOWER_TOPIC_NOT_WRITABLE"
    assert follower["detail"]["resource"] == "topic namespace 'orders-'"


def test_the_example_pins_its_packages() -> None:
    pinned = json.loads((EXAMPLE / "package.json").read_text())["dependencies"]
    # Exact versions: what the suite installs does not move under it.
    assert set(MODULES) <= set(pinned) and all(v[0].isdigit() for v in pinned.values())
