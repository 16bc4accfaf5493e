"""The operator nemesis: KIP-986's operator moves, drawn at random and carried
out against the real daemons, and the status sampler that watches what the
clusters report while it runs.

`OperatorNemesis` runs beside the schedule's faults during the nemesis phase.
Before each move it builds a `sim.operator_moves.View` from describe calls
(`list_links`, `list_topics`, `list_namespaces` on every cluster that is up),
draws one move with `draw_move` from one `random.Random` seeded with the
schedule's seed and "operators" (so the same seed draws the same moves from
the same views), carries it out through the client library's `AdminClient`
(as `ccr-admin` would) and records it as a `chaos.judges.MoveRecord`: ok, a
refusal (the error code and message: an expected outcome), indefinite (the
cluster could not be reached or did not answer) or an error (an unexpected
exception type: reported as an anomaly).

`StatusSampler` describes every link on every reachable cluster, every
partition (HW, LEO, LSO, topic id) and every namespace, every
`STATUS_EVERY_S`, into `chaos.judges.Round`s: the input of the judges of
invariants 9-11, of the workloads' routing (which cluster takes writes for
which topic) and of the reserved-write judgement.
"""

from __future__ import annotations

import random
import resource
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from admin import AdminClient, PendingChange
from admin.errors import KNOWN_CODES, CcrError
from chaos import security
from chaos.judges import (
    ClusterSnap,
    MoveRecord,
    PartSnap,
    Round,
    in_family,
    link_snap,
)
from chaos.proxy import FaultProxy
from chaos.schedule import ProcedureCrash
from chaos.security import client_config
from sim.checkers import OffsetMove
from sim.operator_moves import LinkView, MappingView, Move, MoveKind, View, draw_move

if TYPE_CHECKING:
    from chaos.runner import Run

FAMILIES = ("orders-",)
STATUS_EVERY_S = 0.3
CALL_TIMEOUT_S = 10.0
# A manual reversal waits this long for the remote to hold the leader's log end.
MANUAL_WAIT_S = 8.0
REVERSE_TIMEOUT_MS = 8000
UNRESERVE_RETRY_S = 5.0
GAP_S = (0.8, 2.0)  # between two moves

# Error codes after which the call's outcome is unknown (it may have happened).
_INDEFINITE_CODES = frozenset({"REQUEST_TIMED_OUT", "NOT_READY", "STORAGE_ERROR"})
# gRPC status names of calls that could not reach the cluster or got no answer.
_TRANSPORT_CODES = frozenset(
    {"UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED", "RESOURCE_EXHAUSTED", "ABORTED"}
)
_KNOWN_CODES = KNOWN_CODES


def classify(exc: BaseException) -> tuple[str, str, str]:
    """(outcome, code, message) of a failed admin call: "refused" for a
    cluster's definite refusal, "info" when it may have happened, "error"
    for anything else (an unexpected exception type, or a server that hit
    an unexpected exception: INTERNAL / UNKNOWN)."""
    if isinstance(exc, CcrError):
        code = exc.code
        if code in _INDEFINITE_CODES or code in _TRANSPORT_CODES:
            return "info", code, exc.message
        if code in ("INTERNAL", "UNKNOWN"):
            return "error", code, exc.message
        if code in _KNOWN_CODES or code.startswith("ERROR_CODE_") or code.isupper():
            return "refused", code, exc.message
        return "error", code, exc.message
    return "error", type(exc).__name__, str(exc)


def _admin(address: str, timeout_s: float = CALL_TIMEOUT_S) -> AdminClient:
    return AdminClient({**client_config(address), "request.timeout.ms": int(timeout_s * 1000)})


class Refused(Exception):
    """A step of a multi-step move was refused (carries the refusal)."""

    def __init__(self, step: str, exc: BaseException) -> None:
        super().__init__(step)
        self.step = step
        self.exc = exc


class OperatorNemesis:
    def __init__(
        self, run: Run, seed: int, procedure_crashes: Sequence[ProcedureCrash] = ()
    ) -> None:
        self.run = run
        self.rng = random.Random(f"{seed}:operators")
        self.records: list[MoveRecord] = []
        self.drawn: list[Move] = []
        self._proxy_seed = seed * 100 + 50
        self.rotations = 0  # link credentials replaced (`_rotate_credential`)
        # The schedule's crashes of procedure moves, by their rank.
        self.procedure_crashes = {c.nth: c for c in procedure_crashes}
        self.procedures = 0  # reverse, failover and recover moves carried out so far

    # -- the view ----------------------------------------------------------------------------

    def up(self) -> list[str]:
        return sorted(
            c for c, d in self.run.daemons.items() if d.running and not d.paused and not d.lost
        )

    def view(self) -> View:
        """What an operator sees now, from describe calls on every cluster up."""
        up: list[str] = []
        links: dict[str, LinkView] = {}
        topics: dict[str, tuple[tuple[str, int], ...]] = {}
        namespaces: dict[str, tuple[tuple[str, str, bool], ...]] = {}
        for c in self.up():
            try:
                with _admin(self.run.daemons[c].bootstrap, 3.0) as a:
                    infos = a.list_links()
                    tops = a.list_topics()
                    nss = a.list_namespaces()
            except Exception:
                continue
            up.append(c)
            for info in infos:
                if info.name in links:
                    continue
                links[info.name] = LinkView(
                    info.name,
                    c,
                    info.remote_cluster_id,
                    tuple(
                        MappingView(
                            str(m["type"]), str(m["local_prefix"]), str(m["remote_prefix"]),
                            str(m["leader"]),
                        )
                        for m in info.mappings
                    ),
                )  # fmt: skip
            topics[c] = tuple((t.name, t.partition_count) for t in tops if not t.internal)
            namespaces[c] = tuple(
                (ns.type, ns.prefix, ns.reserved) for ns in nss if ns.type in ("topic", "group")
            )
        return View(
            clusters=tuple(self.run.schedule.clusters),
            up=frozenset(up),
            links=tuple(links[n] for n in sorted(links)),
            topics=topics,
            namespaces=namespaces,
            families=FAMILIES,
            credentials=bool(self.run.link_credentials()),
            storage_faults=True,
        )

    # -- the loop ------------------------------------------------------------------------------

    def loop(self, stop: threading.Event, until: float) -> None:
        """Moves until `stop` is set or the monotonic clock reaches `until`."""
        while not stop.is_set():
            gap = self.rng.uniform(*GAP_S)
            if time.monotonic() + gap >= until or stop.wait(gap):
                return
            self.step()

    def step(self) -> MoveRecord | None:
        view = self.view()
        move = draw_move(self.rng, view)
        if move is None:
            return None
        self.drawn.append(move)
        return self.carry_out(move, view)

    def carry_out(self, move: Move, view: View) -> MoveRecord:
        rec = MoveRecord(move, self.run.recorder.now_ms(), 0, "ok",
                         wall_begin_ms=int(time.time() * 1000))  # fmt: skip
        try:
            _CARRY[move.kind](self, move, view, rec)
        except Refused as exc:
            rec.outcome, rec.code, rec.message = classify(exc.exc)
            rec.steps.append(f"{exc.step}: {rec.code}")
        except Exception as exc:
            rec.outcome, rec.code, rec.message = classify(exc)
        rec.end_ms = self.run.recorder.now_ms()
        rec.wall_end_ms = int(time.time() * 1000)
        self.records.append(rec)
        outcome = rec.outcome if not rec.code else f"{rec.outcome} {rec.code}: {rec.message}"
        self.run.note(f"operator: {move.describe()} -> {outcome[:300]}")
        return rec

    # -- helpers -----------------------------------------------------------------------------

    def admin(self, cluster: str, timeout_s: float = CALL_TIMEOUT_S) -> AdminClient:
        return _admin(self.run.daemons[cluster].bootstrap, timeout_s)

    def _remote_of(self, view: View, link: str, cluster: str) -> str:
        """The other end of `link` as seen from `cluster` (the view describes
        each link from one of its two ends, whichever listed it first)."""
        for lv in view.links:
            if lv.name == link:
                return lv.a if lv.b == cluster else lv.b
        return ""

    def _ensure_namespace(self, cluster: str, rtype: str, prefix: str, rec: MoveRecord) -> None:
        with self.admin(cluster) as a:
            if any(ns.type == rtype and ns.prefix == prefix for ns in a.list_namespaces()):
                return
            try:
                a.create_namespace(rtype, prefix)
                rec.steps.append(f"create {rtype} namespace {prefix!r} on {cluster}: ok")
            except CcrError as exc:
                raise Refused(f"create {rtype} namespace {prefix!r} on {cluster}", exc) from exc

    def _proxy(self, cluster: str) -> FaultProxy:
        self._proxy_seed += 1
        proxy = FaultProxy("127.0.0.1", self.run.daemons[cluster].port, seed=self._proxy_seed)
        proxy.start_in_thread()
        self.run.extra_proxies.append(proxy)
        return proxy

    def _cluster_cut(self, cluster: str, report: dict[str, Any], begin: int, end: int) -> None:
        """Feeds a confirmed recovery report to the judges and resets the
        cluster's readers when records were cut."""
        cut = False
        for p in report.get("partitions", []):
            if p["truncate_to"] < p["local_log_end_offset"]:
                cut = True
                key = (cluster, str(p["topic"]), int(p["partition"]))
                self.run.truncations.setdefault(key, []).append(int(p["truncate_to"]))
                self.run.cuts.setdefault(key, []).append(
                    (int(p["truncate_to"]), int(p["local_log_end_offset"]))
                )
        for g in report.get("groups", []):
            self.run.offset_moves.append(OffsetMove(
                cluster, self.run.offset_group_key(cluster, str(g["group"])), str(g["topic"]),
                int(g["partition"]), int(g["committed_offset"]), int(g["new_offset"]), begin, end,
            ))  # fmt: skip
        if cut:
            for reader in (self.run.readers.get(cluster), self.run.rc_readers.get(cluster)):
                if reader is not None:
                    reader.new_session(from_start=True)


# -- one function per kind -----------------------------------------------------------------------


def _create_link(op: OperatorNemesis, m: Move, view: View, rec: MoveRecord) -> None:
    target = op.run.link_address(op._proxy(m.peer).address)
    local_bootstrap = ""
    if m.remote_dials:
        # The remote dials this cluster (behind "NAT"): through a proxy too.
        local_bootstrap = op.run.link_address(op._proxy(m.cluster).address)
    with op.admin(m.cluster) as a:
        a.create_link(
            m.link, target, connection="remote" if m.remote_dials else "local",
            local_bootstrap=local_bootstrap, credentials=op.run.link_credentials(),
            configs=dict(op.run.schedule.link_configs) or None,
        )  # fmt: skip
    rec.report = {"remote": target, "local_bootstrap": local_bootstrap}
    if m.remote_dials and op.run.link_credentials():
        # The peer dials: its own credentials for this cluster come from its
        # operator (a link's credentials never cross), as docs/security.md says.
        with op.admin(m.peer) as b:
            b.alter_link(m.link, credentials=op.run.link_credentials())
        rec.report["peer_credentials"] = "set"


def _pending(rec: MoveRecord, pending: PendingChange | None) -> None:
    """An answer that the remote had not confirmed the change: recorded
    with the move (the call answered pending, not done)."""
    if pending is not None:
        rec.report = {**rec.report, "pending": pending.to_dict()}


def _delete_link(op: OperatorNemesis, m: Move, view: View, rec: MoveRecord) -> None:
    with op.admin(m.cluster) as a:
        _pending(rec, a.delete_link(m.link).pending)


def _attach(op: OperatorNemesis, m: Move, view: View, rec: MoveRecord) -> None:
    op._ensure_namespace(m.cluster, m.resource_type, m.local_prefix, rec)
    with op.admin(m.cluster) as a:
        link = a.attach_namespace(
            m.link, m.resource_type, m.local_prefix, m.remote_prefix, m.leader
        )
    _pending(rec, link.pending)


def _detach(op: OperatorNemesis, m: Move, view: View, rec: MoveRecord) -> None:
    with op.admin(m.cluster) as a:
        link = a.detach_namespace(m.link, m.resource_type, m.local_prefix)
    _pending(rec, link.pending)


def _set_reserved(op: OperatorNemesis, m: Move, view: View, rec: MoveRecord) -> None:
    with op.admin(m.cluster) as a:
        info = a.set_reserved(m.resource_type, m.local_prefix, m.reserved)
    aborted = getattr(info, "aborted_transactions", None)
    if aborted is not None:
        rec.report = {"aborted_transactions": list(aborted)}


def _wait_remote_holds(
    op: OperatorNemesis, cluster: str, remote: str, local: str, remote_prefix: str
) -> str:
    """Bounded: until every partition of this side's topics under `local`
    has its log end on the remote (under `remote_prefix`)."""
    deadline = time.monotonic() + MANUAL_WAIT_S
    behind: list[str] = []
    pause = threading.Event()
    while True:
        try:
            with op.admin(cluster, 3.0) as a:
                mine = {
                    (t.name, p.partition): p.log_end_offset
                    for t in a.list_topics() if t.name.startswith(local)
                    for p in t.partitions
                }  # fmt: skip
            with op.admin(remote, 3.0) as b:
                theirs = {
                    (local + t.name[len(remote_prefix):], p.partition): p.log_end_offset
                    for t in b.list_topics() if t.name.startswith(remote_prefix)
                    for p in t.partitions
                }  # fmt: skip
            behind = [f"{t}-{p}: {leo} > {theirs.get((t, p), -1)}" for (t, p), leo in
                      sorted(mine.items()) if theirs.get((t, p), -1) < leo]  # fmt: skip
            if not behind:
                return "the remote holds the log end"
        except Exception as exc:
            behind = [f"{type(exc).__name__}: {exc}"]
        if time.monotonic() >= deadline:
            return f"gave up after {MANUAL_WAIT_S:g} s ({'; '.join(behind[:3])})"
        pause.wait(0.2)


def _manual_reverse(op: OperatorNemesis, m: Move, view: View, rec: MoveRecord) -> None:
    """The KIP's steps by hand: reserve the leader namespace, wait (bounded)
    for the remote to hold its log end, detach, attach the other way, clear
    the reservation on the new leader."""
    remote = op._remote_of(view, m.link, m.cluster)
    if not remote:
        raise Refused("find the link", CcrError("UNKNOWN_LINK", f"link {m.link!r} not in view"))
    steps: list[tuple[str, Callable[[], str]]] = []

    def reserve() -> str:
        with op.admin(m.cluster) as a:
            info = a.set_reserved(m.resource_type, m.local_prefix, True)
        aborted = getattr(info, "aborted_transactions", None)
        return "ok" + (f" (aborted {list(aborted)})" if aborted else "")

    def wait() -> str:
        if not m.wait or m.resource_type != "topic":
            return "skipped"
        return _wait_remote_holds(op, m.cluster, remote, m.local_prefix, m.remote_prefix)

    def detach() -> str:
        with op.admin(m.cluster) as a:
            a.detach_namespace(m.link, m.resource_type, m.local_prefix)
        return "ok"

    def attach() -> str:
        with op.admin(m.cluster) as a:
            a.attach_namespace(m.link, m.resource_type, m.local_prefix, m.remote_prefix, "remote")
        return "ok"

    def unreserve() -> str:
        # The remote learns of the detach and the new attach through the
        # link; until then it refuses (NAMESPACE_ATTACHED): retry, bounded,
        # as an operator would.
        deadline = time.monotonic() + UNRESERVE_RETRY_S
        tries = 0
        while True:
            tries += 1
            try:
                with op.admin(remote) as b:
                    b.set_reserved(m.resource_type, m.remote_prefix, False)
                return "ok" if tries == 1 else f"ok after {tries} tries"
            except CcrError as exc:
                if exc.code != "NAMESPACE_ATTACHED" or time.monotonic() >= deadline:
                    raise
            threading.Event().wait(0.3)

    steps = [
        (f"reserve {m.resource_type} {m.local_prefix!r} on {m.cluster}", reserve),
        (f"wait for {remote}", wait),
        (f"detach on {m.cluster}", detach),
        (f"attach {m.local_prefix!r} following {remote}", attach),
        (f"clear the reservation of {m.remote_prefix!r} on {remote}", unreserve),
    ]
    for name, fn in steps:
        try:
            result = fn()
        except Exception as exc:
            raise Refused(name, exc) from exc
        rec.steps.append(f"{name}: {result}")


def _release_reattach(op: OperatorNemesis, m: Move, view: View, rec: MoveRecord) -> None:
    """On a follower: detach the followed topic namespace, clear its
    reservation, let the producers write there for `hold_ms`, attach it again
    following (refused, naming them, when that would cut what they wrote)."""

    def detach() -> str:
        with op.admin(m.cluster) as a:
            a.detach_namespace(m.link, "topic", m.local_prefix)
        return "ok"

    def release() -> str:
        with op.admin(m.cluster) as a:
            a.set_reserved("topic", m.local_prefix, False)
        return "ok"

    def hold() -> str:
        threading.Event().wait(m.hold_ms / 1000)
        return f"{m.hold_ms} ms"

    def attach() -> str:
        with op.admin(m.cluster) as a:
            a.attach_namespace(m.link, "topic", m.local_prefix, m.remote_prefix, "remote")
        return "ok"

    steps: list[tuple[str, Callable[[], str]]] = [
        (f"detach topic {m.local_prefix!r} on {m.cluster}", detach),
        (f"clear the reservation of {m.local_prefix!r} on {m.cluster}", release),
        ("let clients write", hold),
        (f"attach {m.local_prefix!r} following again", attach),
    ]
    for name, fn in steps:
        try:
            result = fn()
        except Exception as exc:
            raise Refused(name, exc) from exc
        rec.steps.append(f"{name}: {result}")


def _crashed_mid_procedure(
    op: OperatorNemesis, m: Move, view: View, rec: MoveRecord, call: Callable[[bool], None]
) -> None:
    """Carries out a procedure move (`call(rerun)`), cut short by a crash when the
    schedule says so (`Schedule.procedure_crashes`): `kill -9` of the side it
    names `delay_ms` after the call began, the daemon started again on its
    data, then the procedure once more if the cluster it runs on still holds
    a plan of it (docs/operations.md: the one re-run that finishes it)."""
    op.procedures += 1
    crash = op.procedure_crashes.get(op.procedures)
    ends = next(((lv.a, lv.b) for lv in view.links if lv.name == m.link), (m.cluster, ""))
    other = ends[1] if ends[0] == m.cluster else ends[0]
    target = m.cluster if crash is not None and crash.side == "runner" else other
    if crash is None or m.kill_source or target not in op.up():
        call(False)
        return
    failed: list[BaseException] = []

    def first() -> None:
        try:
            call(False)
        except BaseException as exc:  # the crash's usual outcome: recorded below
            failed.append(exc)

    thread = threading.Thread(target=first, name="chaos-procedure", daemon=True)
    thread.start()
    thread.join(crash.delay_ms / 1000)
    answered = not thread.is_alive()
    op.run.kill_daemon(target)
    rec.steps.append(
        f"kill -9 {target} {crash.delay_ms} ms into the call"
        + (" (it had answered)" if answered else "")
    )
    thread.join(CALL_TIMEOUT_S * 6)
    op.run.start_daemon(target)
    first_outcome = f"{type(failed[0]).__name__}: {failed[0]}"[:200] if failed else "ok"
    rec.steps.append(f"started {target} again; the first call: {first_outcome}")
    with op.admin(m.cluster) as a:
        plan = a.describe_link(m.link).procedure
    if plan is None:
        if failed:
            raise failed[0]
        return
    rec.steps.append(f"re-run on {m.cluster}: {plan.get('procedure')} in progress, "
                     f"next step {plan.get('next_step')}")  # fmt: skip
    call(True)


def _reverse(op: OperatorNemesis, m: Move, view: View, rec: MoveRecord) -> None:
    _crashed_mid_procedure(op, m, view, rec, lambda _rerun: _reverse_call(op, m, rec))


def _reverse_call(op: OperatorNemesis, m: Move, rec: MoveRecord) -> None:
    with op.admin(m.cluster, REVERSE_TIMEOUT_MS / 1000 + 15) as a:
        result = a.reverse_link(m.link, timeout_ms=REVERSE_TIMEOUT_MS)
    rec.steps = [f"{s['name']}: {'ok' if s['ok'] else 'stopped'} {s['result']}"[:200]
                 for s in result.steps]  # fmt: skip
    if not result.ok:
        raise Refused(
            "reverse", CcrError(result.error_code or "UNKNOWN", result.error_message or "?")
        )


def _set_mode(op: OperatorNemesis, m: Move, view: View, rec: MoveRecord) -> None:
    with op.admin(m.cluster) as a:
        a.set_link_mode(m.link, m.mode)


def _failover(op: OperatorNemesis, m: Move, view: View, rec: MoveRecord) -> None:
    _crashed_mid_procedure(op, m, view, rec, lambda _rerun: _failover_call(op, m, rec))


def _failover_call(op: OperatorNemesis, m: Move, rec: MoveRecord) -> None:
    if m.kill_source:
        # kill -9 of the source under load, the failover a fraction of a
        # second later, then the source starts again on its data.
        op.run.kill_daemon(m.peer)
        rec.steps.append(f"kill -9 {m.peer}")
        try:
            time.sleep(m.delay_ms / 1000)
            _fail_over(op, m, rec)
        finally:
            started = op.run.start_daemon(m.peer)
            if started:
                rec.steps.append(f"started {m.peer} again")
            else:
                rec.steps.append(f"{m.peer} was started again by the nemesis")
        return
    _fail_over(op, m, rec)


def _fail_over(op: OperatorNemesis, m: Move, rec: MoveRecord) -> None:
    with op.admin(m.cluster, 15.0) as a:
        result = a.failover(m.link, force=m.force)
    full = result.to_dict()
    report: dict[str, Any] = {
        "abandoned": full.get("abandoned", []),
        # From when the follower knew the source's topics: a topic or a
        # partition made there after it is in no row (`judges._loss_excuse`).
        "topics_known_at_ms": result.topics_known_at_ms,
    }
    for key in ("partitions", "aborted_transactions"):
        value = full.get(key, getattr(result, key, None))
        if value is not None:
            report[key] = list(value)
    rec.report = report
    op.run.unreserved_at.setdefault(m.cluster, rec.begin_ms)


def _recover(op: OperatorNemesis, m: Move, view: View, rec: MoveRecord) -> None:
    _crashed_mid_procedure(op, m, view, rec, lambda rerun: _recover_call(op, m, rec, rerun))


def _recover_call(op: OperatorNemesis, m: Move, rec: MoveRecord, rerun: bool = False) -> None:
    """A report, then (confirm) the recovery; a re-run after a crash goes
    straight to the confirmed run, which answers the journalled cut."""
    namespaces = [m.local_prefix] if m.local_prefix else []
    with op.admin(m.cluster, 30.0) as a:
        if not rerun:
            try:
                report = a.recover_link(m.link, namespaces=namespaces, confirm=False)
            except Exception as exc:
                raise Refused("recover (report)", exc) from exc
            rec.steps.append(f"report: {report['totals']}")
            if not m.confirm:
                rec.report = {"totals": report["totals"]}
                return
        # A re-run answers the cut the first run made: from its beginning.
        begin = rec.begin_ms if rerun else op.run.recorder.now_ms()
        try:
            confirmed = a.recover_link(m.link, namespaces=namespaces, confirm=True)
        except Exception as exc:
            raise Refused("recover --confirm", exc) from exc
    end = op.run.recorder.now_ms()
    rec.steps.append(f"--confirm: {confirmed['totals']}")
    keys = ("topic", "partition", "truncate_to", "local_log_end_offset", "local_records_lost")
    rec.report = {
        "totals": confirmed["totals"],
        "partitions": [{k: p[k] for k in keys} for p in confirmed["partitions"]],
    }
    op._cluster_cut(m.cluster, confirmed, begin, end)


def _create_topic(op: OperatorNemesis, m: Move, view: View, rec: MoveRecord) -> None:
    with op.admin(m.cluster) as a:
        a.create_topic(m.topic, m.partitions)


def _delete_topic(op: OperatorNemesis, m: Move, view: View, rec: MoveRecord) -> None:
    with op.admin(m.cluster) as a:
        a.delete_topic(m.topic)


def _add_partitions(op: OperatorNemesis, m: Move, view: View, rec: MoveRecord) -> None:
    with op.admin(m.cluster) as a:
        a.create_partitions(m.topic, m.partitions)


def _restart(op: OperatorNemesis, m: Move, view: View, rec: MoveRecord) -> None:
    op.run.restart_daemon(m.cluster)


def _rotate_credential(op: OperatorNemesis, m: Move, view: View, rec: MoveRecord) -> None:
    """The run's link credential is replaced in the credentials file every
    daemon reads (they re-read it when it changes): the sessions opened with
    the old one end at their next call, however busy. `hold_ms` later every
    cluster's operator sets the new one on its links (alter-link
    --remote-credentials-file), which restores them."""
    current = security.current()
    args = list(current.daemon_args)
    if not current.link_credentials or "--link-credentials-file" not in args:
        raise Refused("rotate", CcrError("INVALID_LINK_CONFIG", "the run has no link credentials"))
    path = Path(args[args.index("--link-credentials-file") + 1])
    op.rotations += 1
    new = f"{current.link_credentials.split('~')[0]}~{op.rotations}"
    path.write_text(f"{new}\n")
    security.use(replace(current, link_credentials=new))
    rec.steps.append(f"replace the link credential in {path.name}: ok")
    threading.Event().wait(m.hold_ms / 1000)
    rec.steps.append(f"hold: {m.hold_ms} ms")
    failed: list[str] = []
    for cluster in sorted(view.up):
        try:
            with op.admin(cluster) as a:
                names = sorted(info.name for info in a.list_links())
                for name in names:
                    for attempt in range(3):
                        try:
                            a.alter_link(name, credentials=new)
                            rec.steps.append(f"alter-link {name} on {cluster}: ok")
                            break
                        except CcrError as exc:
                            if attempt == 2:
                                failed.append(f"{name} on {cluster}: {exc.code}")
                            threading.Event().wait(1.0)
        except Exception as exc:  # the cluster went away meanwhile
            failed.append(f"{cluster}: {exc}")
    if failed:
        raise Refused("set the new credential", CcrError("LINK_UNREACHABLE", "; ".join(failed)))


def _storage_refusal(op: OperatorNemesis, m: Move, view: View, rec: MoveRecord) -> None:
    """The follower's disk refuses writes for `hold_ms`: its largest file
    size (RLIMIT_FSIZE, as a full disk refuses growth) is lowered to the
    largest file its data directory holds now, so the segments it appends to
    stop growing (EFBIG), then raised back. The status judge checks meanwhile
    that its links do not claim what it did not store (invariant 9)."""
    daemon = op.run.daemons[m.cluster]
    if daemon.proc is None or daemon.proc.poll() is not None:
        raise Refused("limit the disk", CcrError("NOT_READY", f"{m.cluster} is not running"))
    pid = daemon.proc.pid
    sizes = [f.stat().st_size for f in Path(daemon.data_dir).rglob("*") if f.is_file()]
    limit = max(sizes, default=0)
    soft, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (limit, hard))
    rec.steps.append(f"RLIMIT_FSIZE of {m.cluster} to {limit} bytes: ok")
    try:
        threading.Event().wait(m.hold_ms / 1000)
    finally:
        try:
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (soft, hard))
            rec.steps.append(f"after {m.hold_ms} ms, back to {soft}: ok")
        except ProcessLookupError:
            rec.steps.append("the daemon went away meanwhile")


_CARRY: dict[MoveKind, Callable[[OperatorNemesis, Move, View, MoveRecord], None]] = {
    MoveKind.CREATE_LINK: _create_link,
    MoveKind.DELETE_LINK: _delete_link,
    MoveKind.ATTACH: _attach,
    MoveKind.DETACH: _detach,
    MoveKind.SET_RESERVED: _set_reserved,
    MoveKind.MANUAL_REVERSE: _manual_reverse,
    MoveKind.REVERSE: _reverse,
    MoveKind.SET_MODE: _set_mode,
    MoveKind.FAILOVER: _failover,
    MoveKind.RECOVER: _recover,
    MoveKind.CREATE_TOPIC: _create_topic,
    MoveKind.DELETE_TOPIC: _delete_topic,
    MoveKind.ADD_PARTITIONS: _add_partitions,
    MoveKind.RESTART: _restart,
    MoveKind.RELEASE_REATTACH: _release_reattach,
    MoveKind.ROTATE_CREDENTIAL: _rotate_credential,
    MoveKind.STORAGE_REFUSAL: _storage_refusal,
}


# -- the status sampler ------------------------------------------------------------------------


def snapshot(a: AdminClient, timeout_s: float) -> ClusterSnap:
    """One cluster's links, partitions and namespaces, as it reports them."""
    snap = ClusterSnap()
    for info in a.list_links(timeout=timeout_s):
        snap.links[info.name] = link_snap(info)
    for t in a.list_topics(timeout=timeout_s):
        if t.internal:
            continue
        snap.topic_ids[t.name] = t.topic_id
        for p in t.partitions:
            snap.partitions[(t.name, p.partition)] = PartSnap(
                p.high_watermark, p.log_end_offset, p.last_stable_offset
            )
    for ns in a.list_namespaces(timeout=timeout_s):
        snap.namespaces[(ns.type, ns.prefix)] = (ns.reserved, tuple(ns.attachments))
    return snap


class StatusSampler(threading.Thread):
    """Every `every_s`, one `Round`: each reachable cluster's snapshot."""

    def __init__(self, run: Run, stop: threading.Event, every_s: float = STATUS_EVERY_S) -> None:
        super().__init__(name="chaos-status", daemon=True)
        self.chaos = run
        self.stop_event = stop
        self.every_s = every_s
        self.rounds: list[Round] = []

    def latest(self) -> Round | None:
        return self.rounds[-1] if self.rounds else None

    def run(self) -> None:
        admins: dict[str, AdminClient] = {}
        index = 0
        try:
            while not self.stop_event.is_set():
                start, wall = self.chaos.recorder.now_ms(), int(time.time() * 1000)
                clusters: dict[str, ClusterSnap] = {}
                for c, d in sorted(self.chaos.daemons.items()):
                    if d.lost or d.paused or not d.running:
                        continue
                    if c not in admins:
                        admins[c] = _admin(d.bootstrap, 1.0)
                    try:
                        clusters[c] = snapshot(admins[c], 1.0)
                    except Exception:
                        continue
                end, wall_end = self.chaos.recorder.now_ms(), int(time.time() * 1000)
                self.rounds.append(Round(index, start, end, wall, wall_end, clusters))
                index += 1
                self.stop_event.wait(self.every_s)
        finally:
            for a in admins.values():
                a.close()


def writable(snap: ClusterSnap, topic: str) -> bool:
    """Should the cluster take client writes into `topic`: no topic namespace
    that covers it is reserved, and no link of the cluster follows it?"""
    for (rtype, prefix), (reserved, _att) in snap.namespaces.items():
        if rtype == "topic" and reserved and topic.startswith(prefix):
            return False
    return not any(link.follower_source(topic) is not None for link in snap.links.values())


def family_topics(rnd: Round | None, want_writable: bool) -> list[tuple[str, str, int]]:
    """(cluster, topic, partitions) of the families' topics in the round,
    writable ones or reserved ones."""
    out: list[tuple[str, str, int]] = []
    if rnd is None:
        return out
    for c, snap in sorted(rnd.clusters.items()):
        counts: dict[str, int] = {}
        for t, _p in snap.partitions:
            counts[t] = counts.get(t, 0) + 1
        for t in sorted(counts):
            if in_family(t, FAMILIES) and writable(snap, t) == want_writable:
                out.append((c, t, counts[t]))
    return out
