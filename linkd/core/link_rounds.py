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

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from linkd.core import replication as rep
from linkd.core.cluster import ClusterState
from linkd.core.effects import Effect, Journal
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.links import LinkConfig, Mapping
from linkd.core.namespaces import ResourceType

# (topic id, partition, from offset, to offset, max bytes) -> (the bytes of the
# batches overlapping [from, to), the size they count against the byte budget).
# The size is their length unless the shell models other sizes (the simulator
# does: its records stand for larger ones).
ReplicaReader = Callable[[str, int, int, int, int], tuple[bytes, int]]


# -- handshake ------------------------------------------------------------------------


def accept_handshake(
    state: ClusterState,
    theirs: LinkConfig,
    create: bool,
    now_ms: int,
    required_credentials: str = "",
) -> list[dict[str, Any]]:
    """The dialed side: checks a remote's configuration (its credentials, its
    link id, and that every namespace it newly makes this side follow follows
    no other link), merges it, and counts the call as contact. Returns journal
    records. Raises ClusterError (nothing changed) on refusal."""
    cluster_id = state.links.cluster_id
    if required_credentials and theirs.value("credentials") != required_credentials:
        raise ClusterError(
            ErrorCode.LINK_AUTHENTICATION_FAILED,
            f"link {theirs.name!r}",
            f"cluster {cluster_id!r} refuses link {theirs.name!r} from cluster "
            f"{theirs.local_cluster_id!r}: its credentials do not match",
        )
    existing = state.links.configs.get(theirs.name)
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
    # Refuse a new follower mapping this side cannot honour, before storing.
    mirrored = theirs.mirrored()
    for key, mapping in mirrored.mappings.items():
        old = existing.mappings.get(key) if existing is not None else None
        if (
            mapping.attached
            and mapping.local_role == "follower"
            and (old is None or not old.attached)
        ):
            check_can_follow(state, theirs.name, mapping)
    records = rep.accept_remote_config(state, theirs, now_ms)
    state.links.on_contact(theirs.name, now_ms)
    return records


def check_can_follow(state: ClusterState, link_name: str, mapping: Mapping) -> None:
    """A namespace (or one overlapping it) follows at most one link."""

    kind = ResourceType.parse(mapping.resource_type)
    ns = state.namespaces.find(kind, mapping.local_prefix)
    if ns is None:
        return  # created (reserved) by the reconciliation
    for candidate in [ns, *state.namespaces.overlapping(ns)]:
        following = candidate.follower_link
        if following is not None and following != link_name:
            raise ClusterError(
                ErrorCode.ALREADY_FOLLOWING,
                ns.name,
                f"on cluster {state.links.cluster_id!r}, {ns.name} cannot follow link "
                f"{link_name!r}: {candidate.name} already follows link {following!r}",
            )


def accept_handshake_answer(
    state: ClusterState, link_name: str, answer: LinkConfig, now_ms: int
) -> list[dict[str, Any]]:
    """The dialing side: merges the remote's answer; the answer is contact."""
    records = rep.accept_remote_config(state, answer, now_ms)
    state.links.on_contact(link_name, now_ms)
    return records


def set_link_mode(
    state: ClusterState, link_name: str, mode: str, now_ms: int
) -> tuple[list[dict[str, Any]], bool]:
    """The operator's set-mode on this side: the led partitions are registered
    before (the core judges FOLLOWING on them) and after the change, and the
    high watermarks re-applied (going ASYNC lifts the followers' hold at once).
    Returns (journal records, whether a high watermark moved); no records when
    the mode is already set. Raises ClusterError (LINK_NOT_FOLLOWING, an
    unknown mode) with nothing changed."""
    state.refresh_sync_links(now_ms)
    records = state.links.set_mode(link_name, mode, now_ms)
    if not records:
        return [], False
    state.refresh_sync_links(now_ms)
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
    read_acls: tuple[rep.ReadAcl, ...]


def source_topics(state: ClusterState, config: LinkConfig, prefix: str) -> SourceNamespace:
    """Source side (ListSourceTopics): the topics under `prefix` that this side
    leads on the link, and the namespace's READ ACLs."""
    topics = tuple(
        SourceTopic(name, len(t.partitions), dict(t.overrides))
        for name, t in sorted(state.topics.items())
        if rep.in_prefix(name, prefix) and rep.leader_mapping_for(config, name) is not None
    )
    return SourceNamespace(prefix, topics, tuple(rep.source_read_acls(state, prefix)))


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
        acls = tuple(rep.source_read_acls(state, mapping.local_prefix))
        out.append(SourceNamespace(mapping.local_prefix, topics, acls))
    return out


def source_group_offsets(state: ClusterState, prefix: str) -> list[rep.GroupOffset]:
    """Source side: the committed offsets of every group in a namespace."""
    out: list[rep.GroupOffset] = []
    for group_id, _state, _type in sorted(state.groups.list_groups()):
        if not rep.in_prefix(group_id, prefix):
            continue
        for (topic, partition), c in sorted(state.groups.committed(group_id, None).items()):
            out.append((group_id, topic, partition, c.offset, c.metadata, c.leader_epoch))
    return out


@dataclass(frozen=True, slots=True)
class TopicsPlan:
    """What discovery changes on the follower: effects to carry out in order
    (journal records included) and the follower topics it created, as
    (local name, source name)."""

    effects: list[Effect]
    created: list[tuple[str, str]]


def plan_topics(
    state: ClusterState,
    config: LinkConfig,
    namespaces: list[SourceNamespace],
    new_topic_id: Callable[[], str],
) -> TopicsPlan:
    """Follower side: creates follower topics with the source's shape, follows
    partition additions and config changes, adopts the READ ACLs. Namespaces
    this side does not follow on the link are ignored. `new_topic_id` is asked
    once per topic created."""

    effects: list[Effect] = []
    created: list[tuple[str, str]] = []
    followed = {m.remote_prefix: m for m in rep.follower_mappings(config, "topic")}
    for ns in namespaces:
        mapping = followed.get(ns.prefix)
        if mapping is None:
            continue
        for source in ns.topics:
            local = rep.map_name(source.name, mapping.remote_prefix, mapping.local_prefix)
            if local not in state.topics:
                effects += rep.create_replica_topic(
                    state, local, source.partitions, dict(source.configs), new_topic_id()
                )
                created.append((local, source.name))
            else:
                effects += rep.follow_topic_shape(
                    state, local, source.partitions, dict(source.configs)
                )
    records: list[dict[str, Any]] = []
    for ns in namespaces:
        if ns.prefix in followed:
            records += rep.apply_read_acls(state, config.name, ns.prefix, list(ns.read_acls))
    if records:
        effects.append(Journal(tuple(records)))
    return TopicsPlan(effects, created)


# -- replica fetch ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionFetch:
    """The follower's position in one partition, under the source's name."""

    source_topic: str
    partition: int
    fetch_offset: int
    last_fetched_epoch: int
    max_bytes: int = 0  # 0: the source's default


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """A follower's fetch: every follower partition of the link, and the map
    from (source topic, partition) back to the local topic."""

    link_id: str
    partitions: tuple[PartitionFetch, ...]
    local_of: dict[tuple[str, int], str]


def follower_fetch_request(
    state: ClusterState, config: LinkConfig, partition_max_bytes: int = 0
) -> FetchRequest:
    """Follower side: its position in every partition of every topic it
    follows on the link (a topic belongs to its longest matching prefix)."""
    followed = rep.follower_mappings(config, "topic")
    parts: list[PartitionFetch] = []
    local_of: dict[tuple[str, int], str] = {}
    for topic in sorted(state.topics):
        mapping = max(
            (m for m in followed if rep.in_prefix(topic, m.local_prefix)),
            key=lambda m: len(m.local_prefix),
            default=None,
        )
        if mapping is None:
            continue
        source = rep.map_name(topic, mapping.local_prefix, mapping.remote_prefix)
        for p in range(len(state.topics[topic].partitions)):
            offset, epoch = rep.follower_position(state, topic, p)
            parts.append(PartitionFetch(source, p, offset, epoch, partition_max_bytes))
            local_of[(source, p)] = topic
    return FetchRequest(config.link_id, tuple(parts), local_of)


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


@dataclass(slots=True)
class FetchAnswer:
    partitions: list[FetchedPartition]
    # The source's SYNC verdict on what it leads on the link ("" when ASYNC).
    sync_state: str = ""
    total_bytes: int = 0
    # Whether a high watermark moved on the source (wake its waiters).
    hw_moved: bool = False

    @property
    def ready(self) -> bool:
        """Worth sending now rather than holding for data (long poll)."""
        return self.total_bytes > 0 or any(p.diverging_end_offset >= 0 for p in self.partitions)


def serve_replica_fetch(
    state: ClusterState,
    link_id: str,
    parts: tuple[PartitionFetch, ...] | list[PartitionFetch],
    now_ms: int,
    read: ReplicaReader,
    budget_bytes: int,
    partition_max_bytes: int,
    *,
    from_remote: bool = True,
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
    not, else a dead follower would keep the link connected."""
    config = state.links.by_id(link_id)
    links = state.links
    answer = FetchAnswer([])
    with links.deferred():
        if from_remote:
            links.on_contact(config.name, now_ms)
        for part in parts:
            entry = FetchedPartition(part.source_topic, part.partition)
            answer.partitions.append(entry)
            try:
                plan = rep.plan_replica_fetch(
                    state,
                    link_id,
                    part.source_topic,
                    part.partition,
                    part.fetch_offset,
                    part.last_fetched_epoch,
                )
            except ClusterError as exc:
                entry.error = exc
                continue
            log = state.partition(part.source_topic, part.partition)
            entry.log_end_offset = log.log_end_offset
            entry.leader_epoch = log.leader_epoch
            entry.log_start_offset = log.log_start_offset
            entry.high_watermark = log.high_watermark
            if isinstance(plan, rep.Diverged):
                entry.diverging_end_offset = plan.end_offset
                entry.diverging_epoch = plan.epoch
                continue
            links.on_leader_fetch(
                config.name,
                part.source_topic,
                part.partition,
                part.fetch_offset,
                log.log_end_offset,
                log.high_watermark,
                now_ms,
            )
            if plan.upper_offset > plan.offset and answer.total_bytes < budget_bytes:
                part_max = part.max_bytes or partition_max_bytes
                budget = max(1, min(part_max, budget_bytes - answer.total_bytes))
                topic_id = state.topic(part.source_topic).topic_id
                data, size = read(topic_id, part.partition, plan.offset, plan.upper_offset, budget)
                entry.records = data
                entry.size_bytes = size
                answer.total_bytes += size
    if config.mode == "SYNC":
        # The fetch offsets acknowledge: the high watermarks may move, and the
        # follower learns where they moved to in this very answer.
        answer.hw_moved = state.refresh_high_watermarks()
        for entry in answer.partitions:
            if entry.error is None and entry.diverging_end_offset < 0:
                entry.high_watermark = state.partition(
                    entry.source_topic, entry.partition
                ).high_watermark
    answer.sync_state = links.local_sync_state(config.name)
    return answer


@dataclass(frozen=True, slots=True)
class FollowerProgress:
    """A follower partition the round reached, with its source's HW."""

    topic: str  # local name
    partition: int
    source_high_watermark: int


@dataclass(frozen=True, slots=True)
class Truncation:
    """A follower partition cut at the source's divergence point."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class AppliedFetch:
    """What the follower does with an answer: effects to carry out in order
    (appends, truncations, journal records), then, once they are durable,
    `finish_fetch_round` with `progress`."""

    effects: list[Effect]
    progress: list[FollowerProgress]
    truncations: list[Truncation]
    refused: list[tuple[str, ClusterError]] = field(default_factory=list)


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
    refused: list[tuple[str, ClusterError]] = []
    for fetched in answer.partitions:
        local = local_of.get((fetched.source_topic, fetched.partition))
        if local is None or local not in state.topics:
            continue
        if fetched.error is not None:
            refused.append((local, fetched.error))
            continue
        if fetched.diverging_end_offset >= 0:
            effects += rep.truncate_replica(
                state, local, fetched.partition, fetched.diverging_end_offset, config
            )
            truncations.append(Truncation(local, fetched.partition, fetched.diverging_end_offset))
            continue
        if fetched.records or fetched.log_start_offset > 0:
            effects += rep.append_replica(
                state, local, fetched.partition, fetched.records, fetched.log_start_offset, config
            )
        progress.append(FollowerProgress(local, fetched.partition, fetched.high_watermark))
    return AppliedFetch(effects, progress, truncations, refused)


def finish_fetch_round(
    state: ClusterState,
    link_name: str,
    progress: list[FollowerProgress],
    sync_state: str,
    now_ms: int,
) -> bool:
    """Follower side, once the round's appends are durable: adopts the
    source's SYNC verdict, lets each follower HW reach its source's HW
    (`follow_source_high_watermarks`), records every partition's lag, ends
    the round, and forgets follower partitions the round no longer reached.
    Returns whether a high watermark moved (wake the waiters). A link deleted
    meanwhile changes nothing."""
    links = state.links
    if link_name not in links.runtime:
        return False
    reached = [p for p in progress if p.topic in state.topics]
    links.on_remote_sync_state(link_name, sync_state, now_ms)
    moved = rep.follow_source_high_watermarks(
        state, link_name, [(p.topic, p.partition, p.source_high_watermark) for p in reached]
    )
    keep: set[tuple[str, int, str]] = set()
    with links.deferred():
        for p in reached:
            leo = state.partition(p.topic, p.partition).log_end_offset
            links.on_progress(
                link_name, p.topic, p.partition, "follower", leo, p.source_high_watermark, now_ms
            )
            keep.add((p.topic, p.partition, "follower"))
        links.on_fetch_round(link_name, now_ms)
        runtime = links.runtime.get(link_name)
        if runtime is not None:
            keep |= {k for k in runtime.partitions if k[2] == "leader"}
            links.forget_partitions(link_name, keep)
    return moved
