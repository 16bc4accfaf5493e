"""One round of each replication data-path step, both ends, as plain data.

The daemon (gRPC) and the simulator (virtual time) carry the same rounds over
different transports. Every decision of a round lives here, once; a shell only
encodes, sends, waits and carries out the effects these functions return.

Theory of operation (one link; the follower's side dials or is pushed to):
1. Handshake. The dialing side sends its configuration; the other side checks
   it (`accept_handshake`: link ids, credentials, one follower link per
   namespace) and merges it; the dialing side merges the answer
   (`accept_handshake_answer`). An operator's mode change (`set_link_mode`)
   travels the same way.
2. Discovery. The source lists the topics and READ ACLs of each namespace it
   leads (`source_topics`, `source_namespaces`) and the committed offsets of
   its groups (`source_group_offsets`); the follower creates or reshapes its
   follower topics and adopts the ACLs (`plan_topics`).
3. Fetch. The follower names its position in every follower partition
   (`follower_fetch_request`); the source plans each partition, records the
   fetch (a SYNC acknowledgement), reads within a byte budget and attaches its
   SYNC verdict (`serve_replica_fetch`); the follower truncates or appends
   (`apply_replica_fetch`), and once those appends are durable ends the round
   (`finish_fetch_round`: the remote verdict, the source HW caps, progress).

Rules:
- The source answers a fetch at once when it has bytes to send or a follower
  partition diverged (`FetchAnswer.ready`); otherwise the shell may hold it
  (long poll) and serve it again when data arrives or its wait ends.
- Progress of a whole round is reported inside `LinkTable.deferred()`: the
  link state is recomputed once per round, not once per partition.
- Contact is what arrives from the remote: a call, or the answer to one. A
  leader serving its follower's fetch itself (push) is no contact.
- Reading segment bytes is I/O: the shell passes a reader. Topic ids come from
  the shell too (`new_topic_id`). Time arrives as `now_ms`.

Pure code: no I/O, clocks, threads or randomness.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from linkd.core import histories
from linkd.core import journal as jr
from linkd.core import link_admin as admin
from linkd.core import metadata_sync as msync
from linkd.core import records as rb
from linkd.core import replication as rep
from linkd.core.cluster import ClusterState, DanglingTxn
from linkd.core.effects import AppendBatch, Effect, Journal, Wake
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.links import (
    DEFAULT_FETCH_SILENCE_MS,
    FetchedAgain,
    GapPolicy,
    LinkConfig,
    LinkMode,
    MappingKey,
    MappingType,
    Role,
    UncreatedTopic,
    orphans,
)
from linkd.core.partition import PartitionLog
from linkd.core.provenance import Gap
from linkd.core.quiet_rounds import (
    NO_QUIET,
    QuietPartitions,
    QuietRound,
    StillQuiet,
    still_quiet,
    write_quiet,
)
from linkd.core.quiet_rounds import FollowerProgress as FollowerProgress
from linkd.core.requests import (
    Execute,
    Note,
    NotStored,
    Request,
    WakeWaiters,
    clock,
    execute_refusable,
)

# (topic id, partition, from offset, to offset, max bytes) -> (the bytes of the
# batches overlapping [from, to), the size they count against the byte budget).
# The size is their length unless the shell models other sizes (the simulator
# does: its records stand for larger ones).
ReplicaReader = Callable[[str, int, int, int, int], tuple[bytes, int]]

# A link call fails when its answer has not arrived this long after the call
# (beyond the long poll it asked for, for a replica fetch).
CALL_TIMEOUT_MS = 10_000
# The longest a source holds a replica fetch for data, whatever it asks.
LONGEST_FETCH_WAIT_MS = 30_000


def served_wait_ms(max_wait_ms: int) -> int:
    """How long a source holds a replica fetch that finds no data (long
    poll): what the follower asked, within 0..LONGEST_FETCH_WAIT_MS."""
    return max(0, min(max_wait_ms, LONGEST_FETCH_WAIT_MS))


def fetch_deadline_ms(max_wait_ms: int) -> int:
    """A replica fetch's call deadline: the wait it asks the source to hold
    it for, plus the call timeout. A long poll must never outlive its call:
    a follower whose fetches time out while the source still holds them hears
    only lost contact, and never follows (as Kafka requires
    replica.socket.timeout.ms >= replica.fetch.wait.max.ms)."""
    return served_wait_ms(max_wait_ms) + CALL_TIMEOUT_MS


def fetch_silence_ms(max_wait_ms: int) -> int:
    """How long a follower may go without finishing a fetch round and still
    know its lag (`LinkLimits.fetch_silence_ms`), for fetches that ask the
    source to hold them `max_wait_ms`: the long poll plus 1.5 s, and never
    less than the default (2 s, for the daemon's 500 ms long polls). A fetch
    the source holds is answered as soon as data arrives, so a silence no
    longer than the long poll is no news; a shorter bound would call every
    idle follower of a long-polling link CATCHING_UP."""
    return max(DEFAULT_FETCH_SILENCE_MS, served_wait_ms(max_wait_ms) + 1_500)


def fetch_answer_due_ms(max_wait_ms: int) -> int:
    """How long a healthy source takes at most to answer a fetch that asks
    it to hold `max_wait_ms` (`LinkLimits.fetch_answer_due_ms`): the long
    poll plus 500 ms for the way there and back. A fetch out longer than
    that, unanswered, means the source died or is cut off: the lag the last
    round measured is no longer known."""
    return served_wait_ms(max_wait_ms) + 500


# -- handshake ------------------------------------------------------------------------


def accept_handshake(
    state: ClusterState,
    theirs: LinkConfig,
    create: bool,
    now_ms: int,
    proposed: tuple[MappingKey, ...] = (),
    link_key: str = "",
) -> admin.Accepted:
    """The called side: checks a remote's configuration (its link id; the
    shell has checked the call's session, `link_auth`), merges it
    (`link_admin.accept_remote_config`: what cannot be honoured here is
    refused with a note, or, for the mappings an operator is changing now
    (`proposed`, keys from the sender's side), refuses the whole call), and
    counts the call as contact. `link_key` (sealed): the key a creating
    remote's session brought. Raises ClusterError (nothing changed) on
    refusal."""
    cluster_id = state.links.cluster_id
    existing = state.links.configs.get(theirs.name)
    if existing is None or existing.link_id != theirs.link_id:
        state.links.check_not_deleted(theirs.link_id, theirs.name)
    if create and existing is not None and existing.link_id != theirs.link_id:
        raise ClusterError(
            ErrorCode.LINK_EXISTS,
            f"link {theirs.name!r}",
            f"cluster {cluster_id!r} already has a link named {theirs.name!r}",
        )
    if existing is not None and existing.link_id != theirs.link_id:
        raise ClusterError(
            ErrorCode.INVALID_LINK_CONFIG,
            f"link {theirs.name!r}",
            f"link {theirs.name!r} on {cluster_id!r} has another link id",
        )
    strict = tuple(theirs.mappings[k].mirrored_key for k in proposed if k in theirs.mappings)
    accepted = admin.accept_remote_config(state, theirs, now_ms, strict, link_key)
    state.links.on_contact(theirs.name, now_ms)
    return accepted


def accept_handshake_answer(
    state: ClusterState, link_name: str, answer: LinkConfig, now_ms: int
) -> admin.Accepted:
    """The dialing side: merges the remote's answer; the answer is contact."""
    accepted = admin.accept_remote_config(state, answer, now_ms)
    state.links.on_contact(link_name, now_ms)
    return accepted


def set_link_mode(
    state: ClusterState, link_name: str, mode: str, now_ms: int
) -> tuple[list[jr.JournalRecord], bool]:
    """The operator's set-mode on this side: the led partitions are registered
    before (the core judges FOLLOWING on them) and after the change, and the
    high watermarks re-applied (going ASYNC lifts the followers' hold at once).
    Returns (journal records, whether a high watermark moved); no records when
    the mode is already set. Raises ClusterError (LINK_NOT_FOLLOWING, an
    unknown mode) with nothing changed."""
    state.refresh_led_partitions(now_ms)
    records: list[jr.JournalRecord] = [*state.links.set_mode(link_name, mode, now_ms)]
    if not records:
        return [], False
    state.refresh_led_partitions(now_ms)
    return records, state.refresh_high_watermarks()


# -- discovery: topics, READ ACLs, group offsets ----------------------------------------


@dataclass(frozen=True, slots=True)
class SourceTopic:
    name: str  # the source's name
    partitions: int
    configs: dict[str, str]


@dataclass(frozen=True, slots=True)
class SourceNamespace:
    """One namespace the source leads, under the source's prefix."""

    prefix: str
    topics: tuple[SourceTopic, ...]
    read_acls: tuple[msync.ReadAcl, ...]
    # "topic", or "principal": a principal namespace, whose ACLs follow the
    # link (then `topics` and `read_acls` are empty).
    kind: str = "topic"
    principal_acls: tuple[msync.PrincipalAcl, ...] = ()


def source_topics(state: ClusterState, config: LinkConfig, prefix: str) -> SourceNamespace:
    """Source side (ListSourceTopics): the topics under `prefix` that this side
    leads on the link, and the namespace's READ ACLs."""
    topics = tuple(
        SourceTopic(name, len(t.partitions), dict(t.overrides))
        for name, t in sorted(state.topics.items())
        if rep.in_prefix(name, prefix) and rep.leader_mapping_for(config, name) is not None
    )
    return SourceNamespace(prefix, topics, tuple(msync.source_read_acls(state, prefix)))


def source_principals(state: ClusterState, config: LinkConfig, prefix: str) -> SourceNamespace:
    """Source side (ListSourceTopics of a principal namespace): the ACLs of
    its principals that follow the link, if this side leads it on the link
    (else none)."""
    led = any(m.local_prefix == prefix for m in rep.leader_mappings(config, "principal"))
    acls = tuple(msync.source_principal_acls(state, prefix)) if led else ()
    return SourceNamespace(prefix, (), (), "principal", acls)


def source_namespaces(state: ClusterState, config: LinkConfig) -> list[SourceNamespace]:
    """Source side (push): every namespace this side leads on the link, each
    holding the topics that the namespace's own mapping leads (a longer
    overlapping mapping takes its topics)."""
    out = []
    for mapping in rep.leader_mappings(config, "topic"):
        topics = tuple(
            SourceTopic(name, len(t.partitions), dict(t.overrides))
            for name, t in sorted(state.topics.items())
            if rep.in_prefix(name, mapping.local_prefix)
            and rep.leader_mapping_for(config, name) is mapping
        )
        acls = tuple(msync.source_read_acls(state, mapping.local_prefix))
        out.append(SourceNamespace(mapping.local_prefix, topics, acls))
    for mapping in rep.leader_mappings(config, "principal"):
        out.append(source_principals(state, config, mapping.local_prefix))
    return out


def source_group_offsets(state: ClusterState, prefix: str) -> list[msync.GroupOffset]:
    """Source side: the committed offsets of every group in a namespace."""
    out: list[msync.GroupOffset] = []
    for group_id, _state, _type in sorted(state.groups.list_groups()):
        if not rep.in_prefix(group_id, prefix):
            continue
        for (topic, partition), c in sorted(state.groups.committed(group_id, None).items()):
            out.append(
                msync.GroupOffset(group_id, topic, partition, c.offset, c.metadata, c.leader_epoch)
            )
    return out


@dataclass(frozen=True, slots=True)
class TopicCreation:
    """A follower topic a discovery creates: its effects (its logs, then its
    journal record) are carried out on their own (`carry_out_topics`)."""

    local: str
    source: str
    topic_id: str
    partitions: int
    effects: tuple[Effect, ...]


@dataclass(frozen=True, slots=True)
class TopicsPlan:
    """What discovery changes on the follower: the follower topics it creates
    (each carried out on its own: the storage may refuse one), then the rest
    to carry out in order (reshapes, ACLs; journal records included).
    `prefixes`: the local prefixes of the followed topic namespaces listed."""

    creations: list[TopicCreation]
    rest: list[Effect]
    prefixes: frozenset[str] = frozenset()

    @property
    def effects(self) -> list[Effect]:
        """Every effect, in the order `carry_out_topics` carries them out."""
        return [e for c in self.creations for e in c.effects] + self.rest

    @property
    def created(self) -> list[tuple[str, str]]:
        """The follower topics created, as (local name, source name)."""
        return [(c.local, c.source) for c in self.creations]


def plan_topics(
    state: ClusterState,
    config: LinkConfig,
    namespaces: list[SourceNamespace],
    new_topic_id: Callable[[], str],
    listed_at_ms: int | None = None,
) -> TopicsPlan:
    """Follower side: creates follower topics with the source's shape, follows
    partition additions and config changes, adopts the READ ACLs and the ACLs
    of followed principal namespaces. Namespaces
    this side does not follow on the link are ignored. `new_topic_id` is asked
    once per topic created. `listed_at_ms`: the source listed its topics no
    earlier than this (a failover reports from when the topics were known)."""
    runtime = state.links.runtime.get(config.name)
    if runtime is not None and listed_at_ms is not None:
        runtime.topics_known_at_ms = listed_at_ms

    effects: list[Effect] = []
    creations: list[TopicCreation] = []
    prefixes: set[str] = set()
    followed = {m.remote_prefix: m for m in rep.follower_mappings(config, "topic")}
    for ns in namespaces:
        mapping = followed.get(ns.prefix) if ns.kind == MappingType.TOPIC else None
        if mapping is None:
            continue
        prefixes.add(mapping.local_prefix)
        for source in ns.topics:
            local = rep.map_name(source.name, mapping.remote_prefix, mapping.local_prefix)
            if local not in state.topics:
                topic_id = new_topic_id()
                made = rep.create_replica_topic(
                    state, local, source.partitions, dict(source.configs), topic_id, config
                )
                creations.append(
                    TopicCreation(local, source.name, topic_id, source.partitions, tuple(made))
                )
            else:
                effects += rep.follow_topic_shape(
                    state, local, source.partitions, dict(source.configs)
                )
    records: list[jr.JournalRecord] = []
    for ns in namespaces:
        if ns.kind == MappingType.PRINCIPAL:
            records += msync.apply_principal_acls(
                state, config.name, ns.prefix, list(ns.principal_acls)
            )
        elif ns.prefix in followed:
            records += msync.apply_read_acls(state, config.name, ns.prefix, list(ns.read_acls))
    if records:
        effects.append(Journal(tuple(records)))
    return TopicsPlan(creations, effects, frozenset(prefixes))


def carry_out_topics(
    state: ClusterState, link_name: str, plan: TopicsPlan
) -> Generator[Request, object, bool]:
    """Follower side: carries out a discovery's plan. Each follower topic is
    created on its own, and its storage may refuse to open its logs (a full
    disk, no descriptors left): the shell answers `NotStored` and nothing of
    the topic is kept. Such a topic is not followed, and the link must not
    say it is: it is kept in `LinkRuntime.uncreated` with a STORAGE_REFUSED
    refusal naming it (its partitions' rows, the state, the failover's
    refusal and the metric show it) until a discovery creates it or the
    source no longer lists it. Then the rest of the plan. Returns whether it
    created follower topics."""
    runtime = state.links.runtime.get(link_name)
    before = runtime.uncreated if runtime is not None else {}
    refused: dict[str, UncreatedTopic] = {}
    made = False
    for c in plan.creations:
        done = yield from execute_refusable(c.effects)
        if not isinstance(done, NotStored):
            made = True
            yield Note("info", f"link {link_name!r}: follower topic {c.local!r} created from "
                       f"{c.source!r}")  # fmt: skip
            continue
        kept = state.topics.get(c.local)
        if kept is not None and kept.topic_id == c.topic_id:
            state.discard_unjournalled_topic(c.topic_id)  # the shell kept none of it
        earlier = before.get(c.local)
        refusal = ClusterError(
            ErrorCode.STORAGE_REFUSED,
            c.local,
            f"{c.local}: disk refused writes: this cluster's storage refused to create the "
            f"follower topic's {c.partitions} partition logs ({done.error.message}); it is "
            "created, and copied, once the storage takes writes",
        )
        refused[c.local] = UncreatedTopic(
            c.source, c.partitions, refusal, earlier.since_ms if earlier else done.now_ms
        )
        if earlier is None:
            yield Note("warning", f"link {link_name!r}: {refusal.message}")
    if plan.rest:
        yield Execute(tuple(plan.rest))
    if state.faults.undid(17):
        refused = {}  # the old path: the refusal is only noted
    if runtime is not None and (before or refused):
        # What this discovery listed replaces what was known of its namespaces.
        still = {
            t: u
            for t, u in before.items()
            if t not in state.topics and not any(rep.in_prefix(t, p) for p in plan.prefixes)
        }
        state.links.set_uncreated(link_name, {**still, **refused}, (yield from clock()))
    return made


# -- replica fetch ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionFetch:
    """The follower's position in one partition, under the source's name."""

    source_topic: str
    partition: int
    fetch_offset: int
    last_fetched_epoch: int
    max_bytes: int = 0  # 0: the source's default
    # Marks of the follower's log, newest first: its last batch always (the
    # source holds that batch, CRC and all, exactly when the two logs agree
    # up to the follower's log end); all of `histories.log_marks` when the
    # source asked for them, to find where the logs part. Leader epochs are
    # numbered per cluster and copies keep the origin's, so they cannot tell
    # records written on the follower, or rewritten by a cluster between,
    # from the source's; the epoch is checked only when no mark is sent.
    marks: tuple[histories.BatchMark, ...] = ()
    all_marks: bool = False
    # The follower's provenance names the source (the two partitions belong
    # to one replicated topic), for a log none of whose marks the source holds.
    related: bool = False
    # The follower does not cut it where the source said (its own clients'
    # acknowledged writes would go: `own_writes_refusal`): the source copies
    # nothing and reports why, until a recover on the follower cuts it.
    held: bool = False
    # The range of base offsets [marks_from, marks_to) whose every batch of
    # the follower's log is among `marks` (-1: none claimed): the source cuts
    # where the logs part only between two marks with no batch between them.
    marks_from: int = -1
    marks_to: int = -1


# The epoch of a fetch that belongs to no fetch session (a push's request,
# a follower that keeps none): it names every partition and is answered whole.
SESSIONLESS = -1
# The epoch of a full fetch that opens a fetch session (`fetch_sessions`).
OPENING = 0


@dataclass(frozen=True, slots=True)
class FetchSessionRef:
    """Which fetch session a request belongs to (KIP-227's idea,
    `fetch_sessions`): `epoch` SESSIONLESS (none), OPENING (a full request
    that opens one; `session_id` 0) or the session's next epoch, 1 and up
    (an incremental request: it names only the partitions whose position
    changed since the last, and `forgotten` those no longer fetched)."""

    session_id: int = 0
    epoch: int = SESSIONLESS
    forgotten: tuple[tuple[str, int], ...] = ()

    @property
    def incremental(self) -> bool:
        return self.epoch > OPENING


NO_FETCH_SESSION = FetchSessionRef()


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """A follower's fetch: its follower partitions of the link (all of them,
    or in a fetch session only those whose position changed), and the map
    from (source topic, partition) back to the local topic (all of them)."""

    link_id: str
    partitions: tuple[PartitionFetch, ...]
    local_of: dict[tuple[str, int], str]
    # When it left (the follower's clock): the round it starts reports its
    # source's high watermarks as known from then on.
    sent_ms: int | None = None
    fetch_session: FetchSessionRef = NO_FETCH_SESSION


# What of a log a plain fetch of it is made of (its position and last
# batch), read for a whole topic at once: the same basis, the same fetch.
_FETCH_BASIS = operator.attrgetter(
    "log_end_offset", "durable_offset", "log_start_offset", "rewrites"
)


@dataclass(slots=True)
class TopicFetches:
    """A followed topic's plain fetches as last built
    (`follower_fetch_request`'s `built`), each from the log at its index
    with the basis at its index (`_FETCH_BASIS`)."""

    source: str
    max_bytes: int
    logs: list[PartitionLog]
    basis: list[tuple[int, int, int, int]]
    fetches: list[PartitionFetch]
    local_of: dict[tuple[str, int], str]


@dataclass(slots=True)
class BuiltFetches:
    """Each followed topic's plain fetches as last built, by local topic
    (kept by the caller across rounds), and the cluster's log feed as the
    last build read it (`log_feed.LogFeed`: its sequence number and layout;
    -1: compare every log)."""

    topics: dict[str, TopicFetches] = field(default_factory=dict)
    feed_seq: int = -1
    layout: int = -1

    # Tests and validation runs: each build is checked against every log.
    check_against_scan: ClassVar[bool] = False

    def moved(self, state: ClusterState) -> dict[str, set[int]] | None:
        """The partitions of each topic whose log moved since the last
        build (None: compare every log), and from now on the last build."""
        feed = state.log_feed
        moved: dict[str, set[int]] | None = None
        if self.layout == feed.layout:
            moved = {}
            for topic, p in feed.since(self.feed_seq):
                moved.setdefault(topic, set()).add(p)
        self.feed_seq, self.layout = feed.seq, feed.layout
        return moved


def follower_fetch_request(
    state: ClusterState,
    config: LinkConfig,
    partition_max_bytes: int = 0,
    sent_ms: int | None = None,
    built: BuiltFetches | None = None,
) -> FetchRequest:
    """Follower side: its position in every partition of every topic it
    follows on the link (a topic belongs to its longest matching prefix).
    `sent_ms`: the request leaves now (the round it starts will report the
    source's high watermarks as known from this time on: the source serves
    it later, so its HW then is at least its HW now). `built`: each topic's
    plain fetches as last built, kept by the caller across rounds and used
    again while their logs are as they were (`_topic_fetches`)."""
    runtime = state.links.runtime.get(config.name)
    if sent_ms is not None and runtime is not None:
        runtime.fetch_sent_ms = sent_ms  # a push answers the last request made
    followed = rep.follower_mappings(config, "topic")
    parts: list[PartitionFetch] = []
    local_of: dict[tuple[str, int], str] = {}
    seen: set[str] = set()
    moved = built.moved(state) if built is not None else None
    for topic in sorted(state.topics):
        mapping = max(
            (m for m in followed if rep.in_prefix(topic, m.local_prefix)),
            key=lambda m: len(m.local_prefix),
            default=None,
        )
        if mapping is None:
            continue
        source = rep.map_name(topic, mapping.local_prefix, mapping.remote_prefix)
        gap_stopped = runtime.gap_stopped if runtime is not None else ()
        marks_wanted = runtime.marks_wanted if runtime is not None else ()
        held = runtime.own_writes_held if runtime is not None else None
        logs = state.topics[topic].partitions
        plain: TopicFetches | None = None
        if built is not None:
            seen.add(topic)
            plain = _topic_fetches(
                state, built, topic, logs, source, partition_max_bytes,
                None if moved is None else moved.get(topic, set()),
            )  # fmt: skip
            if not gap_stopped and not held and not marks_wanted:
                # The common case: none stopped, held or asked for marks.
                parts += plain.fetches
                local_of.update(plain.local_of)
                continue
        for p, log in enumerate(logs):
            holding = wanted = False
            if gap_stopped and (topic, p) in gap_stopped:
                continue  # stopped at a gap until the operator resumes it
            if held and (topic, p) in held:
                if held[(topic, p)] == log.log_end_offset:
                    holding = True  # not cut over its own writes: until a recover cuts it
                else:
                    del held[(topic, p)]
            wanted = bool(marks_wanted) and (topic, p) in marks_wanted
            if holding or wanted:
                parts.append(_fetch(state, config, topic, p, source, partition_max_bytes,
                                    holding, wanted))  # fmt: skip
            elif plain is not None:
                parts.append(plain.fetches[p])
            else:
                parts.append(_plain_fetch(log, source, p, partition_max_bytes))
            local_of[(source, p)] = topic
    if built is not None and len(built.topics) > len(seen):
        for topic in [t for t in built.topics if t not in seen]:
            del built.topics[topic]  # no longer followed
    return FetchRequest(config.link_id, tuple(parts), local_of, sent_ms)


def _topic_fetches(
    state: ClusterState,
    built: BuiltFetches,
    topic: str,
    logs: list[PartitionLog],
    source: str,
    max_bytes: int,
    moved: set[int] | None,
) -> TopicFetches:
    """`topic`'s plain fetches (one per log of `logs`), from `built`: a
    fetch is built again only where its log or its basis is not as last
    built from. `moved`: the partitions whose log moved since the last build
    (the others are as they were); None: the topic's basis is read at once
    and compared with the last (the logs are then watched: their moves are
    told from then on)."""
    last = built.topics.get(topic)
    if last is not None and (last.source != source or last.max_bytes != max_bytes):
        last = None
    if last is not None and moved is not None:
        for p in moved:
            if p < len(logs):
                now_basis = _FETCH_BASIS(logs[p])
                if last.basis[p] != now_basis:
                    last.basis[p] = now_basis
                    last.fetches[p] = _plain_fetch(logs[p], source, p, max_bytes)
        if built.check_against_scan:
            assert last.logs == logs and last.basis == list(map(_FETCH_BASIS, logs)), (
                f"{topic}: the fetches kept differ from the logs' (a move the feed missed)"
            )
        return last
    basis = list(map(_FETCH_BASIS, logs))
    for log in logs:
        state.log_feed.watch(log)
    if last is not None:
        if last.basis == basis and last.logs == logs:
            return last  # (logs compare by identity)
        known = min(len(last.logs), len(logs))
    else:
        known = 0
    fetches: list[PartitionFetch] = []
    for p, log in enumerate(logs):
        if last is not None and p < known and last.logs[p] is log and last.basis[p] == basis[p]:
            fetches.append(last.fetches[p])
        else:
            fetches.append(_plain_fetch(log, source, p, max_bytes))
    same_keys = last is not None and len(last.logs) == len(logs)
    local_of = last.local_of if last is not None and same_keys else {
        (source, p): topic for p in range(len(logs))
    }  # fmt: skip
    made = TopicFetches(source, max_bytes, list(logs), basis, fetches, local_of)
    built.topics[topic] = made
    return made


def _fetch(
    state: ClusterState,
    config: LinkConfig,
    topic: str,
    p: int,
    source: str,
    partition_max_bytes: int,
    holding: bool,
    wanted: bool,
) -> PartitionFetch:
    """A partition's fetch, built from its log: held uncut (`holding`),
    asking for every mark (`wanted`), or plain."""
    log = state.topics[topic].partitions[p]
    runtime = state.links.runtime.get(config.name)
    spans = runtime.marks_spans if runtime is not None else {}
    offset, epoch = rep.follower_position_of(log)
    complete: tuple[int, int] | None = None
    if wanted:
        marks, complete = histories.log_marks(state, topic, p, True, spans.get((topic, p)))
        related = _names_source(state, config, topic, p)
    else:
        marks, related = histories.last_mark(log), False
    low, high = complete if complete is not None else (-1, -1)
    return PartitionFetch(
        source,
        p,
        offset,
        epoch,
        partition_max_bytes,
        () if holding else marks,
        wanted and not holding,
        related,
        holding,
        -1 if holding else low,
        -1 if holding else high,
    )


def _plain_fetch(log: PartitionLog, source: str, p: int, partition_max_bytes: int
                 ) -> PartitionFetch:  # fmt: skip
    """A fetch of a partition neither held nor asked for every mark."""
    offset, epoch = rep.follower_position_of(log)
    return PartitionFetch(source, p, offset, epoch, partition_max_bytes, histories.last_mark(log))


def _names_source(state: ClusterState, config: LinkConfig, topic: str, partition: int) -> bool:
    return any(
        e.link_id == config.link_id or e.source == config.remote_cluster_id
        for e in state.topics[topic].provenance.get(partition, [])
    )


@dataclass(frozen=True, slots=True)
class MarksWanted:
    """The source's answer when the follower's last batch is not in its log:
    send every mark, to find where the logs part; with `span`, the marks of
    the batches whose base offsets lie in [span[0], span[1]) (the logs part
    between two marks there, and batches between them were not marked)."""

    span: tuple[int, int] | None = None


MARKS_WANTED = MarksWanted()


def check_marks(
    state: ClusterState, config: LinkConfig, part: PartitionFetch
) -> rep.Diverged | ClusterError | MarksWanted | None:
    """Source side: the follower's marks against this log. None: the logs
    agree up to the follower's log end. Else, given every mark, where they
    part below it: the follower must truncate there (it holds records this
    cluster never had: written on it, copied from elsewhere, or cut here
    since); a log none of whose marks this one holds, and whose provenance
    does not name this cluster, is refused (NO_SHARED_HISTORY)."""
    if not part.marks:
        return None
    log = state.partition(part.source_topic, part.partition)
    follower_end = part.fetch_offset
    oldest = part.marks[-1].base_offset
    if follower_end <= log.log_start_offset:
        return None  # wholly below this log's start: it resumes there (a gap)
    parting = histories.parting_by_marks(state, part.source_topic, part.partition, part.marks)
    common = parting.common
    if common is not None and common >= follower_end:
        return None
    if not part.all_marks:
        return MARKS_WANTED
    below, above = parting.below, parting.above
    if below is not None and above is not None:
        # The logs part between these two marks: exactly at `common` when the
        # follower marked every batch between them, else ask for those
        # (a bisection: each round narrows the range), never cutting below
        # the last batch both hold.
        if not part.marks_from <= below.base_offset < above.base_offset < part.marks_to:
            return MarksWanted((below.base_offset, above.base_offset + 1))
    if common is None:
        if not part.related:
            return ClusterError(
                ErrorCode.NO_SHARED_HISTORY,
                f"topic {part.source_topic!r}",
                f"the copy of {part.source_topic}-{part.partition} on cluster "
                f"{config.remote_cluster_id!r} holds no batch of {part.source_topic}-"
                f"{part.partition} on {state.cluster_id!r}, and its provenance does not name "
                f"{state.cluster_id!r} (a different topic of the same name?); it is not "
                "followed: detach its namespace, or delete that topic and attach again",
            )
        common = max(oldest, log.log_start_offset)
    if common == log.log_end_offset < follower_end and rep.copying_behind(
        state, part.source_topic, part.partition
    ):
        # The follower holds all of this log and more, and this partition is
        # still copying from its own source: it waits (`plan_replica_fetch`).
        return None
    if common < follower_end:
        return rep.Diverged(common, -1)
    return None


@dataclass(slots=True)
class FetchedPartition:
    """The source's answer for one partition."""

    source_topic: str
    partition: int
    high_watermark: int = 0
    log_start_offset: int = 0
    log_end_offset: int = 0
    leader_epoch: int = 0
    diverging_end_offset: int = -1  # >= 0: truncate there, fetch again
    diverging_epoch: int = -1
    records: bytes = b""
    size_bytes: int = 0  # what `records` counted against the budget
    error: ClusterError | None = None
    # The follower's last batch is not in the source's log: it sends every
    # mark next time (`check_marks`).
    marks_wanted: bool = False
    # With `marks_wanted`, the range of base offsets to mark every batch of
    # (`MarksWanted.span`; -1: the usual marks).
    marks_from: int = -1
    marks_to: int = -1
    # Why the log start is where it is ("retention", "deleted records"; ""
    # when not known): a follower behind it records the gap with the cause.
    log_start_cause: str = ""
    # Read ahead of the follower's request (a pipelined push, `continue_fetch`):
    # the follower position these records continue (None: they answer the
    # follower's own request). A follower whose log does not end exactly
    # there drops them: applied out of turn they would leave a hole.
    continues_from: int | None = None
    # The answer to a partition the follower sent as held (`held_refusal`).
    held: bool = False


@dataclass(slots=True)
class FetchAnswer:
    partitions: list[FetchedPartition]
    # The source's SYNC verdict on what it leads on the link ("" when ASYNC).
    sync_state: str = ""
    total_bytes: int = 0
    # Whether a high watermark moved on the source (wake its waiters).
    hw_moved: bool = False
    # When the source read the high watermarks this answer carries (the
    # source's clock; None: not said). A push passes it on
    # (`Push.source_hw_at_ms`); a pulled answer needs none (its request's
    # `sent_ms` bounds it on the follower's clock).
    served_at_ms: int | None = None
    # The fetch session the answer belongs to (0: none; an OPENING request
    # learns its id here), and why the source refused the request's session
    # ("": it did not): the follower's next request is a full one.
    fetch_session_id: int = 0
    fetch_session_refused: str = ""
    # Follower side, not on the wire: a fetch session's partitions the
    # source left out, with no news since their last answer, each with the
    # source high watermark that answer carried
    # (`fetch_sessions.FollowerFetchSession.answered` puts them here). Each
    # is reached as the last round left it (`quiet_rounds`).
    unchanged: QuietPartitions = NO_QUIET

    @property
    def ready(self) -> bool:
        """Worth sending now rather than holding for data (long poll)."""
        return self.total_bytes > 0 or bool(self.fetch_session_refused) or any(
            p.diverging_end_offset >= 0 or p.marks_wanted for p in self.partitions
        )


def serve_replica_fetch(
    state: ClusterState,
    link_id: str,
    parts: Sequence[PartitionFetch],
    now_ms: int,
    read: ReplicaReader,
    budget_bytes: int,
    partition_max_bytes: int,
    *,
    from_remote: bool = True,
    acknowledges: bool = True,
    rest: SessionRest | None = None,
) -> FetchAnswer:
    """Source side: answers a follower's fetch. Each partition is planned
    (`plan_replica_fetch`: divergence, how far it may copy); each fetch is
    recorded (`on_leader_fetch`: on a SYNC link it acknowledges what lies
    below the fetch offset, so high watermarks may move, and the answer
    carries where they moved to); bytes are read until `budget_bytes` is
    spent, each partition at most its own max bytes (else
    `partition_max_bytes`). Raises ClusterError if the link is unknown.

    A fetch that arrived from the remote is contact; one a pushing leader
    serves itself with the follower's last request (`from_remote=False`) is
    not, else a dead follower would keep the link connected. A request the
    leader made up itself (`continue_fetch`, `acknowledges=False`) is not the
    follower's position: it is not recorded as a fetch.

    `rest`: a fetch session's other partitions
    (`fetch_sessions.SourceFetchSession.parts_to_serve`). The quiet ones,
    with no news since their last answer, are each fetched again at the
    same position, so recorded as a fetch, but not answered. The spare ones,
    whose follower is behind but whose log is as their last answer found
    it, are served after `parts` while the byte budget lasts, the rest as
    quiet ones (with no bytes to carry, their answer would say what the
    last one said)."""
    config = state.links.by_id(link_id)
    links = state.links
    answer = FetchAnswer([], served_at_ms=now_ms)

    def topic_logs(topic: str) -> list[PartitionLog]:
        return state.topic(topic).partitions

    with links.deferred():
        if from_remote:
            links.on_contact(config.name, now_ms)
        for part in parts:
            _serve_one(state, config, part, answer, read, budget_bytes, partition_max_bytes,
                       now_ms, acknowledges)  # fmt: skip
        spare_served = 0
        for part in rest.spare_in_order() if rest is not None else ():
            if answer.total_bytes >= budget_bytes:
                # The budget is spent (it only fills): the rest of the spare
                # ones are fetched again at their position, not answered.
                break
            _serve_one(state, config, part, answer, read, budget_bytes, partition_max_bytes,
                       now_ms, acknowledges)  # fmt: skip
            spare_served += 1
        unanswered = (rest or NO_REST).unanswered(spare_served)
        if acknowledges:
            # The quiet ones and the spare ones left, fetched again (also
            # with none: the rows fetched so last time leave the fold).
            links.on_fetched_again(config.name, unanswered, topic_logs, now_ms)
    if config.mode == LinkMode.SYNC:
        # The fetch offsets acknowledge: the high watermarks may move, and the
        # follower learns where they moved to in this very answer.
        again = unanswered.fetches(unanswered.keys) if unanswered.keys else []
        before = [state.partition(topic, p).high_watermark for topic, p, _ in again]
        answer.hw_moved = state.refresh_high_watermarks()
        for entry in answer.partitions:
            if entry.error is None and entry.diverging_end_offset < 0:
                entry.high_watermark = state.partition(
                    entry.source_topic, entry.partition
                ).high_watermark
        if answer.hw_moved:
            answer.partitions += _hw_news(state, again, before)
    answer.sync_state = links.local_sync_state(config.name)
    return answer


def _serve_one(
    state: ClusterState,
    config: LinkConfig,
    part: PartitionFetch,
    answer: FetchAnswer,
    read: ReplicaReader,
    budget_bytes: int,
    partition_max_bytes: int,
    now_ms: int,
    acknowledges: bool,
) -> None:
    """`serve_replica_fetch` for one partition: its answer, appended to
    `answer`."""
    links = state.links
    entry = FetchedPartition(part.source_topic, part.partition)
    if not acknowledges:
        # Whatever it says (records, a divergence, a refusal), it
        # answers a position the follower may not be at.
        entry.continues_from = part.fetch_offset
    answer.partitions.append(entry)
    if part.held and rep.leads_partition(state, config, part.source_topic, part.partition):
        # (One the link no longer leads, a fetch on its way when the
        # namespace was detached or the topic deleted, is refused as
        # any fetch of it is, by the plan below, and leaves no row.)
        entry.held = True
        entry.error = held_refusal(state, config, part)
        links.on_leader_refused(config.name, part.source_topic, part.partition, entry.error, now_ms)
        return
    try:
        plan = rep.plan_replica_fetch(
            state,
            config.link_id,
            part.source_topic,
            part.partition,
            part.fetch_offset,
            -1 if part.marks else part.last_fetched_epoch,
        )
        checked = check_marks(state, config, part)
    except ClusterError as exc:
        entry.error = exc
        return
    if isinstance(checked, MarksWanted):
        entry.marks_wanted = True
        if checked.span is not None:
            entry.marks_from, entry.marks_to = checked.span
        return
    if isinstance(checked, ClusterError):
        entry.error = checked
        links.on_leader_refused(config.name, part.source_topic, part.partition, checked, now_ms)
        return
    if checked is not None and (
        not isinstance(plan, rep.Diverged) or checked.end_offset < plan.end_offset
    ):
        plan = checked
    _tell_bounds(state, entry)
    if isinstance(plan, rep.Diverged):
        entry.diverging_end_offset = plan.end_offset
        entry.diverging_epoch = plan.epoch
        return
    if acknowledges:
        _record_fetch(state, config.name, part, now_ms)
    if plan.upper_offset > plan.offset and answer.total_bytes < budget_bytes:
        part_max = part.max_bytes or partition_max_bytes
        budget = max(1, min(part_max, budget_bytes - answer.total_bytes))
        topic_id = state.topic(part.source_topic).topic_id
        data, size = read(topic_id, part.partition, plan.offset, plan.upper_offset, budget)
        entry.records = data
        entry.size_bytes = size
        answer.total_bytes += size


class SessionRest(Protocol):
    """A fetch session's partitions besides those answered outright
    (`serve_replica_fetch`'s `rest`)."""

    def spare_in_order(self) -> Iterator[PartitionFetch]:
        """The spare ones, answered in this order while the budget lasts."""
        ...

    def unanswered(self, spare_served: int) -> FetchedAgain:
        """The quiet ones and the spare ones after the first `spare_served`."""
        ...


@dataclass(frozen=True, slots=True)
class ListedRest:
    """A `SessionRest` of listed partitions."""

    quiet: Sequence[PartitionFetch] = ()
    spare: Sequence[PartitionFetch] = ()

    def spare_in_order(self) -> Iterator[PartitionFetch]:
        return iter(self.spare)

    def unanswered(self, spare_served: int) -> FetchedAgain:
        again = (*self.quiet, *self.spare[spare_served:])
        return FetchedAgain.listed(list(map(_FETCHED_AT, again)))


NO_REST = ListedRest()


def _hw_news(
    state: ClusterState, unanswered: Sequence[tuple[str, int, int]], before: list[int]
) -> list[FetchedPartition]:
    """A SYNC source's answers for the session partitions it fetched again
    without answering whose HW the answer's acknowledgements moved: their
    bounds, no records. The markers of one transaction pass their HWs
    together here (`ClusterState.marker_groups`); the follower applies the
    HWs of one answer together, so each of them must be in the same answer,
    else a read_committed reader of the follower would see a transaction on
    one partition before the other."""
    news = []
    for (topic, partition, _), hw in zip(unanswered, before, strict=True):
        if state.partition(topic, partition).high_watermark != hw:
            entry = FetchedPartition(topic, partition)
            _tell_bounds(state, entry)
            news.append(entry)
    return news


def _tell_bounds(state: ClusterState, entry: FetchedPartition) -> None:
    """Fills a source's answer for one partition with where its log stands:
    its end, leader epoch, start (and why it is there) and HW."""
    log = state.partition(entry.source_topic, entry.partition)
    entry.log_end_offset = log.log_end_offset
    entry.leader_epoch = log.leader_epoch
    entry.log_start_offset = log.log_start_offset
    entry.log_start_cause = state.log_start_causes.get((entry.source_topic, entry.partition), "")
    entry.high_watermark = log.high_watermark


# (source topic, partition, fetch offset) of a fetch (`on_leader_fetches`).
_FETCHED_AT = operator.attrgetter("source_topic", "partition", "fetch_offset")


def _record_fetch(state: ClusterState, link_name: str, part: PartitionFetch, now_ms: int
                  ) -> None:  # fmt: skip
    """The follower's fetch of a partition this side leads, at its position,
    recorded (`LinkTable.on_leader_fetch`): answered, or a fetch session's
    quiet or spare partition, fetched again and not answered. Its log is
    there (its plan was made, or the session found it as last answered)."""
    log = state.topics[part.source_topic].partitions[part.partition]
    state.links.on_leader_fetch(
        link_name,
        part.source_topic,
        part.partition,
        part.fetch_offset,
        log.log_end_offset,
        log.high_watermark,
        now_ms,
    )


def continue_fetch(
    config: LinkConfig,
    parts: Sequence[PartitionFetch],
    answer: FetchAnswer,
) -> tuple[PartitionFetch, ...] | None:
    """Leader side of a pipelined push: the request the follower will make
    once it has appended `answer` (the answer to `parts`), so that the next
    push can be read and sent before the follower's reply arrives. Each
    partition goes on from the end of the last batch sent, marked by that
    batch; a partition sent nothing stays where it was.

    None (wait for the follower's own request) unless the answer is a plain
    continuation of the follower's log: not on a SYNC link (the follower's
    own fetches are its acknowledgements and the judge of its sync state),
    nor when any partition diverged, was refused, needs every mark, lies
    below the log start (a gap or a reset is the follower's to settle), or
    when the answer carried no bytes at all. Such a request is served with
    `acknowledges=False`: it is not the follower's position. The follower
    applies the pushes in the order sent; a partition's answer that does not
    continue its log exactly (an earlier push was refused or dropped) is
    dropped there (`FetchedPartition.continues_from`), and its next request
    of its own says where it is."""
    if config.mode == LinkMode.SYNC or answer.total_bytes <= 0:
        return None
    got = {(p.source_topic, p.partition): p for p in answer.partitions}
    out: list[PartitionFetch] = []
    for part in parts:
        fetched = got.get((part.source_topic, part.partition))
        if (
            fetched is None
            or fetched.error is not None
            or fetched.diverging_end_offset >= 0
            or fetched.marks_wanted
            or part.fetch_offset < fetched.log_start_offset
        ):
            return None
        last = _last_header(fetched.records)
        if last is None:
            out.append(part)
            continue
        out.append(
            PartitionFetch(
                part.source_topic,
                part.partition,
                last.next_offset,
                last.partition_leader_epoch,
                part.max_bytes,
                (histories.BatchMark.of(last),),
            )
        )
    return tuple(out)


def _last_header(data: bytes) -> rb.BatchHeader | None:
    """The header of the last whole batch in `data` (None: none)."""
    position, last = 0, None
    while position + rb.HEADER_SIZE <= len(data):
        header = rb.parse_header(data, position)
        if position + header.size_bytes > len(data):
            break
        last, position = header, position + header.size_bytes
    return last


@dataclass(frozen=True, slots=True)
class Truncation:
    """A follower partition cut at the source's divergence point.
    `uncommitted`: transactions whose COMMIT marker the cut removed, as
    (producer id, first offset): their records below the cut, read as
    committed until now, are not committed here any more (the new source's
    marker decides), so they are lost from `first offset` on, not from the
    cut (`rep.cut_replica`)."""

    topic: str
    partition: int
    offset: int
    uncommitted: tuple[tuple[int, int], ...] = ()

    def describe(self, link_name: str) -> str:
        """The warning an operator reads."""
        said = (
            f"link {link_name!r}: {self.topic}-{self.partition} diverged from its source, "
            f"truncated to {self.offset}"
        )
        if self.uncommitted:
            said += (
                f"; the cut removed the COMMIT marker of {len(self.uncommitted)} "
                "transaction(s) begun below it, whose records are not committed here any "
                "more: "
                + ", ".join(
                    f"producer {pid} from offset {first}" for pid, first in self.uncommitted
                )
            )
        return said


@dataclass(frozen=True, slots=True)
class AppliedFetch:
    """What the follower does with an answer: effects to carry out in order
    (appends, truncations, journal records), then, once they are durable,
    `finish_fetch_round` with `progress`."""

    effects: list[Effect]
    progress: list[FollowerProgress]
    truncations: list[Truncation]
    # Follower partitions the source refused: (local topic, partition, why).
    refused: list[tuple[str, int, ClusterError]] = field(default_factory=list)
    # Gaps found: recorded and skipped (gap.policy continue), or where their
    # partition stopped (gap.policy stop; also in `refused`).
    gaps: list[Gap] = field(default_factory=list)
    stopped: list[Gap] = field(default_factory=list)
    # Partitions held uncut over their own writes this answer (also in
    # `refused`): (local topic, partition, where the source said to cut).
    held: list[tuple[str, int, int]] = field(default_factory=list)
    # A fetch session's quiet partitions (`FetchAnswer.unchanged`), each
    # as the last round left it; `finish_fetch_round` reaches those still
    # followed after `progress`.
    unchanged: QuietRound | list[tuple[str, int, int]] = field(default_factory=list)



# Refusals of the records a fetch carried (`rep.append_replica`).
_REFUSED_BATCH = frozenset(
    {ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD, ErrorCode.RECORD_TOO_LARGE}
)


def apply_replica_fetch(
    state: ClusterState,
    link_name: str,
    answer: FetchAnswer,
    local_of: dict[tuple[str, int], str],
    now_ms: int,
) -> AppliedFetch:
    """Follower side: truncates diverged partitions and appends the fetched
    batches byte for byte. The answer counts as contact. Partitions whose
    topic is gone, or that the source refused, are skipped (a refusal is
    reported in `refused`)."""
    state.links.on_contact(link_name, now_ms)
    config = state.links.configs.get(link_name)
    effects: list[Effect] = []
    progress: list[FollowerProgress] = []
    truncations: list[Truncation] = []
    refused: list[tuple[str, int, ClusterError]] = []
    gaps: list[Gap] = []
    stopped: list[Gap] = []
    held_at: list[tuple[str, int, int]] = []
    followed: dict[str, bool] = {}  # per local topic: still followed on the link
    for fetched in answer.partitions:
        local = local_of.get((fetched.source_topic, fetched.partition))
        if local is None or local not in state.topics:
            continue
        if local not in followed:
            followed[local] = (
                config is not None and config.mapping_for(local, "follower") is not None
            )
        if config is None or not followed[local]:
            continue  # no longer followed (the roles changed since the request left)
        if (
            fetched.continues_from is not None
            and fetched.continues_from != state.partition(local, fetched.partition).log_end_offset
        ):
            continue  # read ahead for a log this one is not (an earlier push was dropped)
        runtime = state.links.runtime[link_name]
        wanted, spans = runtime.marks_wanted, runtime.marks_spans
        key = (local, fetched.partition)
        if fetched.marks_wanted:
            wanted.add(key)
            if 0 <= fetched.marks_from < fetched.marks_to:
                spans[key] = (fetched.marks_from, fetched.marks_to)
            else:
                spans.pop(key, None)
            continue
        wanted.discard(key)
        spans.pop(key, None)
        if fetched.error is not None:
            runtime = state.links.runtime[link_name]
            key = (local, fetched.partition)
            if fetched.held and key not in runtime.own_writes_held and not state.faults.undid(44):
                continue  # asked while held; a recover cut it since: the next round asks again
            # A partition held uncut keeps the follower's own words for it.
            mine = runtime.refused.get(key) if key in runtime.own_writes_held else None
            refused.append((local, fetched.partition, mine or fetched.error))
            continue
        if fetched.diverging_end_offset >= 0:
            held = own_writes_refusal(state, link_name, local, fetched)
            if held is not None:
                refused.append((local, fetched.partition, held))
                held_at.append((local, fetched.partition, fetched.diverging_end_offset))
                continue
            replica_cut = rep.cut_replica(
                state, local, fetched.partition, fetched.diverging_end_offset, config,
                now_ms=now_ms,
            )  # fmt: skip
            effects += replica_cut.effects
            cut = state.partition(local, fetched.partition)
            # Cut where the source says the logs part (or to its start), never above.
            assert cut.log_end_offset <= max(fetched.diverging_end_offset, cut.log_start_offset), (
                f"link {link_name!r} partition {cut.name}: log end {cut.log_end_offset} after a "
                f"cut at {fetched.diverging_end_offset}"
            )
            truncations.append(
                Truncation(
                    local,
                    fetched.partition,
                    fetched.diverging_end_offset,
                    replica_cut.uncommitted,
                )
            )
            # Still reached: its row and lag stay (from the cut on).
            progress.append(FollowerProgress(local, fetched.partition, fetched.high_watermark))
            continue
        gap = rep.find_gap(
            state,
            local,
            fetched.partition,
            fetched.records,
            fetched.log_start_offset,
            fetched.high_watermark,
            fetched.log_start_cause,
            now_ms,
        )
        if gap is not None:
            if decide_gap(state, link_name, config, gap) is GapPolicy.STOP:
                stopped.append(gap)
                refused.append((local, fetched.partition, gap_refusal(link_name, gap)))
                continue
            effects += rep.skip_gap(state, gap, config)
            gaps.append(gap)
        if fetched.records or fetched.log_start_offset > 0:
            try:
                effects += rep.append_replica(
                    state,
                    local,
                    fetched.partition,
                    fetched.records,
                    fetched.log_start_offset,
                    config,
                    now_ms,
                )
            except ClusterError as exc:
                if exc.code in _REFUSED_BATCH:
                    # Records no producer could have written: not stored, and
                    # the partition is not followed until a later answer is
                    # good (warned of, and it keeps the link from FOLLOWING).
                    refused.append((local, fetched.partition, exc))
                    continue
                if exc.code is not ErrorCode.DIVERGED_LOG:
                    raise
                # Answers an older request: the next one asks again; the
                # source's HW it carries is still news.

        progress.append(FollowerProgress(local, fetched.partition, fetched.high_watermark))
    # No news since the source's last answer for these: reached, at the
    # source HW that answer carried (and already capped at).
    unchanged: QuietRound | list[tuple[str, int, int]] = []
    if answer.unchanged is not NO_QUIET:
        unchanged = QuietRound(answer.unchanged, local_of)
    if not state.faults.undid(18):
        # The HW follows what is appended once it is durable, even if this
        # round never finishes (`rep.cap_at_source_high_watermarks`).
        rep.cap_at_source_high_watermarks(
            state, link_name, [(p.topic, p.partition, p.source_high_watermark) for p in progress]
        )
    return AppliedFetch(
        effects, progress, truncations, refused, gaps, stopped, held_at, unchanged
    )


def held_refusal(state: ClusterState, config: LinkConfig, part: PartitionFetch) -> ClusterError:
    """Source side: why a partition its follower holds uncut is not copied."""
    return ClusterError(
        ErrorCode.DIVERGED_LOG,
        f"{part.source_topic}-{part.partition}",
        f"{config.remote_cluster_id!r} does not cut its copy of {part.source_topic}-"
        f"{part.partition} where it parts from this log: that would remove acknowledged "
        f"records its own clients wrote; nothing is copied until `ccr-admin recover --link "
        f"{config.name}` on {config.remote_cluster_id!r} cuts them (confirmed)",
    )


def own_writes_refusal(
    state: ClusterState, link_name: str, topic: str, fetched: FetchedPartition
) -> ClusterError | None:
    """Follower side, told to cut `topic` at `fetched.diverging_end_offset`:
    the refusal when the cut would remove acknowledged records this
    cluster's own clients wrote (`histories.own_acknowledged`; an attach
    that could compare first refuses itself: `recovery.check_attach_cuts`).
    Such a partition is held (`LinkRuntime.own_writes_held`): not cut, and
    fetched as held (the source copies nothing and reports why) until
    `recover` cuts it. None: the cut may go ahead."""
    if state.faults.undid(15):
        return None
    partition, cut = fetched.partition, fetched.diverging_end_offset
    side = histories.local_side(state, topic, partition)
    own = histories.own_acknowledged(side, cut)
    log = state.partition(topic, partition)
    reopened = [
        t
        for t in histories.reopened_by_cut(log, side, cut)
        if t.decided_for_source and not state.faults.undid(42)
    ]
    if not own and not reopened:
        return None
    state.links.runtime[link_name].own_writes_held[(topic, partition)] = side.log_end_offset
    config = state.links.get(link_name)
    return ClusterError(
        ErrorCode.DIVERGED_LOG,
        f"{topic}-{partition}",
        f"its source {config.remote_cluster_id!r} says to cut it to {cut}, which would "
        + "; and ".join(_what_a_cut_undoes(state.cluster_id, own, reopened))
        + f"; not cut and not followed: `ccr-admin recover --link {link_name}` on "
        f"{state.cluster_id!r} reports the cut and, with --confirm, makes it",
    )


def _what_a_cut_undoes(
    cluster_id: str,
    own: tuple[tuple[int, int], ...],
    reopened: list[histories.ReopenedTxn],
) -> list[str]:
    """The parts of a held cut's refusal: the follower's own acknowledged
    records it would remove, and the transactions it decided itself (a
    detach's abort) that the cut would reopen for its source to decide again
    (a read_committed reader that passed them aborted would miss them)."""
    parts: list[str] = []
    if own:
        ranges = ", ".join(f"[{low}, {high})" for low, high in own)
        records = sum(high - low for low, high in own)
        parts.append(
            f"remove {records} acknowledged records clients of {cluster_id!r} wrote "
            f"(offsets {ranges})"
        )
    if reopened:
        parts.append(
            f"reopen {len(reopened)} transaction(s) {cluster_id!r} decided itself, whose outcome "
            "its readers have seen: " + ", ".join(t.describe() for t in reopened)
        )
    return parts


def decide_gap(state: ClusterState, link_name: str, config: LinkConfig, gap: Gap) -> GapPolicy:
    """The link's gap.policy for `gap`: under STOP the partition is stopped
    (left out of fetches until `resume_partition`); under CONTINUE the caller
    skips it (`rep.skip_gap`)."""
    policy = config.gap_policy
    if policy is GapPolicy.STOP:
        state.links.runtime[link_name].gap_stopped[(gap.topic, gap.partition)] = gap
    return policy


def gap_refusal(link_name: str, gap: Gap) -> ClusterError:
    """How a partition stopped at a gap is shown (describe-link's problem)."""
    return ClusterError(
        ErrorCode.OFFSET_OUT_OF_RANGE,
        f"{gap.topic}-{gap.partition}",
        f"stopped at a gap (gap.policy stop): offsets [{gap.from_offset}, {gap.to_offset}) "
        f"are gone from the source ({gap.reason}); ccr-admin resume-partition {link_name} "
        f"{gap.topic} {gap.partition} goes on from {gap.to_offset}",
    )


def gap_note(link_name: str, gap: Gap, stopped: bool) -> Note:
    """The warning a gap is logged with: link, partition and range."""
    then = (
        "the partition stopped (gap.policy stop) until resumed"
        if stopped
        else f"the follower goes on from {gap.to_offset}"
    )
    return Note(
        "warning",
        f"link {link_name!r}: {gap.topic}-{gap.partition} has a gap: offsets "
        f"[{gap.from_offset}, {gap.to_offset}) ({gap.records} records) were never copied: "
        f"{gap.reason}; {then}",
    )


def resume_partition(
    state: ClusterState, link_name: str, topic: str, partition: int
) -> tuple[Gap, list[Effect]]:
    """The operator lets a partition stopped at a gap go on: the gap is
    recorded and skipped as under gap.policy continue, and the partition is
    fetched again (from the gap's end; should the source's log start have
    moved further meanwhile, the next round finds that new gap). Raises
    ClusterError (nothing changed) if the partition is not stopped."""
    config = state.links.get(link_name)
    runtime = state.links.runtime[link_name]
    gap = runtime.gap_stopped.get((topic, partition))
    if gap is None:
        raise ClusterError(
            ErrorCode.INVALID_REQUEST,
            f"{topic}-{partition}",
            f"link {link_name!r}: {topic}-{partition} is not stopped at a gap"
            + (
                f" (stopped: {', '.join(f'{t}-{p}' for t, p in sorted(runtime.gap_stopped))})"
                if runtime.gap_stopped
                else ""
            ),
        )
    effects = rep.skip_gap(state, gap, config)
    del runtime.gap_stopped[(topic, partition)]
    runtime.refused.pop((topic, partition), None)
    return gap, effects


def apply_fetched(
    state: ClusterState,
    link_name: str,
    answer: FetchAnswer,
    local_of: dict[tuple[str, int], str],
    sent_ms: int | None = None,
) -> Generator[Request, object, bool]:
    """Follower side, one answer (pulled, or carried by a push): truncations
    and appends (`apply_replica_fetch`), warned of; once durable, the end of
    the round (`finish_fetch_round`). A partition the source refused is
    warned of when it is first refused (or for a new reason): it keeps the
    link from FOLLOWING until it is followed again. A partition whose
    appends this cluster's storage refused (`storage_refusals`) is held the
    same way, its row saying so, until a round stores its records. Returns
    whether everything was stored (the caller backs off if not)."""
    now = yield from clock()
    applied = apply_replica_fetch(state, link_name, answer, local_of, now)
    for cut in applied.truncations:
        yield Note("warning", cut.describe(link_name))
    runtime = state.links.runtime.get(link_name)
    known = runtime.refused if runtime is not None else {}
    for gap in applied.gaps:
        yield gap_note(link_name, gap, False)
    for gap in applied.stopped:
        yield gap_note(link_name, gap, True)
    for topic, partition, error in applied.refused:
        before = known.get((topic, partition))
        if before is None or before.message != error.message:
            yield Note(
                "warning",
                f"link {link_name!r}: {topic}-{partition} is not followed: {error.message}",
            )
    done = yield from execute_refusable(tuple(applied.effects), "replica")
    refused = list(applied.refused)
    if isinstance(done, NotStored) and state.faults.undid(13):
        # The old data path: the round counts what it heard, not what was stored.
        finish_fetch_round(
            state, link_name, applied.progress, answer.sync_state, done.now_ms, sent_ms,
            applied.refused, applied.unchanged,
        )
        heard = [(p.topic, p.partition, p.source_high_watermark) for p in applied.progress]
        quiet = applied.unchanged
        if isinstance(quiet, QuietRound):
            quiet = quiet.followed(state, state.links.configs.get(link_name))
        for topic, partition, hw in heard + quiet:
            if topic in state.topics and link_name in state.links.configs:
                state.links.on_progress(
                    link_name, topic, partition, "follower", hw, hw, done.now_ms
                )
        return False
    if isinstance(done, NotStored):
        now = done.now_ms
        storage = storage_refusals(state, applied, done.error)
        for topic, partition, error in storage:
            before = known.get((topic, partition))
            if before is None or before.code is not ErrorCode.STORAGE_REFUSED:
                yield Note("info", f"link {link_name!r}: {error.message}")
        refused += storage
    else:
        now = done
        count_replicated(state, link_name, applied)
    wake = finish_fetch_round(
        state, link_name, applied.progress, answer.sync_state, now, sent_ms, refused,
        applied.unchanged,
    )
    if wake is not None:
        yield WakeWaiters(wake.partitions)
    orphaned = {(t, p) for t, p, e in applied.refused if orphans(e) and t in state.topics}
    if orphaned and link_name in state.links.configs:
        settled = settle_orphans(state, state.links.configs[link_name], orphaned, now)
        for cut in settled.cuts:
            yield Note(
                "warning",
                f"link {link_name!r}: {cut.topic}-{cut.partition} lost its source; cut to "
                f"{cut.offset}, above which the source had acknowledged nothing",
            )
        if settled.dangling:
            yield Note(
                "warning",
                f"link {link_name!r}: aborted {len(settled.dangling)} transactions replicated "
                f"into partitions whose source is gone: "
                + ", ".join(sorted({f"{d.topic}-{d.partition}" for d in settled.dangling})),
            )
        if settled.effects:
            yield Execute(tuple(settled.effects), "replica")
        runtime = state.links.runtime.get(link_name)
        if runtime is not None:
            runtime.counters.cuts += len(settled.cuts)
    if applied.held and link_name in state.links.configs and not state.faults.undid(30):
        dangling, aborts = settle_held(state, link_name, applied.held, now)
        if dangling:
            yield Note(
                "warning",
                f"link {link_name!r}: aborted {len(dangling)} transactions replicated above "
                "where partitions held uncut part from their source (the source no longer "
                "holds them; a recover cuts them): "
                + ", ".join(
                    f"{d.topic}-{d.partition} producer {d.producer_id} from offset "
                    f"{d.first_offset}"
                    for d in dangling
                ),
            )
        if aborts:
            yield Execute(tuple(aborts), "replica")
    return not isinstance(done, NotStored)


def settle_held(
    state: ClusterState, link_name: str, held: list[tuple[str, int, int]], now_ms: int
) -> tuple[list[DanglingTxn], list[Effect]]:
    """Follower side: partitions held uncut over their own writes
    (`own_writes_refusal`) keep, above where the source said to cut, records
    the source's log no longer holds. A transaction replicated there that no
    coordinator here owns will never hear its outcome (the source cannot
    send it, and the partition is not followed until a recover cuts it), so
    this cluster aborts it (else read_committed readers stall at it, here and
    on every cluster copying from here: invariant 11). A transaction that
    began below the cut is left alone: the source may still send its outcome
    once a recover lets the partition follow. The partition stays held at
    its new log end."""
    above = {(t, p): cut for t, p, cut in held if t in state.topics}
    dangling, effects = state.abort_dangling_transactions(
        sorted({t for t, _p in above}), now_ms, set(above), above
    )
    runtime = state.links.runtime.get(link_name)
    marked = {(d.topic, d.partition) for d in dangling}
    for t, p in above:
        log = state.partition(t, p)
        if (t, p) in marked and log.hw_cap is not None and log.hw_cap < log.log_end_offset:
            log.hw_cap = log.log_end_offset  # its own markers: they count once durable
        if runtime is not None and (t, p) in runtime.own_writes_held:
            runtime.own_writes_held[(t, p)] = log.log_end_offset
    return dangling, effects


def storage_refusals(
    state: ClusterState, applied: AppliedFetch, error: ClusterError
) -> list[tuple[str, int, ClusterError]]:
    """The follower partitions of a round whose appends this cluster's
    storage refused (every partition the round appended to that now holds
    less than the round brought: the shell cut each back to what is stored),
    each with a STORAGE_REFUSED refusal naming what it holds."""
    names = {t.topic_id: name for name, t in state.topics.items()}
    wanted: dict[tuple[str, int], int] = {}
    for effect in applied.effects:
        if isinstance(effect, AppendBatch) and effect.topic_id in names:
            key = (names[effect.topic_id], effect.partition)
            wanted[key] = max(wanted.get(key, 0), effect.header.next_offset)
    out: list[tuple[str, int, ClusterError]] = []
    for (topic, partition), end in sorted(wanted.items()):
        held = state.partition(topic, partition).log_end_offset
        if held >= end:
            continue  # stored before the refusal
        out.append(
            (
                topic,
                partition,
                ClusterError(
                    ErrorCode.STORAGE_REFUSED,
                    f"{topic}-{partition}",
                    f"{topic}-{partition}: disk refused writes: this cluster's storage "
                    f"refused the fetched records from offset {held} ({error.message}); "
                    "it holds those below, and copies on once writes succeed",
                ),
            )
        )
    return out


def count_replicated(state: ClusterState, link_name: str, applied: AppliedFetch) -> None:
    """Once an answer's appends and truncations are durable: adds them to the
    link's counters (`LinkCounters`). A link deleted meanwhile counts nothing."""
    runtime = state.links.runtime.get(link_name)
    if runtime is None:
        return
    counters = runtime.counters
    for effect in applied.effects:
        if isinstance(effect, AppendBatch):
            counters.records += effect.header.record_count
            counters.bytes += len(effect.batch)
    counters.truncations += len(applied.truncations)


@dataclass(frozen=True, slots=True)
class SettledOrphans:
    """What `settle_orphans` did: the unacknowledged tails it cut, the
    transactions it aborted, and the effects to carry out."""

    cuts: list[Truncation]
    dangling: list[DanglingTxn]
    effects: list[Effect]


def settle_orphans(
    state: ClusterState, config: LinkConfig, orphaned: set[tuple[str, int]], now_ms: int
) -> SettledOrphans:
    """Follower side: partitions whose source is gone for good (its topic, or
    that partition, deleted there) will never learn how the transactions
    replicated into them ended, nor see their records above the source's last
    HW acknowledged. So this cluster speaks for them: it cuts what lies above
    that HW (never acknowledged, never visible), aborts the transactions left
    open (else read_committed readers stall at them for ever, here and on
    every cluster copying from here: invariant 11), and lets its own markers
    count once durable. If the source later creates a topic of that name, the
    marks of the next fetch tell the logs apart and the cut is reported."""
    effects: list[Effect] = []
    cuts: list[Truncation] = []
    for topic, p in sorted(orphaned):
        log = state.partition(topic, p)
        if log.hw_cap is not None and log.log_end_offset > log.hw_cap:
            cut = rep.cut_replica(state, topic, p, log.hw_cap, config, "source gone", now_ms=now_ms)
            if cut.effects:
                effects += cut.effects
                cuts.append(Truncation(topic, p, log.log_end_offset, cut.uncommitted))
    dangling, aborts = state.abort_dangling_transactions(
        sorted({t for t, _p in orphaned}), now_ms, orphaned
    )
    effects += aborts
    for topic, p in sorted(orphaned):
        log = state.partition(topic, p)
        if log.hw_cap is not None and log.hw_cap < log.log_end_offset:
            log.hw_cap = log.log_end_offset  # its own markers: they count once durable
    return SettledOrphans(cuts, dangling, effects)


def finish_fetch_round(
    state: ClusterState,
    link_name: str,
    progress: list[FollowerProgress],
    sync_state: str,
    now_ms: int,
    sent_ms: int | None = None,
    refused: Sequence[tuple[str, int, ClusterError]] = (),
    unchanged: Sequence[tuple[str, int, int]] | QuietRound = (),
) -> Wake | None:
    """Follower side, once the round's appends are durable: adopts the
    source's SYNC verdict, lets each follower HW reach its source's HW
    (`follow_source_high_watermarks`), records every partition's lag, ends
    the round, and forgets follower partitions the round no longer reached.
    Returns whom to wake when a high watermark moved (a transaction's
    markers may move partitions beyond the round's: then everyone). A link
    deleted meanwhile changes nothing. `sent_ms`: when the round's request
    left (a pull passes it: another request may have left since).
    `refused`: partitions the source refused this round; each keeps the
    link from FOLLOWING until a round reaches it again. `unchanged`: a
    fetch session's quiet partitions (`AppliedFetch.unchanged`), reached
    after `progress`: each as the last round left it, unless its row or log
    says otherwise (then as any other)."""
    links = state.links
    if link_name not in links.runtime:
        return None
    anywhere = bool(state.marker_groups)
    # The appends took time: a partition the link stopped following
    # meanwhile (a detach, a reversal) is no longer its to report or cap.
    following = links.configs.get(link_name)
    followed: dict[str, bool] = {}
    for p in progress:
        if p.topic not in followed:
            followed[p.topic] = (
                p.topic in state.topics
                and following is not None
                and following.mapping_for(p.topic, "follower") is not None
            )
    runtime = links.runtime[link_name]
    reached = [p for p in progress if followed[p.topic]]
    quiet = still_quiet(state, runtime, following, unchanged, reached)
    # An ASYNC link's source has no verdict to adopt: its state is judged
    # once, with the round's rows (below). A SYNC verdict is adopted first:
    # the HWs follow it.
    judged_once = following is not None and following.mode == LinkMode.ASYNC and not sync_state
    if not judged_once:
        links.on_remote_sync_state(link_name, sync_state, now_ms)
    before = {
        (p.topic, p.partition): state.partition(p.topic, p.partition).high_watermark
        for p in reached
    }
    moved = rep.follow_source_high_watermarks(
        state, link_name, [(p.topic, p.partition, p.source_high_watermark) for p in reached]
    )
    # Paired with `before`: a follower's HW moves only as far as the source's
    # HW this round told it (it may stay above, where it was: it never goes back).
    for p in reached:
        hw = state.partition(p.topic, p.partition).high_watermark
        was = before[(p.topic, p.partition)]
        assert hw == was or hw <= p.source_high_watermark, (
            f"link {link_name!r} partition {p.topic}-{p.partition}: HW {was} -> {hw}, past "
            f"the source's HW {p.source_high_watermark}"
        )
    keep: set[tuple[str, int, str]] = set()
    # The round's request left at `sent_ms` (else: the last request made,
    # which a push answers); its source HWs are known from then on.
    if sent_ms is None:
        sent_ms = runtime.fetch_sent_ms
    known_at = sent_ms if sent_ms is not None else now_ms
    with links.deferred():
        if judged_once:
            links.on_remote_sync_state(link_name, sync_state, now_ms)
        refusals = runtime.refused
        write_quiet(quiet, known_at, now_ms)
        if refusals:
            for topic, partition in [*refusals]:
                if quiet.holds((topic, partition, "follower")):
                    del refusals[(topic, partition)]
        for p in reached:
            # Its position is what a consumer here can read, not its log end.
            position = admin.readable_position(state.partition(p.topic, p.partition), state.faults)
            links.on_progress(
                link_name,
                p.topic,
                p.partition,
                "follower",
                position,
                p.source_high_watermark,
                now_ms,
                known_at,
            )
            keep.add((p.topic, p.partition, "follower"))
            runtime.refused.pop((p.topic, p.partition), None)
        for topic, partition, error in refused:
            runtime.refused[(topic, partition)] = error
        config = links.configs.get(link_name)
        runtime.refused = {
            (t, p): why
            for (t, p), why in runtime.refused.items()
            if t in state.topics and config is not None and config.mapping_for(t, "follower")
        }
        runtime.marks_wanted = {
            (t, p)
            for t, p in runtime.marks_wanted
            if t in state.topics and config is not None and config.mapping_for(t, "follower")
        }
        runtime.marks_spans = {
            k: span for k, span in runtime.marks_spans.items() if k in runtime.marks_wanted
        }
        links.on_fetch_round(link_name, now_ms, known_at)
        _forget_unreached(state, link_name, quiet, keep)
    if not moved:
        return None
    return Wake(None if anywhere else tuple((p.topic, p.partition) for p in reached))


def _forget_unreached(
    state: ClusterState, link_name: str, quiet: StillQuiet, reached: set[tuple[str, int, str]]
) -> None:
    """`finish_fetch_round`: forgets the follower rows the round neither
    reached nor found quiet (taken by difference: of those that may be
    gone, `StillQuiet.maybe_gone`; any other the last round kept is kept)."""
    links = state.links
    if quiet.by_difference:
        gone = [k for k in quiet.maybe_gone if k not in reached and not quiet.holds(k)]
        links.forget_rows(link_name, gone)
    else:
        keep = reached | set(quiet.keys())
        keep |= {k for k in links.runtime[link_name].rows if k[2] == Role.LEADER}
        links.forget_partitions(link_name, keep)
    track = quiet.track
    if track is not None:
        track.reached = list(reached)
        track.written = set()


# -- push: the leader dials (the follower may sit behind NAT) ------------------------------


@dataclass(frozen=True, slots=True)
class Push:
    """What a pushing leader sends: its namespaces and group offsets (each
    discovery interval, else empty), and the answer to the follower's last
    fetch request (None before the first)."""

    link_id: str
    namespaces: tuple[SourceNamespace, ...] = ()
    group_offsets: tuple[msync.GroupOffset, ...] = ()
    data: FetchAnswer | None = None
    # When the follower made the request `data` answers (its clock; None:
    # not said, or a read-ahead push, which answers no request of its own).
    request_sent_ms: int | None = None
    # When the source read the high watermarks `data` carries (the source's
    # clock: `FetchAnswer.served_at_ms`): they are known as of then, not as
    # of the push's arrival (several pushes may be in flight on a slow link,
    # each with the HWs of when it left). None: not said.
    source_hw_at_ms: int | None = None


def pushed_hw_known_at(state: ClusterState, link_name: str, push: Push, now_ms: int) -> int:
    """Follower side: as of when the source high watermarks a push carries
    are known. The source says when it read them (`source_hw_at_ms`, its
    clock: skew between the clusters shifts it; never later than the push's
    arrival here). Without it: when the follower sent the request the push
    answers, or, for a read-ahead push, the one its pipeline continues (the
    source read its HWs after that request arrived). Never the arrival:
    records the source acknowledged between reading its HWs and the push
    arriving would be neither in the lag nor after the time it reports."""
    runtime = state.links.runtime[link_name]
    if push.request_sent_ms is not None:
        runtime.push_request_sent_ms = push.request_sent_ms
    if push.source_hw_at_ms is not None:
        return min(push.source_hw_at_ms, now_ms)
    if runtime.push_request_sent_ms is not None:
        return min(runtime.push_request_sent_ms, now_ms)
    return min(runtime.fetch_sent_ms, now_ms) if runtime.fetch_sent_ms is not None else now_ms


def push_discovery(
    state: ClusterState, config: LinkConfig
) -> tuple[tuple[SourceNamespace, ...], tuple[msync.GroupOffset, ...]]:
    """Leader side: what a push carries each discovery interval."""
    offsets: list[msync.GroupOffset] = []
    for mapping in rep.leader_mappings(config, "group"):
        offsets += source_group_offsets(state, mapping.local_prefix)
    return tuple(source_namespaces(state, config)), tuple(offsets)


def accept_push(
    state: ClusterState, push: Push, now_ms: int, new_topic_id: Callable[[], str]
) -> Generator[Request, object, FetchRequest]:
    """Follower side of a push, the same steps a pulling follower takes: the
    source's topics (`plan_topics`), the fetched data (`apply_replica_fetch`,
    durable, then `finish_fetch_round`), the group offsets; returns the next
    fetch request, which the answer carries back. A push is contact."""
    config = state.links.by_id(push.link_id)
    name = config.name
    if push.namespaces:
        listed = state.links.runtime[name].fetch_sent_ms  # the push answers that request
        plan = plan_topics(state, config, list(push.namespaces), new_topic_id, listed)
        yield from carry_out_topics(state, name, plan)
    if push.data is not None:
        local_of = follower_fetch_request(state, config).local_of
        known_at = pushed_hw_known_at(state, name, push, (yield from clock()))
        yield from apply_fetched(state, name, push.data, local_of, known_at)
    if push.group_offsets:
        now = yield from clock()
        effects, _held = msync.apply_replicated_offsets(
            state, name, list(push.group_offsets), now, new_topic_id()
        )
        if effects:
            yield Execute(tuple(effects), "offsets")
    else:
        state.links.on_contact(name, (yield from clock()))
    nxt = follower_fetch_request(state, config, sent_ms=(yield from clock()))
    if not nxt.partitions and state.links.runtime[name].topics_known_at_ms is not None:
        # Told the source's topics, and none to follow: nothing lags.
        state.links.on_fetch_round(name, (yield from clock()))
    return nxt
