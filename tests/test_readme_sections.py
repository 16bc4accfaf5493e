"""The README works section by section: scripts/readme_check.py runs each one
alone, and the checker itself fails where it should (small READMEs of its own)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness import ROOT, _env

CHECK = ROOT / "scripts" / "readme_check.py"
VENV_BIN = ROOT / ".venv" / "bin"
# The whole README takes about two minutes on two cores; the bound is generous.
README_TIMEOUT_S = 900.0
SMALL_TIMEOUT_S = 120.0

needs_venv = pytest.mark.skipif(
    not (VENV_BIN / "python").exists(),
    reason="needs the checkout's .venv (bash scripts/setup.sh), which the sections run in",
)


def check(*args: str, timeout_s: float = SMALL_TIMEOUT_S,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECK), *args], capture_output=True, text=True,
        timeout=timeout_s, cwd=str(ROOT), env={**_env(), **(env or {})}, check=False,
    )  # fmt: skip


def small_readme(tmp_path: Path, text: str) -> str:
    path = tmp_path / "README.md"
    path.write_text(text)
    return str(path)


@needs_venv
@pytest.mark.slow
def test_every_readme_section_runs_alone_in_a_seeded_order() -> None:
    # Three sections at once: most of a section's time is its daemons and
    # clients waiting on each other, and each section uses ports of its own.
    done = check("--seed", "1", "--jobs", "3", timeout_s=README_TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    verdicts = [line for line in done.stdout.splitlines() if line.startswith(("PASS", "FAIL"))]
    assert len(verdicts) >= 10 and all(v.startswith("PASS") for v in verdicts), done.stdout


@needs_venv
def test_every_section_of_the_grpc_page_runs_alone() -> None:
    """docs/grpc.md's examples: health and reflection, the record batch in hex,
    and a Node.js client (npm installs its two gRPC packages if needed)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed (scripts/test.sh installs Debian's)")
    done = check("--readme", str(ROOT / "docs" / "grpc.md"), "--seed", "1",
                 timeout_s=SMALL_TIMEOUT_S * 3)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    verdicts = [line for line in done.stdout.splitlines() if line.startswith(("PASS", "FAIL"))]
    assert len(verdicts) == 3 and all(v.startswith("PASS") for v in verdicts), done.stdout


@needs_venv
def test_a_failing_section__fails_with_its_output__the_others_still_run(tmp_path: Path) -> None:
    readme = small_readme(tmp_path, "\n".join([
        "# Good", "```bash", "echo fine", "```",
        "## Bad", "```bash", "echo before the failure", "false", "echo never", "```",
        "## Python", "```python", "import sys", "print('from python', sys.version_info[0])",
        "```", "",
    ]))  # fmt: skip
    done = check("--readme", readme, "--seed", "3")
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert "PASS" in out and "README.md:1  Good" in out
    assert "FAIL" in out and "Bad" in out and "exit status 1" in out
    assert "before the failure" in out and "never" not in out.split("Bad", 1)[1]
    assert "2 of 3 sections passed" in out


@needs_venv
def test_a_daemon_left_running__its_process_group_is_stopped(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    readme = small_readme(tmp_path, "\n".join([
        "# Leaves a process", "```bash", 'sleep 300 &', 'echo $! > "$PID_FILE"', "```", "",
    ]))  # fmt: skip
    done = check("--readme", readme, env={"PID_FILE": str(pid_file)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "left processes running; they were stopped" in done.stdout
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(pid):
        assert time.monotonic() < deadline, f"pid {pid} still runs"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@needs_venv
def test_a_section_gets_a_scratch_dir_of_its_own_removed_afterwards(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    readme = small_readme(tmp_path, "\n".join([
        "# One", "```bash", 'mktemp -d >> "$SEEN"', "```",
        "# Two", "```bash", 'mktemp -d >> "$SEEN"', "```", "",
    ]))  # fmt: skip
    done = check("--readme", readme, env={"SEEN": str(seen)})
    assert done.returncode == 0, done.stdout + done.stderr
    dirs = [Path(line) for line in seen.read_text().split()]
    assert len(dirs) == 2 and dirs[0].parent != dirs[1].parent
    assert not any(d.exists() for d in dirs)


@needs_venv
def test_blocks_not_run__their_verbs_and_options_are_still_checked(tmp_path: Path) -> None:
    readme = small_readme(tmp_path, "\n".join([
        "# Fine", "<!-- readme-check: skip (an hour) -->", "```bash",
        "ccr-chaos --runs 100   # many seeds", 'ccr-sim sweep x.toml --out "$(mktemp -d)"',
        "```",
        "# Misspelt option", "<!-- readme-check: skip (slow) -->", "```bash",
        "ccr-admin --bootstrap 127.0.0.1:1 create-topic t --partitionz 3", "```",
        "# Unknown verb", "<!-- readme-check: skip (slow) -->", "```bash",
        "ccr-sim no-such-verb", "```",
        "# Missing script", "<!-- readme-check: skip (slow) -->", "```bash",
        "bash scripts/no-such.sh", "```", "",
    ]))  # fmt: skip
    done = check("--readme", readme, timeout_s=SMALL_TIMEOUT_S * 2)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("PASS") and "Fine" in line for line in lines), done.stdout
    assert "unknown option --partitionz" in done.stdout
    assert "`ccr-sim no-such-verb`: --help exits 2" in done.stdout
    assert "scripts/no-such.sh does not exist" in done.stdout
    assert "1 of 4 sections passed" in done.stdout


@needs_venv
def test_a_port_held_by_another_process__the_section_fails_saying_so(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        readme = small_readme(tmp_path, "\n".join([
            "# Uses a port", "```bash", f"echo would serve on 127.0.0.1:{port}", "```", "",
        ]))  # fmt: skip
        done = check("--readme", readme, "--port-wait-s", "0")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"port(s) [{port}] held by another process" in done.stdout
