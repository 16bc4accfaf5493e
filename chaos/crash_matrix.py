"""`ccr-chaos crash-matrix`: a kill -9 of either side at every checkpoint of
`reverse`, `failover` and `recover`, between real daemons.

The procedures are durable plans (linkd/core/plans.py) that name a
checkpoint after each journalled step, and after each namespace of the steps
that move several (linkd/core/procedures.py; listed by
`sim.operator_moves.reverse_points`, `failover_points`, `recover_points`).
The daemon's test-only hooks (linkd/test_hooks.py) crash a daemon there:
`LINKD_TEST_EXIT_AT` makes the cluster running the procedure exit as kill -9
would ("local"); `LINKD_TEST_KILL_AT` makes it SIGKILL the other cluster's
daemon, by PID, at that point ("remote"); a remote's own points while it
serves a procedure (`test_hooks.SERVE_POINTS`, e.g. `serve:promote`) make
the remote exit ("remote" too).

One case, on two fresh daemons A and B (127.0.0.1 only, a directory of its
own): A leads a topic namespace `orders-` and a group namespace `app-` to B
on link `ab`, with records acknowledged on A and copied to B. Then:

- reverse: `reverse` on A, crashed at the point;
- failover: `failover` on B with A alive, crashed at the point;
- recover: B failed over (A alive, two writers), B and A each took writes
  (A's are its tail, to be cut and reported), then `recover --confirm` on A,
  crashed at the point.

The crashed daemon is restarted; if the cluster that ran the procedure
still holds its plan (`describe-link` shows `procedure`), the procedure is
run once more there (docs/operations.md: the one re-run that finishes it).
After a failover that made B writable with A alive, the documented finishing
command runs: `recover --confirm` on A. The judge then demands:

- each namespace writable (not reserved, following nothing) on exactly one
  cluster;
- every acknowledged record present on that writer, unless a report names
  it: it lies (by the partition and offset its acknowledgement gave) in a
  range a procedure's answer gave up (a failover's abandoned row: from the
  follower's readable position to the source's high watermark, or upwards
  when the lag is not known; a recovery's cut) or, when the answer that named
  a cut was lost in the crash, in a cut the partition's provenance records
  (`truncated`: where docs/operations.md sends an operator whose answer is
  unknown);
- a record written on the writer reaching the other cluster.

Cases run in child processes (`--jobs` at a time), each bounded in time;
every daemon is ended by the PID its case started.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from admin import AdminClient, Consumer, Producer, TopicPartition
from chaos.admin_cli import cli_in_process
from chaos.daemons import ROOT, Daemon, DaemonError
from linkd.test_hooks import EXIT_AT_ENV, KILL_AT_ENV, SERVE_POINTS
from sim.operator_moves import failover_points, recover_points, reverse_points

PROCEDURES = ("reverse", "failover", "recover")
SIDES = ("local", "remote")
LINK_FLAGS = ("--link-session-timeout-ms", "3000")
# The two namespaces every case moves (a crash can fall between them).
NAMESPACES = (("topic", "orders-"), ("group", "app-"))
TOPIC = "orders-x"
RECORDS = 30  # acknowledged on A before the procedure
B_RECORDS = 2  # recover: acknowledged on B after its failover
A_TAIL = 3  # recover: acknowledged on A after B's failover (cut, reported)
WAIT_S = 90.0  # generous: the machine may be loaded
READY_S = 180.0
CASE_TIMEOUT_S = 600.0
DEFAULT_JOBS = 2


@dataclass(frozen=True, slots=True)
class Case:
    """One crash: where (`point`) in which procedure, of which side."""

    procedure: str
    point: str
    side: str  # "local": the cluster running the procedure; "remote": the other

    @property
    def name(self) -> str:
        return f"{self.procedure} {self.point} {self.side}"

    def args(self) -> list[str]:
        return ["--procedure", self.procedure, "--point", self.point, "--side", self.side]


def checkpoints(procedure: str) -> list[str]:
    """The core's checkpoints of `procedure`, with two namespaces moved."""
    if procedure == "reverse":
        return reverse_points(len(NAMESPACES))
    if procedure == "failover":
        return failover_points()
    return recover_points(len(NAMESPACES))


def cases() -> list[Case]:
    """Every case: each checkpoint of each procedure, crashing either side,
    and each point a remote reaches while it serves the procedure."""
    out: list[Case] = []
    for procedure in PROCEDURES:
        for point in checkpoints(procedure):
            out += [Case(procedure, point, side) for side in SIDES]
        out += [Case(procedure, point, "remote") for point in SERVE_POINTS.get(procedure, ())]
    return out


def select(procedure: str | None, point: str | None, side: str | None) -> list[Case]:
    return [
        c
        for c in cases()
        if (procedure is None or c.procedure == procedure)
        and (point is None or c.point == point)
        and (side is None or c.side == side)
    ]


@dataclass
class CaseResult:
    case: Case
    ok: bool
    failures: list[str]
    wall_s: float
    # What happened: each call's exit code and answer, the writer found.
    story: list[str] = field(default_factory=list)
    writers: dict[str, list[str]] = field(default_factory=dict)
    # The ranges the answers named as given up (each as `Named.text`).
    named: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "procedure": self.case.procedure,
            "point": self.case.point,
            "side": self.case.side,
            "ok": self.ok,
            "failures": self.failures,
            "wall_s": round(self.wall_s, 1),
            "writers": self.writers,
            "named": self.named,
            "story": self.story,
        }

    @staticmethod
    def from_json(obj: dict[str, Any]) -> CaseResult:
        case = Case(str(obj["procedure"]), str(obj["point"]), str(obj["side"]))
        return CaseResult(
            case, bool(obj["ok"]), list(obj["failures"]), float(obj["wall_s"]),
            list(obj.get("story", [])), dict(obj.get("writers", {})),
            list(obj.get("named", [])),
        )  # fmt: skip


class CaseFailed(Exception):
    """A step of the case's story could not be done (setup, a wait)."""


# -- calls through ccr-admin (in this process) and the client library ------------------------


@dataclass(frozen=True, slots=True)
class Answer:
    code: int
    json: dict[str, Any] | None
    stderr: str


def ccr(bootstrap: str, *args: str) -> Answer:
    """`ccr-admin --bootstrap B ARGS --json`: exit code and JSON answer."""
    done = cli_in_process(["--bootstrap", bootstrap, *args, "--json"])
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    answer: dict[str, Any] | None = None
    if len(lines) == 1:
        try:
            parsed = json.loads(lines[0])
        except ValueError:
            parsed = None
        answer = parsed if isinstance(parsed, dict) else None
    return Answer(done.returncode, answer, done.stderr.strip())


def ccr_ok(bootstrap: str, *args: str) -> dict[str, Any]:
    answer = ccr(bootstrap, *args)
    if answer.code != 0 or answer.json is None:
        raise CaseFailed(f"{' '.join(args)}: exit {answer.code}: {answer.stderr}")
    return answer.json


# Refusals of a procedure's first check while the link is not FOLLOWING or
# its lag is not known (after a restart, or a session lost on a loaded
# machine): nothing changed (a refusal journals nothing), and the answer says
# to wait, so the call is made again until the check passes.
WAIT_CODES = ("LAG_NOT_KNOWN", "LINK_NOT_FOLLOWING")


def ccr_when_following(d: Daemon, *args: str, crashes: Daemon | None = None) -> Answer:
    """The call on `d`, repeated (bounded) while it is refused with one of
    WAIT_CODES and both `d` and the daemon a hook crashes still run (a
    refusal after the crash is the case's outcome, not a wait)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        answer = ccr(d.bootstrap, *args)
        if (
            not any(code in answer.stderr for code in WAIT_CODES)
            or not d.running
            or (crashes is not None and not crashes.running)
            or time.monotonic() >= deadline
        ):
            return answer
        time.sleep(0.5)


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = WAIT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return True
        except Exception:
            pass
        time.sleep(0.25)
    return False


def must(what: str, check: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    if not wait_for(what, check, timeout_s):
        raise CaseFailed(f"timed out after {timeout_s:.0f} s waiting for {what}")


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a record was acknowledged: the cluster, and the partition and
    offset its acknowledgement gave (a link preserves offsets, so a copy
    holds it at the same place)."""

    cluster: str
    partition: int
    offset: int
    at_ms: int = 0  # when the acknowledgement came (wall clock)


@dataclass(frozen=True, slots=True)
class Named:
    """A range of offsets of one cluster's partition that a report says was
    given up: [start, end), or from start upwards (`end` None: a lag not
    known), then only what was acknowledged from `since_ms` on (the row's
    `unknown_since_ms`; -1: never learned, anything)."""

    cluster: str
    partition: int
    start: int
    end: int | None
    by: str
    since_ms: int = -1

    def covers(self, at: Placement) -> bool:
        return (
            at.cluster == self.cluster
            and at.partition == self.partition
            and self.start <= at.offset
            and (self.end is not None or at.at_ms >= self.since_ms)
            and (self.end is None or at.offset < self.end)
        )

    @property
    def text(self) -> str:
        end = "" if self.end is None else str(self.end)
        return f"{self.cluster} {TOPIC}-{self.partition} [{self.start}, {end}) by {self.by}"


def produce(
    bootstrap: str, topic: str, values: Sequence[str], cluster: str = ""
) -> dict[str, Placement]:
    """Each value one record, acknowledged (flushed) before the next.
    Returns where each was acknowledged (`cluster` names the cluster)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    placed: dict[str, Placement] = {}

    def delivered(err: object, msg: Any) -> None:
        if err is None:
            now_ms = time.time_ns() // 1_000_000
            placed[msg.value().decode()] = Placement(cluster, msg.partition(), msg.offset(), now_ms)

    try:
        for i, value in enumerate(values):
            producer.produce(topic, key=f"k{i % 7}", value=value, on_delivery=delivered)
            if producer.flush(WAIT_S) != 0 or value not in placed:
                raise CaseFailed(f"{value!r} not acknowledged by {bootstrap}")
    finally:
        producer.close()
    return placed


def read_values(bootstrap: str, topic: str) -> set[str]:
    """Every record value a consumer reads from the topic."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        parts = admin.describe_topic(topic).partitions
    finally:
        admin.close()
    ends = {p.partition: p.high_watermark for p in parts}
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "crash-matrix", "enable.auto.commit": False}
    )
    out: set[str] = set()
    try:
        assigned = [TopicPartition(topic, p.partition, p.log_start_offset) for p in parts]
        consumer.assign(assigned)
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and any(
            tp.offset < ends[tp.partition] for tp in consumer.position(assigned)
        ):
            for msg in consumer.consume(1000, 0.5):
                value = msg.value()
                if msg.error() is None and value is not None:
                    out.add(value.decode("utf-8", errors="replace"))
    finally:
        consumer.close()
    return out


def writable(bootstrap: str, kind: str, prefix: str) -> bool:
    """Whether the namespace takes client writes there: not reserved and
    following no link."""
    ns = ccr_ok(bootstrap, "describe-namespace", "--type", kind, "--prefix", prefix)
    following = any(str(a).endswith(":follower") for a in ns["attachments"])
    return not ns["reserved"] and not following


def provenance_cuts(cluster: str, bootstrap: str, topic: str) -> list[Named]:
    """The cuts the topic's provenance on `cluster` records (`truncated`:
    from its offset, the records removed)."""
    report = ccr_ok(bootstrap, "provenance", topic)
    cuts = [
        (int(p["partition"]), int(e["offset"]), int(e.get("removed_records") or 0))
        for p in report["partitions"]
        for e in p["provenance"]
        if e.get("kind") == "truncated"
    ]
    return [Named(cluster, p, at, at + n, "provenance") for p, at, n in cuts]


def plan_of(d: Daemon) -> dict[str, Any] | None:
    plan: dict[str, Any] | None = ccr_ok(d.bootstrap, "describe-link", "ab")["procedure"]
    return plan


def link_state(d: Daemon) -> str:
    return str(ccr_ok(d.bootstrap, "describe-link", "ab")["state"])


# -- the judge (shared with the e2e tests) ---------------------------------------------------


def judge(
    clusters: dict[str, str],
    namespaces: Sequence[tuple[str, str]],
    topic: str,
    acked: dict[str, Placement | None],
    named: Sequence[Named] = (),
    probe: str = "probe",
) -> tuple[list[str], dict[str, list[str]]]:
    """At rest: each namespace writable on exactly one of `clusters` (name ->
    bootstrap); the topic's writer holds every acknowledged record (value ->
    where it was acknowledged, None: not known) unless a range of `named` or
    of a cluster's provenance (`truncated`) covers it; a record written
    there reaches the others. Returns the failures (empty: judged clean) and
    each namespace's writers."""
    failures: list[str] = []
    writers: dict[str, list[str]] = {}
    for kind, prefix in namespaces:
        on = [name for name, b in clusters.items() if writable(b, kind, prefix)]
        writers[f"{kind} {prefix}"] = on
        if len(on) != 1:
            failures.append(
                f"{kind} {prefix!r} writable on {len(on)} clusters ({', '.join(on) or 'none'})"
            )
    topic_writers = writers[f"topic {namespaces[0][1]}"] if namespaces else []
    if len(topic_writers) != 1:
        return failures, writers
    writer = topic_writers[0]
    held = read_values(clusters[writer], topic)
    missing = sorted(set(acked) - held)
    # A recovery's cut is also recorded in the cut partitions' provenance
    # (`truncated`, with the records removed): where docs/operations.md sends
    # an operator whose answer was lost.
    reports = [*named, *(c for n, b in clusters.items() for c in provenance_cuts(n, b, topic))]
    unnamed = [
        v for v in missing
        if not any((at := acked[v]) is not None and r.covers(at) for r in reports)
    ]  # fmt: skip
    if unnamed:
        failures.append(
            f"{len(unnamed)} acknowledged records missing on the writer {writer} that no "
            f"report names, e.g. "
            + ", ".join(f"{v} at {acked[v]}" for v in unnamed[:3])
            + f" (named: {'; '.join(r.text for r in reports) or 'nothing'})"
        )
    try:
        produce(clusters[writer], topic, [probe])
    except Exception as exc:
        failures.append(f"the writer {writer} refused a write to {topic!r}: {exc}")
        return failures, writers
    for name, b in clusters.items():
        if name != writer and not wait_for(
            f"{name} to hold the probe", functools.partial(_holds, b, topic, probe)
        ):
            failures.append(f"a write on {writer} did not reach {name} within {WAIT_S:.0f} s")
    return failures, writers


def _holds(bootstrap: str, topic: str, value: str) -> bool:
    return value in read_values(bootstrap, topic)


# -- one case --------------------------------------------------------------------------------


def _start(d: Daemon) -> None:
    """At setup: another case running beside this one may take a port
    between choosing it and binding it; the daemon then starts on new ones."""
    d.start()
    d.wait_ready_or_rebind(timeout_s=READY_S)


def _restart(d: Daemon) -> None:
    d.kill9()  # the process is gone already; this reaps it
    d.env = {}
    d.start()
    d.wait_ready(READY_S)


def _link_with_records(a: Daemon, b: Daemon) -> dict[str, Placement | None]:
    for d in (a, b):
        for kind, prefix in NAMESPACES:
            ccr_ok(d.bootstrap, "create-namespace", "--type", kind, "--prefix", prefix)
    ccr_ok(a.bootstrap, "create-link", "ab", "--remote", b.bootstrap)
    for kind, prefix in NAMESPACES:
        ccr_ok(
            a.bootstrap, "attach-namespace", "--link", "ab", "--type", kind,
            "--local-prefix", prefix, "--remote-prefix", prefix, "--leader", "local",
        )  # fmt: skip
    ccr_ok(a.bootstrap, "create-topic", TOPIC, "--partitions", "2")
    acked = produce(a.bootstrap, TOPIC, [f"a-{i}" for i in range(RECORDS)], "A")
    must("B to hold A's records", lambda: read_values(b.bootstrap, TOPIC) == set(acked))
    must("A's link FOLLOWING", lambda: link_state(a) == "FOLLOWING")
    must("B's link FOLLOWING", lambda: link_state(b) == "FOLLOWING")
    return dict(acked)


def named_by(answer: dict[str, Any] | None, runner: str, remote: str) -> list[Named]:
    """The ranges an answer of a procedure run on `runner` gives up: a
    failover's abandoned rows (the source's offsets from what this side can
    read to the source's high watermark, or upwards when the lag is not
    known), a confirmed recovery's cut of this side's partitions."""
    if answer is None:
        return []
    out = []
    for p in answer.get("abandoned") or []:
        known = bool(p.get("lag_known"))
        end = int(p["source_high_watermark"]) if known else None
        since = -1 if known else int(p.get("unknown_since_ms", -1))
        out.append(
            Named(remote, int(p["partition"]), int(p["high_watermark"]), end, "failover", since)
        )
    if answer.get("confirmed"):
        rows = [r for r in answer.get("partitions") or [] if int(r["local_records_lost"]) > 0]
        out += [
            Named(runner, r["partition"], r["truncate_to"], r["local_log_end_offset"], "recover")
            for r in rows
        ]
    return out


class Story(list[str]):
    """What happened in a case, each line stamped with the seconds since it
    began."""

    def __init__(self) -> None:
        super().__init__()
        self.began = time.monotonic()

    def append(self, line: str) -> None:
        super().append(f"{time.monotonic() - self.began:5.1f}s {line}")


def _note(story: list[str], what: str, answer: Answer) -> None:
    j = answer.json or {}
    bits = [f"exit {answer.code}"]
    for key in ("ok", "rolled_back", "pending", "resumed_from"):
        if key in j:
            bits.append(f"{key}={j[key]}")
    if answer.json is None and answer.stderr:
        bits.append(answer.stderr.splitlines()[-1][:200])
    story.append(f"{what}: {' '.join(bits)}")


def _command(case: Case) -> list[str]:
    if case.procedure == "reverse":
        return ["reverse", "--link", "ab", "--timeout-ms", "10000"]
    if case.procedure == "failover":
        return ["failover", "--link", "ab"]
    return [
        "recover", "--link", "ab", "--namespace", "orders-", "--group-namespace", "app-",
        "--confirm",
    ]  # fmt: skip


def _heard_failover(a: Daemon) -> bool:
    """A's link no longer maps `orders-`: B's failover (its detach) reached it."""
    mappings = ccr_ok(a.bootstrap, "describe-link", "ab")["mappings"]
    return not any(m["local_prefix"] == "orders-" for m in mappings)


def _recover_a(a: Daemon, story: list[str]) -> Answer:
    """The documented finishing command after a failover with A alive: A
    recovers to follow B (once A heard of the failover; if it has not within
    the bound, the recovery's own answer says why it cannot)."""
    if not wait_for("A to hear of the failover", functools.partial(_heard_failover, a)):
        story.append(f"A had not heard of the failover after {WAIT_S:.0f} s")
    answer = ccr(a.bootstrap, *_command(Case("recover", "", "local")))
    _note(story, "recover --confirm on A (finishing the failover)", answer)
    return answer


def run_case(case: Case, workdir: Path, log: Callable[[str], None] = lambda _l: None) -> CaseResult:
    started = time.monotonic()
    story = Story()
    a = Daemon("A", workdir, LINK_FLAGS)
    b = Daemon("B", workdir, LINK_FLAGS)
    runner, other = (b, a) if case.procedure == "failover" else (a, b)
    serve = case.point in SERVE_POINTS.get(case.procedure, ())
    target = runner if case.side == "local" else other
    failures: list[str] = []
    writers: dict[str, list[str]] = {}
    named: list[Named] = []
    runner_id, other_id = runner.cluster_id, other.cluster_id
    try:
        # The cluster the hook kills starts first (its PID goes in the hook).
        if case.side == "remote" and not serve:
            _start(other)
            runner.env = {KILL_AT_ENV: f"{case.point}={other.pid}"}
            _start(runner)
        else:
            target.env = {EXIT_AT_ENV: case.point}
            _start(a)
            _start(b)
        acked = _link_with_records(a, b)
        if case.procedure == "recover":
            answer = ccr_when_following(b, "failover", "--link", "ab")
            if answer.code != 0:
                raise CaseFailed(f"failover on B: exit {answer.code}: {answer.stderr}")
            named += named_by(answer.json, "B", "A")
            b_new = produce(b.bootstrap, TOPIC, [f"b-{i}" for i in range(B_RECORDS)], "B")
            must("A to hear of the failover", functools.partial(_heard_failover, a))
            tail = produce(a.bootstrap, TOPIC, [f"a-tail-{i}" for i in range(A_TAIL)], "A")
            acked |= b_new | tail
        story.append(f"set up: {len(acked)} records acknowledged")
        log(f"{case.name}: set up, running {case.procedure}")

        first = ccr_when_following(runner, *_command(case), crashes=target)
        _note(story, f"{case.procedure} on {runner.cluster_id}", first)
        proc = target.proc
        assert proc is not None
        try:
            code = proc.wait(timeout=WAIT_S)
            story.append(f"{target.cluster_id} exited with {code} at {case.point}")
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            failures.append(f"{target.cluster_id} did not crash at {case.point}")
        else:
            _restart(target)
            log(f"{case.name}: {target.cluster_id} restarted")

        plan = plan_of(runner)
        if plan is not None:
            story.append(f"plan on {runner.cluster_id}: next step {plan.get('next_step')}")
            if case.procedure == "failover":
                # A failover's re-run checks the lag again (docs/operations.md).
                wait_for("B's link FOLLOWING", lambda: link_state(b) == "FOLLOWING")
            rerun = ccr_when_following(runner, *_command(case))
            _note(story, f"re-run {case.procedure} on {runner.cluster_id}", rerun)
            named += named_by(rerun.json, runner_id, other_id)
            if plan_of(runner) is not None:
                failures.append(f"one re-run left a plan on {runner.cluster_id}")
        named += named_by(first.json, runner_id, other_id)
        if case.procedure == "failover" and all(
            writable(d.bootstrap, "topic", "orders-") for d in (a, b)
        ):
            named += named_by(_recover_a(a, story).json, "A", "B")
        for r in named:
            story.append(f"named given up: {r.text}")
        story.append("judging")
        judged, writers = judge(
            {"A": a.bootstrap, "B": b.bootstrap}, NAMESPACES, TOPIC, acked, named
        )
        failures += judged
    except (CaseFailed, DaemonError) as exc:
        failures.append(f"{type(exc).__name__}: {exc}")
        story.append(f"stopped: {exc}")
    except Exception as exc:  # a case's error is its result, never a traceback
        failures.append(f"unexpected {type(exc).__name__}: {exc}")
    finally:
        for d in (a, b):
            d.kill9()
            d.stop()
    return CaseResult(
        case,
        not failures,
        failures,
        time.monotonic() - started,
        story,
        writers,
        [r.text for r in named],
    )


# -- the matrix ------------------------------------------------------------------------------


@contextmanager
def _workdir(keep: bool) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ccr-crash-matrix-"))
    try:
        yield path
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)


def run_here(case: Case, keep: bool = False) -> CaseResult:
    with _workdir(keep) as path:
        return run_case(case, path)


def _child(case: Case) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "chaos.cli", "crash-matrix", *case.args(), "--jobs", "1",
           "--json"]  # fmt: skip
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(ROOT),
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _collect(case: Case, proc: subprocess.Popen[str], began: float) -> CaseResult:
    out, err = proc.communicate()
    for line in out.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("cases"):
            return CaseResult.from_json(obj["cases"][0])
    why = (err.strip().splitlines() or ["no output"])[-1]
    return CaseResult(case, False, [f"the case's process exited {proc.returncode}: {why}"],
                      time.monotonic() - began)  # fmt: skip


def run_matrix(
    selected: Sequence[Case],
    jobs: int,
    on_result: Callable[[CaseResult], None],
    case_timeout_s: float = CASE_TIMEOUT_S,
) -> list[CaseResult]:
    """Each case in a child process, `jobs` at a time; a child past
    `case_timeout_s` is ended (SIGTERM: it ends its daemons, by PID)."""
    pending = list(selected)
    running: list[tuple[Case, subprocess.Popen[str], float]] = []
    results: list[CaseResult] = []
    try:
        while pending or running:
            while pending and len(running) < jobs:
                case = pending.pop(0)
                running.append((case, _child(case), time.monotonic()))
            for item in list(running):
                case, proc, began = item
                if proc.poll() is None and time.monotonic() - began > case_timeout_s:
                    proc.terminate()
                    try:
                        proc.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                    result = CaseResult(case, False, [f"timed out after {case_timeout_s:.0f} s"],
                                        time.monotonic() - began)  # fmt: skip
                elif proc.poll() is not None:
                    result = _collect(case, proc, began)
                else:
                    continue
                running.remove(item)
                results.append(result)
                on_result(result)
            if running:
                try:
                    running[0][1].wait(timeout=0.5)  # the pause between polls
                except subprocess.TimeoutExpired:
                    pass
    finally:
        for _case, proc, _began in running:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=60)
    order = {c: i for i, c in enumerate(selected)}
    return sorted(results, key=lambda r: order[r.case])


def line(result: CaseResult) -> str:
    verdict = "PASS" if result.ok else "FAIL"
    text = f"{verdict} {result.case.name:<58} {result.wall_s:6.1f}s"
    if not result.ok:
        text += "  " + "; ".join(result.failures)
    return text


__all__ = [
    "Case", "CaseResult", "cases", "checkpoints", "judge", "line", "run_case", "run_here",
    "run_matrix", "select", "writable",
]  # fmt: skip
