"""The linkd command: clear start-up errors, config files, clean shutdown."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness import ROOT, Daemon, free_port

START_TIMEOUT_S = 30.0


def run_linkd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "linkd", *args],
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S,
        cwd=ROOT,
    )


def test_port_in_use__exits_3_naming_the_address(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_linkd(
            "--cluster-id", "A", "--listen", f"127.0.0.1:{port}", "--data-dir", str(tmp_path / "d")
        )
    assert result.returncode == 3
    assert f"127.0.0.1:{port}" in result.stderr and "cannot listen" in result.stderr


def test_data_dir_of_another_cluster__exits_3_naming_both_ids(
    daemon_factory: Any, tmp_path: Path
) -> None:
    a = daemon_factory("A")
    a.terminate()
    result = run_linkd(
        "--cluster-id", "B", "--listen", f"127.0.0.1:{free_port()}", "--data-dir", str(a.data_dir)
    )
    assert result.returncode == 3
    assert "'A'" in result.stderr and "'B'" in result.stderr


def test_data_dir_that_is_a_file__exits_3(tmp_path: Path) -> None:
    path = tmp_path / "not-a-dir"
    path.write_text("x")
    result = run_linkd(
        "--cluster-id", "A", "--listen", f"127.0.0.1:{free_port()}", "--data-dir", str(path)
    )
    assert result.returncode == 3 and str(path) in result.stderr


def test_second_daemon_on_the_same_data_dir__exits_3(daemon_factory: Any) -> None:
    a = daemon_factory("A")
    result = run_linkd(
        "--cluster-id", "A", "--listen", f"127.0.0.1:{free_port()}", "--data-dir", str(a.data_dir)
    )
    assert result.returncode == 3 and "in use" in result.stderr


def test_bad_arguments_and_config__exit_2(tmp_path: Path) -> None:
    assert run_linkd("--listen", "127.0.0.1:1").returncode == 2  # no cluster id, no data dir
    result = run_linkd("--cluster-id", "A", "--data-dir", "x", "--listen", "nowhere")
    assert result.returncode == 2 and "HOST:PORT" in result.stderr
    config = tmp_path / "linkd.toml"
    config.write_text('cluster_id = "A"\ndata_dir = "x"\ncolour = "blue"\n')
    result = run_linkd("--config", str(config))
    assert result.returncode == 2 and "colour" in result.stderr


def test_bad_authorizer_settings__exit_2_naming_the_problem(tmp_path: Path) -> None:
    base = ("--cluster-id", "A", "--data-dir", str(tmp_path / "data"))
    result = run_linkd(*base, "--authorizer", "simple")
    assert result.returncode == 2 and "--authorizer must be one of none, acl" in result.stderr
    result = run_linkd(*base, "--authorizer", "acl", "--super-users", "User:admin;ops")
    assert result.returncode == 2 and "'ops' is not 'Type:name'" in result.stderr
    config = tmp_path / "linkd.toml"
    config.write_text(f'cluster_id = "A"\ndata_dir = "{tmp_path}"\nsuper_users = 3\n')
    result = run_linkd("--config", str(config))
    assert result.returncode == 2 and "super_users" in result.stderr


def test_authorizer_settings_from_a_config_file(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "linkd.toml"
    config.write_text(
        f'cluster_id = "C"\nlisten = "127.0.0.1:{port}"\ndata_dir = "{tmp_path / "data"}"\n'
        'authorizer = "acl"\nsuper_users = ["User:admin", "User:ops"]\n'
    )
    with Daemon("C", tmp_path / "data", port=port) as daemon:
        daemon.terminate()
        daemon.command = lambda: [sys.executable, "-m", "linkd", "--config", str(config)]  # type: ignore[method-assign]
        daemon.start()
        daemon.wait_ready()
        logs = [json.loads(x) for x in daemon.stderr_text().splitlines() if x.startswith("{")]
    serving = [entry for entry in logs if entry["msg"] == "serving"][-1]
    assert serving["authorizer"] == "acl" and serving["super_users"] == "User:admin;User:ops"


def test_config_file__starts_the_daemon__and_sigterm_stops_it_cleanly(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "linkd.toml"
    config.write_text(
        f'cluster_id = "C"\nlisten = "127.0.0.1:{port}"\n'
        f'data_dir = "{tmp_path / "data"}"\nfsync = "never"\n'
    )
    daemon = Daemon("C", tmp_path / "data", port=port)
    daemon.command = lambda: [sys.executable, "-m", "linkd", "--config", str(config)]  # type: ignore[method-assign]
    daemon.start()
    daemon.wait_ready()
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGTERM)
    assert daemon.proc.wait(timeout=START_TIMEOUT_S) == 0
    logs = [json.loads(line) for line in daemon.stderr_text().splitlines() if line.startswith("{")]
    messages = [entry["msg"] for entry in logs]
    assert "serving" in messages and "stopped" in messages
    serving = next(entry for entry in logs if entry["msg"] == "serving")
    assert serving["cluster_id"] == "C" and serving["fsync"] == "never"


def test_the_daemon_s_process_never_loads_the_test_data_library() -> None:
    # kio registers its types with Hypothesis whenever it can import it (the
    # test tools are installed here); the daemon's entry point refuses that
    # import in its own process, a third of a second of every start.
    code = (
        "import sys\n"
        "sys.argv = ['linkd', '--help']\n"
        "from linkd.__main__ import run\n"
        "try:\n"
        "    run()\n"
        "except SystemExit:\n"
        "    pass\n"
        "import kio.static._phantom as phantom\n"
        "print('loaded' if phantom.hypothesis is not None else 'refused')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=START_TIMEOUT_S,
        cwd=ROOT, check=True,
    )  # fmt: skip
    assert done.stdout.splitlines()[-1] == "refused", done.stdout
