"""Offset-preserving replication between clusters (spec section 5), both ends.

Rules:
- A follower partition holds, at every offset, the same record as its source
  partition: the follower appends the source's record batches byte for byte
  (control markers and the source's leader epoch stamps included), only at its
  own log end offset, and never accepts a batch that does not continue its log.
- A replica fetch carries the follower's position and the leader epoch of its
  last batch. The source answers "diverged" when that epoch ended earlier in
  its own history (Kafka's OffsetsForLeaderEpoch rule); the follower then
  truncates to the end offset the source names and fetches again. This is how
  a source-side unclean leader election reaches every follower.
- ASYNC followers copy up to the source high watermark.
- A follower whose log is empty and behind the source's log start (attaching a
  topic whose oldest records were deleted) restarts its log at that start.
- A follower that already holds offsets and finds the source's log start past
  its position (retention or deleted records ran while it was away) cannot
  copy the records between: that is a gap (`find_gap`). It is never filled
  with anything: the follower either records it in its provenance and starts
  its log again where the source's first batch starts (`skip_gap`), or, under
  gap.policy stop, stops the partition until the operator resumes it.
- Topic names map through the namespace prefixes: local = local_prefix + rest,
  where remote = remote_prefix + rest.
- Only the replication machinery writes into follower topics; these functions
  deliberately bypass the reservation checks that refuse clients.

Pure code: functions of ClusterState returning effects, as cluster.py does.
"""

from __future__ import annotations

from dataclasses import dataclass

from linkd.core import histories
from linkd.core import journal as jr
from linkd.core import records as rb
from linkd.core.cluster import ClusterState, refused_batch
from linkd.core.effects import CreateLogs, Effect, Journal, ResetLog, TruncateLog
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.links import (
    FetchBound,
    Leader,
    LinkConfig,
    LinkMode,
    LinkState,
    Mapping,
    MappingType,
    Role,
)
from linkd.core.links import in_prefix as in_prefix
from linkd.core.namespaces import ResourceType
from linkd.core.partition import PartitionLog
from linkd.core.provenance import Gap, ProvenanceItem, ProvenanceKind, check_history
from linkd.core.topic_config import (
    CLUSTER_LOCAL_KEYS,
    validate_configs,
    validate_partition_count,
    validate_topic_name,
)


def map_name(name: str, from_prefix: str, to_prefix: str) -> str:
    return to_prefix + name[len(from_prefix) :]




@dataclass(frozen=True, slots=True)
class ReplicaFetchPlan:
    """What the source may send: batches overlapping [offset, upper_offset)."""

    offset: int
    upper_offset: int
    high_watermark: int
    log_start_offset: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class Diverged:
    """The follower's log differs from the source's from `end_offset` on."""

    end_offset: int
    epoch: int


def epoch_end_offset(log: PartitionLog, epoch: int) -> tuple[int, int]:
    """Kafka's OffsetsForLeaderEpoch: the largest epoch <= `epoch` in the
    source's history and the offset where it ended (the LEO for the current
    epoch). (-1, -1) when the history holds nothing that old."""
    history = log.epoch_history
    best = -1
    for i, (e, _start) in enumerate(history):
        if e <= epoch:
            best = i
    if best < 0:
        return -1, -1
    e = history[best][0]
    end = history[best + 1][1] if best + 1 < len(history) else log.log_end_offset
    return e, end


def leader_mapping_for(config: LinkConfig, topic: str) -> Mapping | None:
    """The attached mapping under which this cluster leads `topic`, if any."""
    return config.mapping_for(topic, "leader")


def leads_partition(state: ClusterState, config: LinkConfig, topic: str, partition: int) -> bool:
    """Whether this cluster leads `topic`/`partition` on the link now (the
    namespace attached with this side leading, the partition there)."""
    found = state.topics.get(topic)
    return (
        leader_mapping_for(config, topic) is not None
        and found is not None
        and 0 <= partition < len(found.partitions)
    )


def plan_replica_fetch(
    state: ClusterState,
    link_id: str,
    topic: str,
    partition: int,
    fetch_offset: int,
    last_fetched_epoch: int,
) -> ReplicaFetchPlan | Diverged:
    """Source side: what a follower at `fetch_offset` may copy next."""
    config = state.links.by_id(link_id)
    if leader_mapping_for(config, topic) is None:
        raise ClusterError(
            ErrorCode.NOT_LED_ON_LINK,
            f"topic {topic!r}",
            f"link {config.name!r}: topic {topic!r} is not in a namespace this cluster leads "
            "on the link",
        )
    log = state.partition(topic, partition)
    if fetch_offset > log.log_end_offset and copying_behind(state, topic, partition):
        # This partition is itself a follower, behind its own source: the
        # follower may hold records it is about to copy too. Nothing to copy
        # yet; once it has caught up, a follower still ahead is cut here, and
        # one it passed is checked by epoch and marks as always.
        end = log.log_end_offset
        return ReplicaFetchPlan(end, end, log.high_watermark, log.log_start_offset,
                                log.leader_epoch)  # fmt: skip
    if last_fetched_epoch >= 0 and fetch_offset > log.log_start_offset:
        epoch, end = epoch_end_offset(log, last_fetched_epoch)
        if epoch < 0 or end < fetch_offset:
            return Diverged(max(end, log.log_start_offset), epoch)
    if fetch_offset > log.log_end_offset:
        return Diverged(log.log_end_offset, log.leader_epoch)
    offset = max(fetch_offset, log.log_start_offset)
    # ASYNC followers copy what the source acknowledged; SYNC followers copy to
    # the log end, and their next fetch offset is the acknowledgement the
    # source high watermark waits for (spec section 5).
    # An ASYNC link bound at the last stable offset (fetch.bound, KIP-1279's
    # mirror fetcher) copies no record of a transaction still open.
    upper = log.log_end_offset if config.mode == LinkMode.SYNC else log.high_watermark
    if config.mode != LinkMode.SYNC and config.fetch_bound is FetchBound.LAST_STABLE_OFFSET:
        upper = log.last_stable_offset
    return ReplicaFetchPlan(
        offset,
        max(upper, offset),
        log.high_watermark,
        log.log_start_offset,
        log.leader_epoch,
    )


def copying_behind(state: ClusterState, topic: str, partition: int) -> bool:
    """Whether this cluster's partition copies from a source of its own over
    a link and has not caught up with it (or has not fetched it yet): its
    link is not DISCONNECTED, and does not refuse or hold the partition."""
    for name, config in state.links.configs.items():
        if config.mapping_for(topic, "follower") is None:
            continue
        runtime = state.links.runtime.get(name)
        if (
            runtime is None
            or (topic, partition) in runtime.refused
            or state.links.state_of(name) in (None, LinkState.DISCONNECTED)
        ):
            return False
        row = runtime.rows.get((topic, partition, Role.FOLLOWER))  # (not in the fold)
        return row is None or row.lag_records() > 0
    return False


def follower_position(state: ClusterState, topic: str, partition: int) -> tuple[int, int]:
    """(fetch offset, epoch of the batch below it) the follower sends with a
    fetch. The fetch offset is how far its log is durable, never more: on a
    SYNC link it acknowledges, and an append still being written (a round
    started again meanwhile: a reconnection) must not be acknowledged; the
    batches it gets again are skipped (`append_replica`)."""
    return follower_position_of(state.partition(topic, partition))


def follower_position_of(log: PartitionLog) -> tuple[int, int]:
    """`follower_position` of a partition's log in hand."""
    start = log.log_start_offset
    durable = log.durable_offset
    end = log.log_end_offset
    offset = durable if durable > start else start
    if end < offset:
        offset = end
    below = log.batch_containing(offset - 1) if offset > start else None
    last_epoch = below.partition_leader_epoch if below is not None else -1
    return offset, last_epoch


def create_replica_topic(
    state: ClusterState,
    name: str,
    partitions: int,
    configs: dict[str, str],
    topic_id: str,
    config: LinkConfig | None = None,
) -> list[Effect]:
    """Creates a follower topic with the source's partition count and configs.
    Only the replication machinery calls this, so the client-facing checks
    (reservation) do not apply; names and configs are still validated."""

    if name in state.topics:
        return []
    validate_topic_name(name)
    validate_partition_count(name, partitions)
    overrides = validate_configs(
        name,
        {k: v for k, v in configs.items() if k not in CLUSTER_LOCAL_KEYS},
        state.topic_defaults(),
    )
    record = jr.TopicCreate(name, topic_id, partitions, overrides)
    state.apply_record(record)
    topic = state.topic(name)
    records: list[jr.JournalRecord] = [record]
    if config is not None:
        # Every offset of a follower topic comes from the link from its birth
        # on: recovery can tell it apart from another topic of the same name.
        for p in range(partitions):
            records += provenance_entry(state, name, p, config)
    return [
        CreateLogs(topic_id, tuple(range(partitions)), topic.config.segment_bytes),
        Journal(tuple(records)),
    ]


def follow_topic_shape(
    state: ClusterState, name: str, partitions: int, configs: dict[str, str]
) -> list[Effect]:
    """Follows the source's later partition additions and config changes."""

    effects: list[Effect] = []
    topic = state.topic(name)
    current_count = len(topic.partitions)
    if partitions > current_count:
        grown = jr.TopicPartitions(name, partitions)
        state.apply_record(grown)
        effects += [
            CreateLogs(
                topic.topic_id, tuple(range(current_count, partitions)), topic.config.segment_bytes
            ),
            Journal((grown,)),
        ]
    wanted = validate_configs(
        name,
        {k: v for k, v in configs.items() if k not in CLUSTER_LOCAL_KEYS},
        state.topic_defaults(),
    )
    local = {k: v for k, v in topic.overrides.items() if k in CLUSTER_LOCAL_KEYS}
    if {**wanted, **local} != topic.overrides:
        reconfigured = jr.TopicConfig(name, {**wanted, **local})
        state.apply_record(reconfigured)
        effects.append(Journal((reconfigured,)))
    return effects


def provenance_entry(
    state: ClusterState, topic_name: str, partition: int, config: LinkConfig
) -> list[jr.JournalRecord]:
    """Records where the follower partition's next offsets come from, when
    that changed (a new link, a new link epoch, or after a detach): spec §8."""
    topic = state.topic(topic_name)
    entries = topic.provenance.get(partition, [])
    last = entries[-1] if entries else None
    if (
        last is not None
        and last.kind is ProvenanceKind.START
        and last.link_id == config.link_id
        and last.link_epoch == config.link_epoch
    ):
        return []
    start = state.partition(topic_name, partition).log_end_offset
    item = ProvenanceItem.attached(
        start, config.remote_cluster_id, config.link_id, config.link_epoch
    )
    record = item.journal_record(topic_name, partition)
    state.apply_record(record)
    check_history(topic.provenance[partition], topic_name, partition, start)
    return [record]


def detach_provenance(
    state: ClusterState, config: LinkConfig, mapping: Mapping
) -> list[jr.JournalRecord]:
    """A follower topic namespace leaves the link: every partition of its
    topics records where the link's data ends (spec section 8), unless its
    history already ends that way."""
    records: list[jr.JournalRecord] = []
    if mapping.resource_type != MappingType.TOPIC or mapping.local_role != Role.FOLLOWER:
        return records
    for name in sorted(state.topics):
        if not in_prefix(name, mapping.local_prefix) or name.startswith("_"):
            continue
        topic = state.topics[name]
        for p, log in enumerate(topic.partitions):
            entries = topic.provenance.get(p, [])
            last = entries[-1] if entries else None
            if (
                last is not None
                and last.kind is ProvenanceKind.DETACHED
                and last.link_id == config.link_id
            ):
                continue
            record = ProvenanceItem.detached(log.log_end_offset, config.link_id).journal_record(
                name, p
            )
            state.apply_record(record)
            check_history(topic.provenance[p], name, p, log.log_end_offset)
            records.append(record)
    return records


def append_replica(
    state: ClusterState,
    topic_name: str,
    partition: int,
    data: bytes,
    source_log_start: int,
    config: LinkConfig | None = None,
    now_ms: int = 0,
) -> list[Effect]:
    """Follower side: appends fetched batches at the log end, byte for byte
    (and, given the link's config, notes the provenance of what it appends),
    in segments this side's topic configs roll (`ClusterState.append`)."""

    topic = state.topic(topic_name)
    log = state.partition(topic_name, partition)
    try:
        batches = list(rb.iter_batches(data))
    except rb.CorruptBatchError as exc:
        raise ClusterError(
            ErrorCode.CORRUPT_MESSAGE, log.name, f"replica fetch for {log.name}: {exc}"
        ) from exc
    if batches and log.log_end_offset <= batches[0][1].base_offset < source_log_start:
        # The source's log start lies inside its first batch (records deleted
        # there): that batch comes whole, so the log starts where it starts.
        source_log_start = batches[0][1].base_offset
    reset = not log.batches and source_log_start > log.log_end_offset
    start = source_log_start if reset else log.log_end_offset
    assert start >= log.log_start_offset, (
        f"partition {log.name}: appending from {start}, below its log start "
        f"{log.log_start_offset}"
    )
    # Every check before any change: an answer to an older request (the log
    # moved since) changes nothing.
    fresh = [(position, h) for position, h in batches if h.last_offset >= start]
    expected = start
    for _position, header in fresh:
        # A batch may start past the expected offset: the source's log cleaner
        # removed the offsets between (a compacted topic); never before it.
        if header.base_offset < expected:
            raise ClusterError(
                ErrorCode.DIVERGED_LOG,
                log.name,
                f"replica fetch for {log.name}: batch at {header.base_offset} does not continue "
                f"the follower log at {expected}",
            )
        expected = header.next_offset
    markers: dict[int, int] = {}
    for position, header in fresh:
        # A replica's checks, not a producer's: the header agrees with itself
        # (the CRC was checked by iter_batches), and a control batch holds a
        # marker; the records themselves were checked where they were produced
        # (records.check_copied_batch says why).
        try:
            rb.check_copied_batch(header)
            if header.is_control:
                markers[position] = rb.control_marker_type(data, position)
        except rb.CorruptBatchError as exc:
            raise refused_batch(exc, log.name, f"replica fetch for {log.name}") from exc
    effects: list[Effect] = []
    if config is not None and data:
        records = provenance_entry(state, topic_name, partition, config)
        if records:
            effects.append(Journal(tuple(records)))
    if reset:
        # Attaching a topic whose oldest records are gone: start where it starts.
        log = PartitionLog(topic_name, partition, log_start_offset=source_log_start)
        topic.partitions[partition] = log
        state.logs_replaced()
        effects.append(ResetLog(topic.topic_id, partition, source_log_start))
        effects.append(Journal((state.cut_epochs(topic_name, partition, 0),)))
    if log.hw_cap is None:
        # Copied records become visible only as far as the source's HW says
        # (follow_source_high_watermarks), never merely because they are durable.
        log.hw_cap = log.high_watermark
    for position, header in fresh:
        batch = bytes(data[position : position + header.size_bytes])
        marker = markers.get(position)
        effects.append(
            state.append(
                topic, partition, batch, header, now_ms, control_type=marker, allow_gap=True
            )
        )
    # Paired with the continuity check above: the batches went on where the
    # log ended (or where the source's log starts), each after the one before.
    end = topic.partitions[partition].log_end_offset
    assert end == expected, (
        f"partition {log.name}: appended from {start} to {expected} but its log ends at {end}"
    )
    return effects


GAP_REASON = "source log start moved past the follower's position"


def find_gap(
    state: ClusterState,
    topic_name: str,
    partition: int,
    data: bytes,
    source_log_start: int,
    source_high_watermark: int,
    cause: str,
    now_ms: int,
) -> Gap | None:
    """Follower side: the gap an answer shows, if any. A follower that holds
    offsets (its log end is past 0) and whose next offset is below the
    source's log start cannot copy the records between. The gap ends where
    the first batch the source sent starts (its log start, unless deleted
    records cut inside a batch: that batch still comes whole); an answer
    without batches shows a gap only when the source has nothing above its
    log start to send (else a later answer carries the batch). A log that
    never held an offset starts at the source's log start without a gap
    (`append_replica`): what was deleted before is older than its copy."""
    log = state.partition(topic_name, partition)
    leo = log.log_end_offset
    if leo == 0 or source_log_start <= leo:
        return None
    if data:
        try:
            first = next(rb.iter_batches(data), None)
        except rb.CorruptBatchError:
            return None  # refused by the append, with its reason
        if first is None:
            return None
        end = first[1].base_offset
    elif source_high_watermark <= source_log_start:
        end = source_log_start
    else:
        return None
    if end <= leo:
        return None
    why = f"{GAP_REASON}: {cause}" if cause else GAP_REASON
    return Gap(topic_name, partition, leo, end, now_ms, why)


def skip_gap(state: ClusterState, gap: Gap, config: LinkConfig) -> list[Effect]:
    """Follower side: records `gap` in the partition's provenance and starts
    its log again, empty, at the gap's end (its log start moves there: no
    offset of the gap is ever held, none reused). A gap the history already
    ends with (a reset a crash interrupted, found again) is not recorded twice."""
    topic = state.topic(gap.topic)
    log = state.partition(gap.topic, gap.partition)
    if log.log_end_offset > gap.from_offset or gap.to_offset <= log.log_end_offset:
        raise ClusterError(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            log.name,
            f"partition {log.name}: the gap [{gap.from_offset}, {gap.to_offset}) no longer "
            f"starts at its log end {log.log_end_offset}",
        )
    effects: list[Effect] = []
    entries = topic.provenance.get(gap.partition, [])
    last = entries[-1] if entries else None
    item = ProvenanceItem.gap(
        gap.from_offset, gap.to_offset, config.link_id, gap.reason, gap.at_ms
    )
    repeated = (
        last is not None and last.kind is ProvenanceKind.GAP and last.to_offset == gap.to_offset
    )
    if not repeated and not state.faults.undid(8):
        record = item.journal_record(gap.topic, gap.partition)
        state.apply_record(record)
        check_history(topic.provenance[gap.partition], gap.topic, gap.partition, gap.to_offset)
        effects.append(Journal((record,)))
    fresh = PartitionLog(gap.topic, gap.partition, log_start_offset=gap.to_offset)
    fresh.hw_cap = gap.to_offset
    topic.partitions[gap.partition] = fresh
    state.logs_replaced()
    effects.append(ResetLog(topic.topic_id, gap.partition, gap.to_offset))
    effects.append(Journal((state.cut_epochs(gap.topic, gap.partition, 0),)))
    return effects


def gaps_of(state: ClusterState, link_id: str) -> list[Gap]:
    """Every gap the provenance of this cluster's partitions records for the
    link, by topic, partition and offset."""
    out = []
    for name in sorted(state.topics_with_gaps & state.topics.keys()):
        for p, entries in sorted(state.topics[name].provenance.items()):
            out += [
                Gap(name, p, e.offset, e.to_offset, e.at_ms, e.reason)
                for e in entries
                if e.kind is ProvenanceKind.GAP and e.link_id == link_id
            ]
    return out


def follow_source_high_watermarks(
    state: ClusterState, link_name: str, caps: list[tuple[str, int, int]]
) -> bool:
    """Follower side, after a fetch round: each follower partition's HW may
    reach its source's HW (never beyond: readers here see only what the source
    acknowledged). On a SYNC link the caps of one response apply together or
    not at all, only once every partition holds its source's HW, so a
    transaction whose markers span partitions becomes visible at once (spec
    invariant 5). Returns whether any HW moved."""
    if not cap_at_source_high_watermarks(state, link_name, caps, hold=False):
        return False
    moved = False
    for t, p, hw in caps:
        log = state.partition(t, p)
        assert log.hw_cap == hw, f"partition {log.name}: HW cap {log.hw_cap}, source HW {hw}"
        if log.advance_high_watermark(state.links.sync_floor(t, p)):
            moved = True
            # Readers here see only what the source acknowledged.
            assert log.high_watermark <= hw, (
                f"link {link_name!r} partition {log.name}: HW {log.high_watermark} moved past "
                f"the source's HW {hw}"
            )
    return moved


def cap_at_source_high_watermarks(
    state: ClusterState, link_name: str, caps: list[tuple[str, int, int]], hold: bool = True
) -> bool:
    """Follower side, as soon as an answer's records are appended (before
    they are durable, and whether or not the round that brought them ever
    finishes): each follower partition's HW cap becomes the source's HW the
    answer told, so the HW follows what is durably appended
    (`PartitionLog.advance_high_watermark`: the durable log end, within the
    cap). A round cut short (its caller gone, the link deleted, the source
    dead) hides nothing it appended. On a SYNC link the caps of one answer
    apply together or not at all (`follow_source_high_watermarks`).
    Returns whether the caps were applied."""
    config = state.links.configs.get(link_name)
    logs = [(state.partition(t, p), hw) for t, p, hw in caps]
    if config is not None and config.mode == LinkMode.SYNC:
        if any(log.log_end_offset < hw for log, hw in logs):
            return False
        # The HWs they let move pass their caps together too: each follows
        # its own durable offset, and a shell makes the appends of one answer
        # durable a partition at a time (a journal record between them first
        # makes those before it durable), so one partition could pass a
        # transaction's COMMIT marker while another's append still waits.
        # Held as a marker group (`ClusterState.marker_groups`): none passes
        # its cap's last offset until every one can. (`hold` False: the
        # caller moves every HW at once right after, as the round's end does.)
        together = {
            (t, p): hw - 1
            for (t, p, hw), (log, _) in zip(caps, logs, strict=True)
            if log.high_watermark < hw
        }
        if hold and len(together) > 1:
            state.marker_groups.append(together)
    for log, hw in logs:
        log.hw_cap = hw
    return True


@dataclass(frozen=True, slots=True)
class ReplicaCut:
    """What a follower cut did: its effects, and the transactions whose COMMIT
    marker it removed that began below it, as (producer id, first offset):
    their records below the cut, read as committed until then, are committed
    no more (the source's marker decides now)."""

    effects: list[Effect]
    uncommitted: tuple[tuple[int, int], ...] = ()


def cut_replica(
    state: ClusterState,
    topic_name: str,
    partition: int,
    offset: int,
    config: LinkConfig | None = None,
    reason: str = "diverged",
    *,
    now_ms: int,
) -> ReplicaCut:
    """Follower side: cuts the log at the source's divergence point (or, for
    `reason` "source gone", above what its vanished source acknowledged).
    Given the link's config, the cut is recorded in the partition's
    provenance history (`ccr-admin provenance` shows it: spec section 8),
    with the transactions whose COMMIT it removed and when (`now_ms`)."""

    topic = state.topic(topic_name)
    log = state.partition(topic_name, partition)
    target = max(min(offset, log.log_end_offset), log.log_start_offset)
    # Cut at the batch boundary at or below the target.
    boundary = log.log_start_offset
    for entry in log.batches:
        if entry.base_offset <= target:
            boundary = entry.base_offset if entry.next_offset > target else entry.next_offset
    boundary = max(boundary, log.log_start_offset)
    if boundary >= log.log_end_offset:
        return ReplicaCut([])
    removed = log.log_end_offset - boundary
    assert log.log_start_offset <= boundary < log.log_end_offset, (log.name, boundary)
    # Transactions whose COMMIT the cut removes, begun below it.
    uncommitted = tuple(
        (pid, first)
        for pid, first, marker in histories.transactions_cut(log, boundary)
        if marker.control_type == rb.CONTROL_COMMIT
    )
    log.truncate_to(boundary)
    assert log.log_end_offset == boundary and log.high_watermark <= boundary, (
        log.name, boundary, log.log_end_offset, log.high_watermark
    )
    effects: list[Effect] = [
        TruncateLog(topic.topic_id, partition, boundary),
        Journal((state.cut_epochs(topic_name, partition, boundary),)),
    ]
    if config is not None:
        moved = clamp_replicated_offsets(state, topic_name, partition, boundary)
        item = ProvenanceItem.truncated(
            boundary,
            config.link_id,
            removed,
            reason,
            tuple((g, old_offset) for g, old_offset, _r in moved),
            uncommitted,
            now_ms,
        )
        record = item.journal_record(topic_name, partition)
        state.apply_record(record)
        check_history(topic.provenance[partition], topic_name, partition, boundary)
        effects.append(Journal((record, *[r for _g, _o, r in moved])))
    return ReplicaCut(effects, uncommitted)


def clamp_replicated_offsets(
    state: ClusterState, topic_name: str, partition: int, offset: int
) -> list[tuple[str, int, jr.OffsetCommit]]:
    """After a follower partition was cut at `offset`, the committed offsets of
    replicated groups (groups in a reserved namespace: only replication writes
    them) that point past the cut move back to it, so no replicated offset
    exceeds the follower's log (spec invariant 6); the cut's provenance entry
    reports each move. Returns (group, old offset, journal record)."""

    out: list[tuple[str, int, jr.OffsetCommit]] = []
    for group_id, _state, _type in sorted(state.groups.list_groups()):
        if not any(ns.reserved for ns in state.namespaces.matching(ResourceType.GROUP, group_id)):
            continue
        current = state.groups.committed(group_id, [(topic_name, partition)])
        committed = current.get((topic_name, partition))
        if committed is None or committed.offset <= offset:
            continue
        record = state.groups.set_committed(
            group_id,
            topic_name,
            partition,
            offset,
            committed.metadata,
            -1,
            committed.commit_timestamp_ms,
        )
        out.append((group_id, committed.offset, record))
    return out


def follower_mappings(config: LinkConfig, resource_type: str = "topic") -> list[Mapping]:
    # One pass over the mappings, in their order (`attached_mappings` first
    # builds a list); `leader` not LOCAL is `local_role` FOLLOWER.
    return [
        m
        for m in config.mappings.values()
        if m.attached and m.resource_type == resource_type and m.leader is not Leader.LOCAL
    ]


def leader_mappings(config: LinkConfig, resource_type: str = "topic") -> list[Mapping]:
    return [
        m
        for m in config.mappings.values()
        if m.attached and m.resource_type == resource_type and m.leader is Leader.LOCAL
    ]


@dataclass(frozen=True, slots=True)
class ProvenanceSummary:
    """How many provenance entries a partition has, and the latest one's
    offset (-1: none) and source cluster ("": none, or not a copy)."""

    entries: int
    start_offset: int
    source: str


def provenance_summary(state: ClusterState, topic: str, partition: int) -> ProvenanceSummary:
    """How many provenance entries a partition has, and the latest one."""
    t = state.topics.get(topic)
    entries = t.provenance.get(partition, []) if t is not None else []
    last = entries[-1] if entries else None
    return ProvenanceSummary(
        len(entries),
        last.offset if last is not None else -1,
        last.source if last is not None else "",
    )


# -- leader epochs of a promoted namespace (failover, reversal) ------------------------


def start_new_epochs(
    state: ClusterState, prefix: str, skip: frozenset[str] = frozenset()
) -> list[jr.JournalRecord]:
    """Starts a new leader epoch, at the log end, on every partition of every
    topic in a topic namespace that becomes writable here (journalled as an
    unclean election's bump is). Records written from then on carry it, so a
    cluster that kept the old leader's tail sees the divergence when it
    follows this one (OffsetsForLeaderEpoch)."""
    records: list[jr.JournalRecord] = []
    for name in sorted(state.topics):
        if not in_prefix(name, prefix) or name in skip:
            continue
        for p, log in enumerate(state.topics[name].partitions):
            record = jr.LeaderEpoch(name, p, log.leader_epoch + 1, log.log_end_offset)
            state.apply_record(record)
            records.append(record)
    return records
