"""A follower's quiet partitions in a fetch session, round after round.

In a fetch session the source leaves out of its answer every partition with
no news (`fetch_sessions`); the follower reaches each of them as the last
round left it, at the source high watermark of its last answer, unless its
row or its log says otherwise (`still_quiet`: then it goes the whole way).

At thousands of partitions and a few answered a round, looking at every
quiet partition each round is most of a round's work. So the follower's
session gives each answer's quiet partitions as a difference from the last
(`QuietPartitions.touched`), and the link keeps what the last round found
(`links.QuietTrack`): a partition found quiet stays so, without a look,
unless it is touched, its log moved (the cluster's log feed), its row was
written or forgotten since, or the link's mappings or the layout of logs
changed (then every partition is looked at). In tests and validation runs
every round is checked against a look at each partition.
"""

from __future__ import annotations

import collections
import itertools
import operator
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from linkd.core.cluster import ClusterState
from linkd.core.links import LinkConfig, LinkRuntime, PartitionProgress, QuietTrack, Role

Key = tuple[str, int]  # (source topic, partition)
LocalKey = tuple[str, int]  # (local topic, partition)
RowKey = tuple[str, int, str]  # a link row's key
Found = list[tuple[RowKey, PartitionProgress]]


@dataclass(frozen=True, slots=True)
class FollowerProgress:
    """A follower partition the round reached, with its source's HW."""

    topic: str  # local name
    partition: int
    source_high_watermark: int


@dataclass(frozen=True, slots=True)
class QuietPartitions:
    """The partitions a fetch session's source left out of one answer, with
    no news since their last answer: each with the source high watermark
    that answer carried (`hw`). `touched`: those whose entry may differ from
    the session's previous answer's (in or out, or another high watermark;
    None: every one may). `place`: each session partition's place in the
    session's order. `session` and `seq` say which answer of which session
    this is. `hw` and `place` are the session's own: read them before its
    next answer (a link's pull lane applies each answer before it asks
    again)."""

    hw: Mapping[Key, int] = field(default_factory=dict)
    touched: AbstractSet[Key] | None = None
    place: Mapping[Key, int] = field(default_factory=dict)
    session: object = None
    seq: int = 0

    def in_order(self) -> list[tuple[Key, int]]:
        """Every quiet partition with its source HW, in the session's order."""
        hw = self.hw
        return [(k, hw[k]) for k in self.place if k in hw]


@dataclass(frozen=True, slots=True)
class QuietRound:
    """An answer's quiet partitions with the map to local topics of the
    request it answers (`apply_replica_fetch`'s `AppliedFetch.unchanged`)."""

    quiet: QuietPartitions
    local_of: Mapping[Key, str]

    def followed(
        self, state: ClusterState, config: LinkConfig | None
    ) -> list[tuple[str, int, int]]:
        """(local topic, partition, source HW) of each quiet partition whose
        local topic is there and followed, in the session's order."""
        mapped, _ = _mapped(self.local_of, self.quiet.in_order())
        followed: dict[str, bool] = {}
        out = []
        for local, p, hw in mapped:
            if local not in followed:
                followed[local] = (
                    local in state.topics
                    and config is not None
                    and config.mapping_for(local, "follower") is not None
                )
            if followed[local]:
                out.append((local, p, hw))
        return out


NO_QUIET = QuietPartitions()


@dataclass(slots=True)
class StillQuiet:
    """What `still_quiet` found: the quiet rows, each with its key
    (`found`), and of them those caught up (`caught`). Taken by difference
    (`by_difference`), it also says which follower rows may have to be
    forgotten now (`maybe_gone`: rows found quiet before and not now, rows
    the last round reached otherwise, rows written since); any other row
    kept by the last round is kept."""

    found: Collection[tuple[RowKey, PartitionProgress]]
    caught: Collection[PartitionProgress]
    track: QuietTrack | None = None
    by_difference: bool = False
    maybe_gone: set[RowKey] = field(default_factory=set)
    _keys: set[RowKey] | None = None  # (`holds` without a track, built once)

    def rows(self) -> Iterator[PartitionProgress]:
        return map(operator.itemgetter(1), self.found)

    def keys(self) -> Iterator[RowKey]:
        return map(operator.itemgetter(0), self.found)

    def holds(self, key: RowKey) -> bool:
        """Whether `key` is a row found quiet."""
        if self.track is not None:
            return key[2] == Role.FOLLOWER and (key[0], key[1]) in self.track.local
        if self._keys is None:
            self._keys = set(self.keys())
        return key in self._keys


def still_quiet(
    state: ClusterState,
    runtime: LinkRuntime,
    config: LinkConfig | None,
    unchanged: Sequence[tuple[str, int, int]] | QuietRound,
    reached: list[FollowerProgress],
) -> StillQuiet:
    """`finish_fetch_round`: of a fetch session's quiet partitions, those
    still followed and as the last round left them (same source HW, same
    position), each with its row: only their news is newer. The others
    join `reached` (in the session's order) and go the whole way: one whose
    HW is held back (a transaction's markers held together across
    partitions, a SYNC follower of its own), because following its source's
    HW again may release it now, and one whose row or position moved
    meanwhile. A `QuietRound` of the answer after the one the link's track
    took is taken by difference (module docstring)."""
    if not isinstance(unchanged, QuietRound):
        runtime.quiet_track = None
        quiet = _look_at_each(state, runtime, config, unchanged, reached)
        return _as_found(quiet)
    feed = state.log_feed
    mappings = tuple(config.mappings.items()) if config is not None else ()
    q = unchanged.quiet
    track = runtime.quiet_track
    if (
        track is None
        or q.touched is None
        or track.session is not q.session
        or track.seq != q.seq - 1
        or track.layout != feed.layout
        or track.mappings != mappings
    ):
        track = runtime.quiet_track = QuietTrack(q.session, q.seq, mappings, feed.layout)
        looked, maybe_gone, by_difference = q.in_order(), set[RowKey](), False
    else:
        suspects, maybe_gone = _suspects(state, track, q)
        hw = q.hw
        keys = sorted(filter(hw.__contains__, suspects), key=q.place.__getitem__)
        looked, by_difference = [(k, hw[k]) for k in keys], True
    before = len(reached)
    mapped, source_of = _mapped(unchanged.local_of, looked)
    quiet = _look_at_each(state, runtime, config, mapped, reached)
    track.failed = {source_of[(p.topic, p.partition)] for p in reached[before:]}
    topics = state.topics
    for key, row in quiet:
        source = source_of[(key[0], key[1])]
        track.found[source] = (key, row)
        track.local[(key[0], key[1])] = source
        if row.source_high_watermark <= row.log_end_offset:  # lag_records() == 0
            track.caught[source] = row
        feed.watch(topics[key[0]].partitions[key[1]])
    track.seq, track.feed_seq, track.written = q.seq, feed.seq, set()
    if state.links.check_lag_verdicts:
        _check(state, runtime, config, unchanged, track, reached[before:])
    return StillQuiet(track.found.values(), track.caught.values(), track, by_difference, maybe_gone)


def _suspects(
    state: ClusterState, track: QuietTrack, q: QuietPartitions
) -> tuple[set[Key], set[RowKey]]:
    """The partitions to look at again (touched by the answer, reached
    otherwise by the last round, or found quiet by it and since moved or
    written), each out of what the track found; and the follower rows that
    may have to be forgotten now."""
    assert q.touched is not None
    suspects = set(q.touched)
    suspects.update(track.failed)
    local = track.local
    written = track.written
    for at in itertools.chain(state.log_feed.since(track.feed_seq), written):
        source = local.get(at)
        if source is not None:
            suspects.add(source)
    maybe_gone = {(t, p, "follower") for t, p in written}
    maybe_gone.update(track.reached)
    found, caught = track.found, track.caught
    for source in suspects:
        entry = found.pop(source, None)
        if entry is not None:
            key = entry[0]
            del local[(key[0], key[1])]
            caught.pop(source, None)
            maybe_gone.add(key)
    return suspects, maybe_gone


def _mapped(
    local_of: Mapping[Key, str], quiet: Iterable[tuple[Key, int]]
) -> tuple[list[tuple[str, int, int]], dict[LocalKey, Key]]:
    """(local topic, partition, source HW) of each of `quiet` the map names,
    in order, and the source key of each local one."""
    mapped: list[tuple[str, int, int]] = []
    source_of: dict[LocalKey, Key] = {}
    for key, hw in quiet:
        local = local_of.get(key)
        if local is not None:
            mapped.append((local, key[1], hw))
            source_of[(local, key[1])] = key
    return mapped, source_of


def _as_found(quiet: Found) -> StillQuiet:
    caught = [row for _, row in quiet if row.source_high_watermark <= row.log_end_offset]
    return StillQuiet(quiet, caught)


def _check(
    state: ClusterState,
    runtime: LinkRuntime,
    config: LinkConfig | None,
    unchanged: QuietRound,
    track: QuietTrack,
    failed: list[FollowerProgress],
) -> None:
    """The track's quiet partitions, and those the round reached otherwise,
    are what a look at every quiet partition finds."""
    mapped, _ = _mapped(unchanged.local_of, unchanged.quiet.in_order())
    scan_reached: list[FollowerProgress] = []
    scan = _look_at_each(state, runtime, config, mapped, scan_reached)
    kept = {key: row for key, row in track.found.values()}
    assert kept == dict(scan) and scan_reached == failed, (
        "the quiet partitions kept by difference are not what a look at each finds: "
        f"kept {sorted(kept)}, reached {failed}; a look finds {sorted(k for k, _ in scan)}, "
        f"reached {scan_reached}"
    )
    assert {(k[0], k[1]): s for s, (k, _) in track.found.items()} == track.local, track.local
    assert track.caught.keys() <= track.found.keys()


def _look_at_each(
    state: ClusterState,
    runtime: LinkRuntime,
    config: LinkConfig | None,
    unchanged: Sequence[tuple[str, int, int]],
    reached: list[FollowerProgress],
) -> Found:
    """`still_quiet` looking at every partition of `unchanged`."""
    quiet: Found = []
    topics = state.topics
    # The partitions come a topic at a time: each run is judged at once.
    for topic, run in itertools.groupby(unchanged, operator.itemgetter(0)):
        if (
            topic in topics
            and config is not None
            and config.mapping_for(topic, "follower") is not None
        ):
            _quiet_run(state, runtime, topic, list(run), quiet, reached)
    return quiet


_DURABLE = operator.attrgetter("durable_offset")
_HW = operator.attrgetter("high_watermark")
_END = operator.attrgetter("log_end_offset")
_SOURCE_HW = operator.attrgetter("source_high_watermark")


def _quiet_run(
    state: ClusterState,
    runtime: LinkRuntime,
    topic: str,
    run: list[tuple[str, int, int]],
    quiet: Found,
    reached: list[FollowerProgress],
) -> None:
    """`still_quiet` for a run of one followed topic's partitions: when
    every one is quiet (the common case) the run is judged a column at a
    time (at C speed), else a partition at a time."""
    logs = state.topics[topic].partitions
    parts = list(map(operator.itemgetter(1), run))
    keys = list(zip(itertools.repeat(topic), parts, itertools.repeat("follower")))
    rows = list(map(runtime.rows.get, keys))  # (follower rows: none is in the fold)
    position = _END if state.faults.undid(19) else _HW  # `admin.readable_position`
    if None not in rows and max(parts) < len(logs):
        mine = list(map(logs.__getitem__, parts))
        held_back = any(map(operator.gt, map(_DURABLE, mine), map(_HW, mine)))
        if (
            not held_back
            and list(map(_SOURCE_HW, rows)) == list(map(operator.itemgetter(2), run))
            and list(map(_END, rows)) == list(map(position, mine))
        ):
            quiet += zip(keys, rows, strict=True)  # type: ignore[arg-type]  # (no row is None)
            return
    for key, row, (_, partition, hw) in zip(keys, rows, run, strict=True):
        log = logs[partition] if partition < len(logs) else None
        if (
            row is not None
            and log is not None
            and log.durable_offset <= log.high_watermark  # not `held_back`
            and row.source_high_watermark == hw
            and row.log_end_offset == position(log)
        ):
            quiet.append((key, row))
        else:
            reached.append(FollowerProgress(topic, partition, hw))


def write_quiet(found: StillQuiet, known_at_ms: int, now_ms: int) -> None:
    """`LinkTable.on_progress` for each quiet row, with the same position
    and source HW (known from `known_at_ms`; those caught up, caught up
    now), a column at a time."""
    collections.deque(
        map(setattr, found.rows(), itertools.repeat("known_at_ms"), itertools.repeat(known_at_ms)),
        maxlen=0,
    )
    collections.deque(
        map(setattr, found.caught, itertools.repeat("caught_up_at_ms"), itertools.repeat(now_ms)),
        maxlen=0,
    )


__all__ = [
    "NO_QUIET",
    "FollowerProgress",
    "QuietPartitions",
    "QuietRound",
    "StillQuiet",
    "still_quiet",
    "write_quiet",
]
