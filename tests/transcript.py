"""Transcript tests of a replication link, replayed by both shells.

A transcript (tests/transcripts/*.txt, in the manner of etcd-raft's
datadriven tests) is a list of steps, each a command line, a line `----`,
and the output expected, ended by a blank line:

    produce A orders-1 n=3
    ----
    A orders-1-0: log 0..3 hw 3 lso 3 epoch 0

Two clusters, A leading the namespace `orders-` on link `ab` and B
following it, are driven through the core's own functions (the link rounds,
handshakes and faults both shells call), and every effect the core returns
is carried out by a shell: `SimShell` (the simulator's `SimCluster`, on
virtual time) or `DaemonShell` (the daemon's `ClusterNode`, with its segment
files and metadata journal in a temporary directory). Both must print the
expected output, step for step. `restart X` rebuilds a cluster from what
its shell stored, so what the journal and the segment files hold is tested
too.

To rewrite the expected output after an intended change, run pytest with
CCR_TRANSCRIPT_REWRITE=1 (the sim shell's output is written) and read the
diff.

Commands (cluster names A and B; one partition, 0, unless `p=` says):
  produce A TOPIC n=N [value=V] [p=P]   N records, one batch
  topic A TOPIC [partitions=N]          create a topic on the source
  discover                              B learns A's topics (creates followers)
  handshake                             B dials A: the two configurations merge
  fetch [budget=BYTES]                  one fetch round, B from A (with the warnings
                                        the follower logs)
  txn A ID TOPIC                        a transaction writes a record, left open
  unclean-election A TOPIC to=OFFSET    emulated unclean election (cut + epoch)
  delete-topic A TOPIC
  restart A|B                           rebuild from the shell's storage
  epochs A|B TOPIC [p=P]                the leader-epoch history (epoch@start offset)
  show A|B                              every partition; link state and lags on B
  set-mode A|B sync|async               an operator's set-mode there (the other side
                                        learns it from the link)
  delete-link A|B                       an operator deletes the link there
  attach A group PREFIX                 A leads a namespace of groups on the link
  commit A GROUP TOPIC OFFSET [p=P]     a consumer's commit; `groups A|B` lists them
  join A GROUP [session=MS]             a member joins (JoinGroup); `tick A` runs the
                                        cluster's timers once (`timers.tick`)

The link's driver (linkd/core/link_driver.py), pumped by script
(tests/transcript_lanes.py says what it prints):
  start A|B [max_wait_ms=] [fetch_max_bytes=] [partition_max_bytes=]
                                        that cluster's driver of link ab runs
  deliver LANE                          the lane's oldest call reaches the remote,
                                        which serves it (and may hold a fetch)
  refuse LANE CODE                      the remote refuses it (an ErrorCode name)
  timeout LANE                          time passes to its deadline
  advance MS                            time passes: waits end, long polls expire
  wake                                  the link changed (LinkChanged)
Time moves only with `advance` and `timeout`; LANE is control, pull or push.
"""

from __future__ import annotations

import asyncio
import shlex
import tempfile
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from linkd.core import link_admin as admin
from linkd.core import link_driver as driver
from linkd.core import link_rounds as rounds
from linkd.core import procedures, timers
from linkd.core import records as rb
from linkd.core import replication as rep
from linkd.core.cluster import AppendBatch, ClusterState, Effect
from linkd.core.effects import journal
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.groups import GroupReply, JoinRequest, JoinResult
from linkd.core.journal import JournalRecord
from linkd.core.links import Leader, LinkConfig, LinkLimits, LinkTable, Mapping, MappingType
from linkd.core.namespaces import ResourceType
from linkd.core.requests import Execute, Handshake, Note, Now, Request
from linkd.node import ClusterNode
from sim.cluster_node import SimCluster
from sim.events import EventQueue
from sim.seeds import IdFactory
from tests.transcript_lanes import Lane, LanePump

NOW = 1_000
LIMITS = LinkLimits(session_timeout_ms=5_000, replica_lag_time_max_ms=2_000)


class Shell(Protocol):
    """Carries out effects for one cluster and reads its stored batches."""

    @property
    def state(self) -> ClusterState: ...

    def execute(self, effects: Sequence[Effect]) -> None: ...

    def read(self, topic_id: str, partition: int, start: int, end: int, budget: int) -> bytes: ...

    def restart(self) -> None: ...

    def close(self) -> None: ...


def _sized(effect: AppendBatch) -> int:
    return len(effect.batch)


class SimShell:
    def __init__(self, cluster_id: str, clock: Callable[[], int] = lambda: NOW) -> None:
        self.queue = EventQueue(1_000_000)
        self.node = SimCluster(cluster_id, self.queue, 10_000, 0, LIMITS, IdFactory(1, cluster_id))

    @property
    def state(self) -> ClusterState:
        return self.node.state

    def execute(self, effects: Sequence[Effect]) -> None:
        self.node.execute(list(effects), "replica", _sized)
        self.queue.run_until(self.queue.now_ms + 1_000)  # until durable

    def read(self, topic_id: str, partition: int, start: int, end: int, budget: int) -> bytes:
        batches, _size = self.node.stores[(topic_id, partition)].read(start, end, budget)
        return b"".join(b.data for b in batches)

    def restart(self) -> None:
        self.node.crash()
        self.node.restart(_sized)
        self.queue.run_until(self.queue.now_ms + 1_000)

    def close(self) -> None:
        pass


class DaemonShell:
    def __init__(self, cluster_id: str, clock: Callable[[], int] = lambda: NOW) -> None:
        self.cluster_id = cluster_id
        self.clock = clock
        self._tmp = tempfile.TemporaryDirectory(prefix=f"transcript-{cluster_id}-")
        self.loop = asyncio.new_event_loop()
        self.node = self._open()

    def _open(self) -> ClusterNode:
        node = ClusterNode(Path(self._tmp.name), self.cluster_id, fsync=False, clock=self.clock)
        node.state.links = LinkTable(self.cluster_id, LIMITS)
        node.open()
        return node

    @property
    def state(self) -> ClusterState:
        return self.node.state

    def execute(self, effects: Sequence[Effect]) -> None:
        self.loop.run_until_complete(self.node.execute(list(effects)))

    def read(self, topic_id: str, partition: int, start: int, end: int, budget: int) -> bytes:
        return self.node.stores[(topic_id, partition)].read(start, end, budget)

    def restart(self) -> None:
        self._stop()
        self.node = self._open()
        self.execute(self.node.state.recovery_completions(self.clock()))
        self.node.state.links.reset_runtime(self.clock())

    def _stop(self) -> None:
        self.loop.run_until_complete(self.node.stop())

    def close(self) -> None:
        self._stop()
        self.loop.close()
        self._tmp.cleanup()


@dataclass
class Step:
    command: str
    expected: list[str]
    line: int


def parse(text: str) -> list[Step]:
    steps: list[Step] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            i += 1
            continue
        start = i + 1
        if i + 1 >= len(lines) or lines[i + 1] != "----":
            raise ValueError(f"line {start}: {line!r} is not followed by ----")
        i += 2
        expected: list[str] = []
        while i < len(lines) and lines[i].strip():
            expected.append(lines[i])
            i += 1
        steps.append(Step(line, expected, start))
    return steps


def render(steps: Sequence[Step], outputs: Sequence[list[str]]) -> str:
    parts = [step.command + "\n----\n" + "".join(o + "\n" for o in out) for step, out in zip(
        steps, outputs, strict=True
    )]
    return "\n".join(parts)


class Transcript:
    """Two clusters on one shell kind; `run(command)` gives the output lines."""

    def __init__(self, make: Callable[[str, Callable[[], int]], Shell]) -> None:
        self.now = NOW
        self.a, self.b = make("A", self.clock), make("B", self.clock)
        self.pump: LanePump | None = None
        self.requests = 0  # JoinGroup request ids
        self._setup()

    def clock(self) -> int:
        return self.now

    def close(self) -> None:
        self.a.close()
        self.b.close()

    def _setup(self) -> None:
        a, b = self.a, self.b
        a.execute(_journal_of(a.state.namespaces.create(1, "orders-", False)))
        config = a.state.links.new_config("ab", "id-1", "B", "b:1", "", "local_dials", "", NOW)
        a.execute(_journal_of(a.state.links.store(config, NOW)))
        mapping = Mapping(
            MappingType.TOPIC, "orders-", "orders-", Leader.LOCAL, True, (0, 0, "")
        )
        a.execute(admin.put_mapping(a.state, "ab", admin.versioned(a.state, mapping, NOW), NOW))
        b.execute(_journal_of(b.state.links.accept_mirror(_wire(a.state.links.get("ab")), NOW)))
        b.execute(admin.reconcile_attachments(b.state, "ab", NOW))

    def shell(self, name: str) -> Shell:
        return {"A": self.a, "B": self.b}[name]

    def run(self, command: str) -> list[str]:
        words = shlex.split(command)
        verb, args = words[0], [w for w in words[1:] if "=" not in w]
        opts = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        handler = getattr(self, "do_" + verb.replace("-", "_"), None)
        if handler is None:
            raise ValueError(f"unknown command {verb!r}")
        out: list[str] = handler(args, opts)
        if self.pump is not None:
            out += self.pump.run()  # what the lanes do now (data may have arrived)
        return out

    # -- commands ---------------------------------------------------------------------------

    def do_topic(self, args: list[str], opts: dict[str, str]) -> list[str]:
        shell = self.shell(args[0])
        _t, effects = shell.state.create_topic(
            args[1], int(opts.get("partitions", "1")), {}, f"{args[0]}-{args[1]}"
        )
        shell.execute(effects)
        return [f"{args[0]} created {args[1]}"]

    def do_produce(self, args: list[str], opts: dict[str, str]) -> list[str]:
        shell, topic = self.shell(args[0]), args[1]
        p, n = int(opts.get("p", "0")), int(opts["n"])
        value = opts.get("value", "x").encode()
        batch = rb.build_batch([rb.RecordSpec(None, value, self.now)] * n)
        result = shell.state.produce(topic, p, batch, "", self.now)
        shell.execute(list(result.effects))
        return self._partitions(args[0], topic)

    def do_discover(self, args: list[str], opts: dict[str, str]) -> list[str]:
        a, b = self.a.state, self.b.state
        namespaces = [
            rounds.source_topics(a, a.links.get("ab"), m.remote_prefix)
            for m in rep.follower_mappings(b.links.get("ab"), "topic")
        ]
        ids = iter(f"B-{i}" for i in range(1_000))
        plan = rounds.plan_topics(b, b.links.get("ab"), namespaces, lambda: next(ids))
        self.b.execute(plan.effects)
        return [f"B created {local} (from {source})" for local, source in plan.created] or [
            "nothing new"
        ]

    def do_handshake(self, args: list[str], opts: dict[str, str]) -> list[str]:
        served = procedures.serve(self.a.state, Handshake(_wire(self.b.state.links.get("ab"))),
                                  self.now)
        self.a.execute(served.effects)
        answer = served.answer
        assert isinstance(answer, LinkConfig)
        accepted = rounds.accept_handshake_answer(self.b.state, "ab", _wire(answer), self.now)
        self.b.execute(accepted.effects)
        mine = self.b.state.links.get("ab").mirrored().agreed_record()
        agree = "agree" if mine == self.a.state.links.get("ab").agreed_record() else "DIFFER"
        return [f"configurations {agree}; B: {self.b.state.links.state_name('ab')}"]

    def do_fetch(self, args: list[str], opts: dict[str, str]) -> list[str]:
        a, b = self.a.state, self.b.state
        request = rounds.follower_fetch_request(b, b.links.get("ab"), 1 << 20, self.now)
        answer = rounds.serve_replica_fetch(
            a, request.link_id, request.partitions, self.now, self.reader(self.a),
            int(opts.get("budget", str(1 << 20))), 1 << 20,
        )
        # The follower's side, as both shells run it: truncations and appends,
        # the end of the round, the settling of orphaned partitions.
        notes = self.drive(
            self.b, rounds.apply_fetched(b, "ab", answer, request.local_of, self.now)
        )
        out: list[str] = []
        for f in answer.partitions:
            where = f"{f.source_topic}-{f.partition}"
            if f.marks_wanted:
                out.append(f"{where}: marks wanted")
            elif f.error is not None:
                out.append(f"{where}: refused {f.error.code.name}")
            elif f.diverging_end_offset >= 0:
                out.append(f"{where}: diverged, cut to {f.diverging_end_offset}")
            else:
                batches = len(list(rb.iter_batches(f.records))) if f.records else 0
                out.append(f"{where}: {batches} batches, source hw {f.high_watermark}")
        return out + notes + self._partitions("B") + [self._link_line()]

    def do_txn(self, args: list[str], opts: dict[str, str]) -> list[str]:
        """`txn A ID TOPIC`: a transaction writes one record and stays open."""
        shell, txn_id, topic = self.shell(args[0]), args[1], args[2]
        state = shell.state
        pid, epoch, effects = state.init_producer_id(txn_id, 60_000, self.now)
        shell.execute(effects)
        shell.execute(state.add_partitions_to_txn(txn_id, pid, epoch, [(topic, 0)], self.now))
        batch = rb.build_batch(
            [rb.RecordSpec(None, b"in-txn", self.now)],
            producer_id=pid, producer_epoch=epoch, base_sequence=0, transactional=True,
        )
        shell.execute(list(state.produce(topic, 0, batch, txn_id, self.now).effects))
        return self._partitions(args[0], topic)

    def do_unclean_election(self, args: list[str], opts: dict[str, str]) -> list[str]:
        shell, topic = self.shell(args[0]), args[1]
        p = int(opts.get("p", "0"))
        removed, epoch, effects = shell.state.unclean_election(topic, p, int(opts["to"]))
        shell.execute(effects)
        return [f"{args[0]} {topic}-{p}: removed {removed}, epoch {epoch}"]

    def do_delete_topic(self, args: list[str], opts: dict[str, str]) -> list[str]:
        shell = self.shell(args[0])
        shell.execute(shell.state.delete_topic(args[1]))
        return [f"{args[0]} deleted {args[1]}"]

    def do_restart(self, args: list[str], opts: dict[str, str]) -> list[str]:
        self.shell(args[0]).restart()
        return self._partitions(args[0]) + ([self._link_line()] if args[0] == "B" else [])

    def do_epochs(self, args: list[str], opts: dict[str, str]) -> list[str]:
        p = int(opts.get("p", "0"))
        log = self.shell(args[0]).state.partition(args[1], p)
        history = " ".join(f"{epoch}@{start}" for epoch, start in log.epoch_history)
        return [f"{args[0]} {args[1]}-{p}: epochs {history}"]

    # -- the link's driver (tests/transcript_lanes.py) ----------------------------------------

    def do_start(self, args: list[str], opts: dict[str, str]) -> list[str]:
        """`start X [max_wait_ms=N] [fetch_max_bytes=N] [partition_max_bytes=N]`."""
        d = driver.DriverSettings()
        settings = driver.DriverSettings(
            int(opts.get("max_wait_ms", d.max_wait_ms)),
            int(opts.get("fetch_max_bytes", d.fetch_max_bytes)),
            int(opts.get("partition_max_bytes", d.partition_max_bytes)),
        )
        self.pump = LanePump(self, args[0], settings)
        return []

    def _lanes(self) -> LanePump:
        if self.pump is None:
            raise ValueError("no driver runs: `start A|B` first")
        return self.pump

    def do_deliver(self, args: list[str], opts: dict[str, str]) -> list[str]:
        self._lanes().deliver(Lane(args[0]))
        return []

    def do_refuse(self, args: list[str], opts: dict[str, str]) -> list[str]:
        self._lanes().refuse(Lane(args[0]), ErrorCode[args[1]])
        return []

    def do_timeout(self, args: list[str], opts: dict[str, str]) -> list[str]:
        pump = self._lanes()
        return [*pump.advance(pump.deadline_of(Lane(args[0]))), f"now {self.now}"]

    def do_advance(self, args: list[str], opts: dict[str, str]) -> list[str]:
        to = self.now + int(args[0])
        if self.pump is None:
            self.now = to
            return [f"now {self.now}"]
        return [*self.pump.advance(to), f"now {self.now}"]

    def do_wake(self, args: list[str], opts: dict[str, str]) -> list[str]:
        self._lanes().wake()
        return []

    def do_set_mode(self, args: list[str], opts: dict[str, str]) -> list[str]:
        """`set-mode A|B sync|async`: an operator's set-mode there, not told
        to the other side (it learns it from the link)."""
        shell = self.shell(args[0])
        records, _moved = rounds.set_link_mode(shell.state, "ab", args[1].upper(), self.now)
        shell.execute(journal(records))
        return [f"{args[0]} link ab: mode {shell.state.links.get('ab').mode}"]

    def do_delete_link(self, args: list[str], opts: dict[str, str]) -> list[str]:
        shell = self.shell(args[0])
        shell.execute(admin.delete_link(shell.state, "ab", False, self.now))
        return [f"{args[0]} deleted link ab"]

    def do_attach(self, args: list[str], opts: dict[str, str]) -> list[str]:
        """`attach A group PREFIX`: A leads a namespace of groups on the link
        (B hears of it with the next handshake)."""
        shell, kind, prefix = self.shell(args[0]), MappingType(args[1]), args[2]
        state = shell.state
        shell.execute(_journal_of(state.namespaces.create(ResourceType[kind.name], prefix, False)))
        mapping = Mapping(kind, prefix, prefix, Leader.LOCAL, True, (0, 0, ""))
        shell.execute(admin.put_mapping(state, "ab", admin.versioned(state, mapping, self.now),
                                        self.now))
        return [f"{args[0]} leads {kind} {prefix} on link ab"]

    def do_commit(self, args: list[str], opts: dict[str, str]) -> list[str]:
        """`commit A GROUP TOPIC OFFSET [p=P]`: a consumer's commit."""
        shell, group, topic, offset = self.shell(args[0]), args[1], args[2], int(args[3])
        p = int(opts.get("p", "0"))
        shell.execute(shell.state.commit_group_offsets(
            group, -1, "", {(topic, p): (offset, "", -1)}, self.now
        ))
        return self._groups(args[0])

    def do_groups(self, args: list[str], opts: dict[str, str]) -> list[str]:
        return self._groups(args[0])

    def do_join(self, args: list[str], opts: dict[str, str]) -> list[str]:
        """`join A GROUP [session=MS]`: a new member joins (JoinGroup)."""
        shell, group = self.shell(args[0]), args[1]
        session_ms = int(opts.get("session", "6000"))
        self.requests += 1
        request = JoinRequest(group, "", "c", session_ms, 0, "consumer", (("range", b""),))
        replies = shell.state.groups.join(self.requests, request, self.now)
        return [_reply_text(r) for r in replies] + self._group_states(args[0])

    def do_tick(self, args: list[str], opts: dict[str, str]) -> list[str]:
        """`tick A`: every timer of the cluster, once (`timers.tick`)."""
        shell = self.shell(args[0])
        box: list[list[GroupReply]] = []

        def ticking() -> Generator[Request, Any, None]:
            box.append((yield from timers.tick(shell.state, self.now)))

        notes = self.drive(shell, ticking())
        return notes + [_reply_text(r) for r in box[0]] + self._group_states(args[0])

    def _groups(self, cluster: str) -> list[str]:
        state = self.shell(cluster).state
        out = []
        for group, _state, _type in sorted(state.groups.list_groups()):
            for (topic, p), c in sorted(state.groups.committed(group, None).items()):
                out.append(f"{cluster} {group}: {topic}-{p} at {c.offset}")
        return out or [f"{cluster}: no committed offsets"]

    def _group_states(self, cluster: str) -> list[str]:
        state = self.shell(cluster).state
        return [f"{cluster} {g}: {s}" for g, s, _t in sorted(state.groups.list_groups())]

    def do_show(self, args: list[str], opts: dict[str, str]) -> list[str]:
        out = self._partitions(args[0])
        if args[0] == "B":
            out.append(self._link_line())
            if "ab" not in self.b.state.links.configs:
                return out
            for row in admin.link_summary(self.b.state, "ab", self.now).partitions:
                lag = row.lag_records if row.lag_known else "unknown"
                out.append(f"  row {row.topic}-{row.partition} {row.role}: lag {lag}")
        return out

    # -- output -----------------------------------------------------------------------------

    def _partitions(self, cluster: str, only: str = "") -> list[str]:
        state = self.shell(cluster).state
        out = []
        for name in sorted(state.topics):
            if only and name != only:
                continue
            for p, log in enumerate(state.topics[name].partitions):
                out.append(
                    f"{cluster} {name}-{p}: log {log.log_start_offset}..{log.log_end_offset} "
                    f"hw {log.high_watermark} lso {log.last_stable_offset} "
                    f"epoch {log.leader_epoch}"
                )
        return out or [f"{cluster}: no topics"]

    def _link_line(self) -> str:
        if "ab" not in self.b.state.links.configs:
            return "link ab on B: deleted"
        return f"link ab on B: {self.b.state.links.state_name('ab')}"

    def drive(self, shell: Shell, procedure: Generator[Request, Any, None]) -> list[str]:
        """Runs a core procedure on a shell; returns the notes it logged."""
        notes: list[str] = []
        answer: Any = None
        while True:
            try:
                request = procedure.send(answer)
            except StopIteration:
                return notes
            answer = None
            if isinstance(request, Execute):
                shell.execute(request.effects)
                answer = self.now
            elif isinstance(request, Now):
                answer = self.now
            elif isinstance(request, Note):
                notes.append(f"{request.level}: {request.message}")

    def reader(self, shell: Shell) -> rounds.ReplicaReader:
        def read(topic_id: str, p: int, start: int, end: int, budget: int) -> tuple[bytes, int]:
            data = shell.read(topic_id, p, start, end, budget)
            return data, len(data)

        return read


def _wire(config: LinkConfig) -> LinkConfig:
    """What crosses to the other cluster (no secrets, not the address the
    sender dials)."""
    return LinkConfig.from_record(config.shared().to_record())


def _journal_of(records: Sequence[JournalRecord]) -> list[Effect]:
    return journal(records)


def _reply_text(reply: GroupReply) -> str:
    result = reply.result
    if isinstance(result, ClusterError):
        return f"request {reply.request_id} refused: {result.code.name}"
    if isinstance(result, JoinResult):
        return (
            f"request {reply.request_id}: joined {result.member_id}, "
            f"generation {result.generation_id}"
        )
    return f"request {reply.request_id}: synced"
