"""The README's main job: one cluster, end to end, through the CLI.

Starts `linkd` on a temporary data directory, creates a topic, produces records
from stdin, consumes them back, kills the daemon with SIGKILL, restarts it and
shows that every acknowledged record is still there at its offset. Prints each
command and what it answered; stops the daemon it started. Exit 0 on success.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
LINKD = [str(BIN / "linkd")]
ADMIN = [str(BIN / "ccr-admin")]
READY_TIMEOUT_S = 30.0
COMMAND_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def show(title: str) -> None:
    print(f"\n=== {title}")


def admin(bootstrap: str, *args: str, stdin: str | None = None) -> str:
    cmd = [*ADMIN, "--bootstrap", bootstrap, *args]
    print("$ " + " ".join(["ccr-admin", "--bootstrap", bootstrap, *args]))
    result = subprocess.run(
        cmd, input=stdin, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
    )
    if result.returncode != 0:
        raise SystemExit(
            f"demo failed: {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}"
        )
    out = result.stdout.rstrip()
    if out:
        print(out)
    return out


def start_daemon(data_dir: Path, port: int, log_path: Path) -> subprocess.Popen[bytes]:
    cmd = [
        *LINKD,
        "--cluster-id",
        "A",
        "--listen",
        f"127.0.0.1:{port}",
        "--data-dir",
        str(data_dir),
    ]
    print("$ " + " ".join(["linkd", *cmd[1:]]))
    log = log_path.open("ab")
    proc = subprocess.Popen(cmd, stdout=log, stderr=log)
    deadline = time.monotonic() + READY_TIMEOUT_S
    bootstrap = f"127.0.0.1:{port}"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"linkd exited with {proc.returncode}; see {log_path}")
        probe = subprocess.run(
            [*ADMIN, "--bootstrap", bootstrap, "health", "--json"],
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        if probe.returncode == 0 and json.loads(probe.stdout).get("status") == "SERVING":
            print(f"linkd pid {proc.pid} serving on {bootstrap}")
            return proc
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"linkd did not become ready within {READY_TIMEOUT_S}s; see {log_path}")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="ccr-demo-") as tmp:
        data_dir = Path(tmp) / "cluster-A"
        log_path = Path(tmp) / "linkd.log"
        port = free_port()
        bootstrap = f"127.0.0.1:{port}"
        proc = start_daemon(data_dir, port, log_path)
        try:
            show("create a topic with 3 partitions")
            admin(bootstrap, "create-topic", "orders", "--partitions", "3")

            show("produce 6 keyed records from stdin (key:value per line)")
            lines = "\n".join(f"customer-{i % 3}:order #{i}" for i in range(6)) + "\n"
            produced = admin(
                bootstrap, "produce", "orders", "--key-separator", ":", "--json", stdin=lines
            )
            acked = [json.loads(line) for line in produced.splitlines() if line.strip()]

            show("consume them back")
            consumed = admin(
                bootstrap, "consume", "orders", "--from-beginning", "--max-messages", "6", "--json"
            )
            records = [json.loads(line) for line in consumed.splitlines() if line.strip()]

            show("describe the topic (offsets per partition)")
            admin(bootstrap, "describe-topic", "orders")

            show("kill -9 the daemon, restart it on the same data dir")
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=COMMAND_TIMEOUT_S)
            print(f"killed pid {proc.pid} with SIGKILL")
            proc = start_daemon(data_dir, port, log_path)
            after = admin(
                bootstrap, "consume", "orders", "--from-beginning", "--max-messages", "6", "--json"
            )
            survived = [json.loads(line) for line in after.splitlines() if line.strip()]

            show("what happened")
            where = {(r["partition"], r["offset"]): r["value"] for r in survived}
            missing = [a for a in acked if (a["partition"], a["offset"]) not in where]
            print(
                f"acknowledged: {len(acked)} records; consumed before the crash: "
                f"{len(records)}; readable after kill -9 and restart: {len(survived)}; "
                f"missing: {len(missing)}"
            )
            if missing or len(records) != len(acked) or len(survived) != len(acked):
                print("demo FAILED: records were lost", file=sys.stderr)
                return 1
            print("every acknowledged record is readable at its acknowledged offset")
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=COMMAND_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
            print(f"\nlinkd stopped (exit code {proc.returncode})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
