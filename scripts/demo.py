"""The README's main job: three clusters joined by replication links, through the CLI.

Starts three `linkd` daemons (A, B, C) on temporary data directories. A leads
the topic namespace `orders-` and the group namespace `app-` over two links,
`ab` (A to B) and `ac` (A to C). The demo produces keyed records on A and
consumes part of them there with the group `app-demo`, then shows that B and C
hold the same high watermarks and the same committed offsets. It stops B,
produces more on A (A's link `ab` turns DISCONNECTED), restarts B and prints
every state B's link passes through until FOLLOWING, with the link's recorded
history.

Then link ac is switched to SYNC: A acknowledges a record only once C holds
it. C is stalled (SIGSTOP): after link.replica.lag.time.max.ms (2 s here) the
link is OUT_OF_SYNC and A's producers go on without waiting; C resumes
(SIGCONT) and the link is IN_SYNC again.

Finally a disaster: B goes down, A acknowledges a last batch (C has it: SYNC),
then A is lost (SIGKILL). B restarts and is promoted (failover), the group
consumes the rest there from the replicated committed offsets, and B takes new
writes. C is re-pointed to follow B: `recover` reports exactly what C must
truncate (the records B never had, and the consumer groups whose committed
offsets pass the cut), `--confirm` does it, and C then holds B's log. The
verdict checks that A's and B's consumers together saw every record B holds
exactly once, and that the only records lost are the last batch A
acknowledged while B was down (the RPO of the async link ab).

Prints each command and what it answered; stops every daemon it started. Exit
0 on success, 1 when something was lost, duplicated or did not converge.
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
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
READY_TIMEOUT_S = 30.0
COMMAND_TIMEOUT_S = 30.0
WAIT_S = 20.0
STOP_TIMEOUT_S = 10.0
POLL_S = 0.1
LINK_FLAGS = ["--link-session-timeout-ms", "2000", "--link-replica-lag-time-max-ms", "2000"]
TOPIC = "orders-demo"
GROUP = "app-demo"
FIRST_BATCH = 30
SECOND_BATCH = 20
SYNC_BATCH = 10
STALL_BATCH = 5
LAST_BATCH = 5
NEW_ON_B = 5
CONSUMED_ON_A = 20
SHOWN_LINES = 4  # long outputs (one JSON line per record) are shortened


def tool(script: str, module: str) -> list[str]:
    """The console script beside this interpreter, else `python -m module`."""
    exe = BIN / script
    return [str(exe)] if exe.exists() else [sys.executable, "-m", module]


LINKD = tool("linkd", "linkd")
ADMIN = tool("ccr-admin", "admin.cli")
# Lets `python -m ...` find the project when it is not installed.
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}


class DemoError(Exception):
    """Something the demo needed did not happen."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def show(title: str) -> None:
    print(f"\n=== {title}", flush=True)


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = WAIT_S) -> Any:
    """Polls `check` until it returns something truthy; bounded."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise DemoError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(POLL_S)


class Cluster:
    """One linkd daemon: its id, address, data dir and process."""

    def __init__(self, cluster_id: str, tmp: Path) -> None:
        self.id = cluster_id
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.data_dir = tmp / f"cluster-{cluster_id}"
        self.log_path = tmp / f"linkd-{cluster_id}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def spawn(self) -> None:
        args = [
            "--cluster-id",
            self.id,
            "--listen",
            self.bootstrap,
            "--data-dir",
            str(self.data_dir),
            *LINK_FLAGS,
        ]
        print("$ " + " ".join(["linkd", *args, "&"]))
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen([*LINKD, *args], stdout=log, stderr=log, env=ENV)

    def wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise DemoError(
                    f"linkd {self.id} exited with {self.proc.returncode}; "
                    f"its log: {self.log_path.read_text(errors='replace')[-2000:]}"
                )
            probe = run_admin(self, "health", "--json", check=False)
            if probe.returncode == 0 and json.loads(probe.stdout).get("status") == "SERVING":
                print(f"linkd {self.id} (pid {self.proc.pid}) serving on {self.bootstrap}")
                return
            time.sleep(0.2)
        raise DemoError(f"linkd {self.id} did not become ready within {READY_TIMEOUT_S:g} s")

    def signal(self, signum: int, name: str) -> None:
        assert self.proc is not None
        print(f"$ kill -{name} {self.proc.pid}   # linkd {self.id}")
        os.kill(self.proc.pid, signum)

    def kill9(self) -> None:
        self.signal(signal.SIGKILL, "KILL")
        assert self.proc is not None
        self.proc.wait(timeout=STOP_TIMEOUT_S)
        self.proc = None

    def stop(self, quiet: bool = False) -> None:
        """SIGTERM, then SIGKILL if it does not stop in time."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)  # a stalled daemon would not act on SIGTERM
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=STOP_TIMEOUT_S)
        if not quiet:
            print(f"linkd {self.id} (pid {proc.pid}) stopped, exit code {proc.returncode}")
        self.proc = None


CLUSTERS: dict[str, Cluster] = {}


def shown(text: str) -> str:
    """A command line for the reader: addresses written as $A, $B, $C."""
    for c in CLUSTERS.values():
        text = text.replace(c.bootstrap, f"${c.id}")
    return text


# ccr-admin's exit code for an answer that holds here but is not confirmed by
# the other cluster (docs/operations.md, "pending").
EXIT_PENDING = 3


def run_admin(
    c: Cluster, *args: str, stdin: str | None = None, check: bool = True,
    pending_ok: bool = False,
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [*ADMIN, "--bootstrap", c.bootstrap, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        env=ENV,
    )
    pending = pending_ok and result.returncode == EXIT_PENDING
    if check and result.returncode != 0 and not pending:
        raise DemoError(
            f"ccr-admin {shown(' '.join(args))} on {c.id} exited {result.returncode}: "
            f"{result.stderr.strip()}"
        )
    return result


def admin(
    c: Cluster, *args: str, stdin: str | None = None, piped: str = "", brief: bool = False,
    pending_ok: bool = False,
) -> str:
    """Runs ccr-admin against a cluster and prints the command and its answer;
    `piped` is the shell command that would write `stdin`; `pending_ok`: the
    other cluster is down, so a pending answer (exit 3) is the expected one."""
    prefix = f"{piped} | " if piped else ""
    print(f"$ {prefix}ccr-admin --bootstrap ${c.id} {shown(' '.join(args))}", flush=True)
    result = run_admin(c, *args, stdin=stdin, pending_ok=pending_ok)
    if result.returncode == EXIT_PENDING:
        print(shown(result.stderr.strip()))
    out = result.stdout.rstrip()
    lines = out.splitlines()
    if brief and len(lines) > SHOWN_LINES:
        print("\n".join(lines[:SHOWN_LINES]))
        print(f"... ({len(lines) - SHOWN_LINES} more lines)")
    elif out:
        print(out)
    return out


def query(c: Cluster, *args: str) -> Any:
    """ccr-admin --json, quietly (for polling); None when it fails."""
    result = run_admin(c, *args, "--json", check=False)
    if result.returncode != 0:
        return None
    return json.loads(result.stdout)


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def high_watermarks(c: Cluster) -> list[int] | None:
    topic = query(c, "describe-topic", TOPIC)
    return None if topic is None else [p["high_watermark"] for p in topic["partitions"]]


def committed(c: Cluster) -> dict[int, int]:
    group = query(c, "describe-group", GROUP)
    if group is None:
        return {}
    return {
        o["partition"]: o["committed"]
        for o in group["offsets"]
        if o["topic"] == TOPIC and o["committed"] >= 0
    }


def link_state(c: Cluster, link: str) -> str | None:
    described = query(c, "describe-link", link)
    return None if described is None else described["state"]


def records(topic_json: str, produced: list[str]) -> list[tuple[int, int, str]]:
    """(partition, offset, value) of each acknowledgement, with the value sent."""
    acks = json_lines(topic_json)
    if len(acks) != len(produced):
        raise DemoError(f"{len(produced)} records sent, {len(acks)} acknowledged")
    return [(a["partition"], a["offset"], v) for a, v in zip(acks, produced, strict=True)]


def produce(c: Cluster, first: int, count: int, label: str = "order") -> list[tuple[int, int, str]]:
    lines = [f"customer-{i % 5}:{label} #{i}" for i in range(first, first + count)]
    out = admin(
        c,
        "produce",
        TOPIC,
        "--key-separator",
        ":",
        "--json",
        stdin="\n".join(lines) + "\n",
        piped=(
            f"for i in $(seq {first} {first + count - 1}); "
            f'do echo "customer-$((i % 5)):{label} #$i"; done'
        ),
        brief=True,
    )
    return records(out, [line.split(":", 1)[1] for line in lines])


def consume(c: Cluster, *extra: str) -> list[tuple[int, int, str]]:
    out = admin(
        c, "consume", TOPIC, "--group", GROUP, "--from-beginning", *extra, "--json", brief=True
    )
    return [(r["partition"], r["offset"], r["value"]) for r in json_lines(out)]


def comparison_table(clusters: list[Cluster]) -> tuple[bool, str]:
    """Partition, HW and committed offset on each cluster; whether all agree."""
    hws = {c.id: high_watermarks(c) or [] for c in clusters}
    offsets = {c.id: committed(c) for c in clusters}
    ids = [c.id for c in clusters]
    partitions = max(len(h) for h in hws.values())
    header = ["PARTITION", *[f"HW-{i}" for i in ids], *[f"COMMITTED-{i}" for i in ids]]
    rows = [header]
    for p in range(partitions):
        row = [str(p)]
        row += [str(hws[i][p]) if p < len(hws[i]) else "-" for i in ids]
        row += [str(offsets[i].get(p, "-")) for i in ids]
        rows.append(row)
    widths = [max(len(r[k]) for r in rows) for k in range(len(header))]
    text = "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )
    same = all(hws[i] == hws[ids[0]] for i in ids) and all(
        offsets[i] == offsets[ids[0]] for i in ids
    )
    return same, text


def print_history(cluster_id: str, described: dict[str, Any], link: str = "ab") -> None:
    """A link's recorded state changes, with the time each was entered (UTC)."""
    print(f"history of link {link} on {cluster_id} (from describe-link):")
    for h in described["history"]:
        at = datetime.fromtimestamp(h["entered_at_ms"] / 1000, UTC)
        print(f"  {at:%Y-%m-%d %H:%M:%S}.{at.microsecond // 1000:03d}  {h['state']}")


def converged(leader: Cluster, followers: list[Cluster]) -> bool:
    want_hw, want_offsets = high_watermarks(leader), committed(leader)
    return all(high_watermarks(f) == want_hw and committed(f) == want_offsets for f in followers)


def run(tmp: Path) -> bool:
    a, b, c = (Cluster(i, tmp) for i in "ABC")
    CLUSTERS.update({x.id: x for x in (a, b, c)})

    show("start three clusters (a link without contact for 2 s is DISCONNECTED)")
    print("  ".join(f"{x.id}={x.bootstrap}" for x in (a, b, c)))
    for x in (a, b, c):
        x.spawn()
    for x in (a, b, c):
        x.wait_ready()

    show("namespaces on every cluster: topics orders-*, groups app-*")
    for x in (a, b, c):
        admin(x, "create-namespace", "--type", "topic", "--prefix", "orders-")
        admin(x, "create-namespace", "--type", "group", "--prefix", "app-")

    show("links ab (A to B) and ac (A to C), created on A; A leads both namespaces")
    for link, remote in (("ab", b), ("ac", c)):
        admin(a, "create-link", link, "--remote", remote.bootstrap)
        for kind, prefix in (("topic", "orders-"), ("group", "app-")):
            admin(
                a,
                "attach-namespace",
                "--link",
                link,
                "--type",
                kind,
                "--local-prefix",
                prefix,
                "--remote-prefix",
                prefix,
                "--leader",
                "local",
            )

    show(f"create {TOPIC} on A, produce {FIRST_BATCH} keyed records")
    admin(a, "create-topic", TOPIC, "--partitions", "3")
    produced = produce(a, 0, FIRST_BATCH)

    show(f"consume {CONSUMED_ON_A} of them on A with group {GROUP} (commits at the end)")
    consumed_a = consume(a, "--max-messages", str(CONSUMED_ON_A))
    admin(a, "describe-group", GROUP)

    show("B and C: same high watermarks, same committed offsets as A")
    started = time.monotonic()
    wait_for("B and C to match A", lambda: converged(a, [b, c]))
    print(
        f"(polled `ccr-admin describe-topic {TOPIC}` and `describe-group {GROUP}` on A, B "
        f"and C until they matched: {time.monotonic() - started:.1f} s)"
    )
    admin(b, "describe-group", GROUP)
    same, table = comparison_table([a, b, c])
    print(table)
    if not same:
        raise DemoError("B or C disagree with A")

    show("stop B; produce while it is down; A's link ab turns DISCONNECTED")
    b.stop()
    produced += produce(a, FIRST_BATCH, SECOND_BATCH)
    started = time.monotonic()
    wait_for("ab DISCONNECTED on A", lambda: link_state(a, "ab") == "DISCONNECTED")
    print(
        f"(polled `ccr-admin describe-link ab` on A: DISCONNECTED after "
        f"{time.monotonic() - started:.1f} s)"
    )
    admin(a, "describe-link", "ab")

    show("restart B on the same data dir and port; watch its link ab until FOLLOWING")
    b.spawn()
    b.wait_ready()
    observed: list[str] = []
    deadline = time.monotonic() + WAIT_S
    while True:
        state = link_state(b, "ab")
        if state is not None and (not observed or observed[-1] != state):
            observed.append(state)
            print(f"  B's link ab is {state}")
        if state == "FOLLOWING" and high_watermarks(b) == high_watermarks(a):
            break
        if time.monotonic() > deadline:
            raise DemoError(f"B's link ab did not reach FOLLOWING; saw {observed}")
        time.sleep(POLL_S)
    described = json.loads(admin(b, "describe-link", "ab", "--json"))
    history_b = [h["state"] for h in described["history"]]
    print(f"states seen by polling B's describe-link ab: {' -> '.join(observed)}")
    print_history("B", described)
    print_history("A", json.loads(admin(a, "describe-link", "ab", "--json")))
    if "CATCHING_UP" in observed or "CATCHING_UP" in history_b:
        print("B's link ab passed through CATCHING_UP on its way to FOLLOWING")
    else:
        print(
            "note: CATCHING_UP was neither seen by polling nor recorded in B's history: "
            "after the restart B's link went from DISCONNECTED straight to FOLLOWING, "
            "with no lag recorded in between"
        )
    wait_for("B and C to match A again", lambda: converged(a, [b, c]))
    same, table = comparison_table([a, b, c])
    print(table)
    if not same:
        raise DemoError("after the restart B or C disagree with A")

    show("switch link ac to SYNC: A acknowledges a record only once C holds it")
    admin(a, "set-mode", "--link", "ac", "sync")
    wait_for(
        "ac IN_SYNC on A and C", lambda: link_state(a, "ac") == link_state(c, "ac") == "IN_SYNC"
    )
    first = FIRST_BATCH + SECOND_BATCH
    produced += produce(a, first, SYNC_BATCH)
    print(f"C's high watermarks right after the acknowledgements: {high_watermarks(c)}")
    first += SYNC_BATCH

    show("stall C (SIGSTOP): after 2 s A stops waiting for it (OUT_OF_SYNC)")
    assert c.proc is not None
    c.signal(signal.SIGSTOP, "STOP")
    started = time.monotonic()
    produced += produce(a, first, STALL_BATCH)
    first += STALL_BATCH
    print(
        f"(A acknowledged {STALL_BATCH} records {time.monotonic() - started:.1f} s after they "
        "were sent: the first waited for C until the link dropped out of sync)"
    )
    wait_for("ac OUT_OF_SYNC on A", lambda: link_state(a, "ac") == "OUT_OF_SYNC")
    admin(a, "describe-link", "ac")
    c.signal(signal.SIGCONT, "CONT")
    wait_for("ac IN_SYNC again", lambda: link_state(a, "ac") == link_state(c, "ac") == "IN_SYNC")
    print_history("A", json.loads(admin(a, "describe-link", "ac", "--json")), "ac")
    wait_for("C to match A", lambda: high_watermarks(c) == high_watermarks(a))

    show("disaster: B goes down, A acknowledges one more batch (C has it), A is lost")
    wait_for("B to match A", lambda: high_watermarks(b) == high_watermarks(a))
    b.stop()
    last = produce(a, first, LAST_BATCH)
    produced += last
    first += LAST_BATCH
    wait_for("C to hold the last batch", lambda: high_watermarks(c) == high_watermarks(a))
    a.kill9()
    print("A is gone. B lacks the last batch; C has it.")

    show("B restarts and is promoted (failover --force: its link ab cannot reach A)")
    b.spawn()
    b.wait_ready()
    admin(b, "failover", "--link", "ab", "--force")
    # The group's first join on B waits group.initial.rebalance.delay.ms (3 s,
    # Kafka's default) before any record comes: wait longer than that.
    consumed_b = consume(b, "--timeout-ms", "8000")
    admin(b, "describe-group", GROUP)
    new_on_b = produce(b, first, NEW_ON_B, "written-on-B")

    show("C follows B from now on: what must C truncate first? (report only)")
    print("(C drops its link to the lost A; its namespaces stay reserved, nothing is writable)")
    # A is lost: the deletion holds on C and is pending for A (exit 3), which
    # learns it if it ever comes back.
    admin(c, "delete-link", "ac", pending_ok=True)
    admin(c, "create-link", "cb", "--remote", b.bootstrap)
    recover = ("recover", "--link", "cb", "--namespace", "orders-", "--group-namespace", "app-")
    report = json.loads(admin(c, *recover, "--json"))
    admin(c, *recover)
    lost_on_c = sum(p["local_records_lost"] for p in report["partitions"])
    print(f"C would lose {lost_on_c} records (A's last batch: {len(last)} records)")

    show("recover --confirm: C truncates, moves its group offsets back, follows B")
    admin(c, *recover, "--confirm")
    wait_for("C to match B", lambda: high_watermarks(c) == high_watermarks(b), 60)
    same, table = comparison_table([b, c])
    print(table)
    admin(c, "provenance", TOPIC)

    show("verdict")
    b_holds = sorted(r for r in produced if r not in last)
    got = sorted(consumed_a + consumed_b)
    seen = set(got)
    duplicates = sorted({r for r in got if got.count(r) > 1})
    missing = sorted(set(b_holds) - seen)
    unexpected = sorted(seen - set(produced))
    print(
        f"produced on A: {len(produced)} records; consumed on A: {len(consumed_a)}; "
        f"consumed on B after failover: {len(consumed_b)}; written on B: {len(new_on_b)}"
    )
    print(
        f"lost at failover (acknowledged by A while B was down): {len(last)}; "
        f"C truncated: {lost_on_c}"
    )
    print(
        f"duplicates: {len(duplicates)}; missing: {len(missing)}; "
        f"not produced (or changed): {len(unexpected)}"
    )
    for label, items in (
        ("duplicate", duplicates),
        ("missing", missing),
        ("unexpected", unexpected),
    ):
        for p, o, v in items[:5]:
            print(f"  {label}: partition {p} offset {o} value {v!r}")
    ok = not duplicates and not missing and not unexpected and lost_on_c == len(last) and same
    if ok:
        print(
            "every record B holds was consumed exactly once, on A before the disaster or on B "
            "after it, at the same partition and offset; C dropped exactly A's last batch and "
            "now holds B's log"
        )
    return ok


def _terminated(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through `finally`: the daemons are stopped


def main() -> int:
    signal.signal(signal.SIGTERM, _terminated)
    ok = False
    with tempfile.TemporaryDirectory(prefix="ccr-demo-") as tmp:
        try:
            ok = run(Path(tmp))
        except (DemoError, subprocess.TimeoutExpired) as exc:
            print(f"\ndemo FAILED: {exc}", file=sys.stderr)
        finally:
            show("stop every daemon")
            for c in CLUSTERS.values():
                c.stop()
    if not ok:
        print("demo FAILED", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
