"""Fetch sessions: replica fetches that carry only what changed (KIP-227's idea).

Without a session every fetch round names every follower partition of the
link, and the source plans, checks and answers each of them: at thousands of
partitions a round costs work for every one, whether anything moved or not.
With one, the follower and the source remember the partitions between rounds:

- The first request of a session is full (epoch OPENING, every partition);
  the source opens a session, keeps each partition's fetch, and answers with
  the session's id.
- Each later request carries the session's next epoch and names only the
  partitions whose fetch changed since the last request (a new position, new
  marks, held or not), plus those no longer fetched (`forgotten`).
- The source serves the partitions named, and of the others those with news:
  a log that is no longer as its last answer found it (`LogSeen`), then,
  while the answer's byte budget lasts, those whose follower has records to
  copy. The rest are quiet: still fetched (the source records the fetch at
  the same position, so its judgement of the follower, and a SYNC link's
  acknowledgements, do not change), not answered. A row quiet round after
  round is not written each round: the link table counts the rounds and
  the row takes them in when it is read (`links.QuietFold`); each round
  tells the fold which partitions may have come or gone since the round
  before (`Sorted.unanswered`), so it looks at no other.
- The follower hands every quiet partition to the round as reached, with
  the source high watermark its last answer carried (`FetchAnswer.unchanged`,
  a partition and a number each, not an answer each), as a difference from
  the last answer's (`quiet_rounds.QuietPartitions`); the round then goes on
  exactly as a full one (`link_rounds.apply_replica_fetch`,
  `finish_fetch_round`), looking again only at the quiet partitions that
  changed (`quiet_rounds.still_quiet`).

Any doubt ends the session and the next request is full: a request whose
answer never came (lost, refused, past its deadline), a session or epoch the
source does not know (it restarted, or another request came between); and
on the source a link whose configuration changed since the last request
serves every partition again. Pushes keep no session: a pushing
leader already answers the follower's last request as it stands.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import ClassVar, cast

from linkd.core.cluster import ClusterState
from linkd.core.link_rounds import (
    OPENING,
    SESSIONLESS,
    FetchAnswer,
    FetchedPartition,
    FetchRequest,
    FetchSessionRef,
    PartitionFetch,
)
from linkd.core.links import FetchedAgain, LinkConfig
from linkd.core.partition import PartitionLog
from linkd.core.quiet_rounds import QuietPartitions

Key = tuple[str, int]  # (source topic, partition)

# Epochs wrap back to 1 (0 opens a session, -1 is none), as Kafka's do.
_EPOCH_MAX = 2**31 - 1


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= _EPOCH_MAX else epoch + 1


def _key(part: PartitionFetch | FetchedPartition) -> Key:
    return (part.source_topic, part.partition)


def _plain(entry: FetchedPartition) -> bool:
    """An answer that only reports where the source's log stands (no refusal,
    no divergence, no marks asked for, not held)."""
    return (
        entry.error is None
        and entry.diverging_end_offset < 0
        and not entry.marks_wanted
        and not entry.held
    )


def _not_as_last(
    parts: tuple[PartitionFetch, ...], last: tuple[PartitionFetch, ...]
) -> Iterable[PartitionFetch]:
    """Of `parts`, in order, those that are not the very fetch at their index
    in `last` (compared at C speed: a follower reuses the fetches of logs
    that did not move, `link_rounds.follower_fetch_request`)."""
    if parts is last:
        return ()
    moved = itertools.compress(range(len(parts)), map(operator.is_not, parts, last))
    tail = range(min(len(parts), len(last)), len(parts))
    return [parts[i] for i in itertools.chain(moved, tail)]


# -- follower side ---------------------------------------------------------------------


@dataclass(slots=True)
class FollowerFetchSession:
    """The follower's half of a link's fetch session (not durable).

    Besides what the source holds, it keeps the quiet partitions of its
    last answer (`quiet`) and gives each answer's as a difference from the
    last (`QuietPartitions.touched`): a partition neither answered now nor
    the last time, nor named, added or forgotten since, is as quiet as it
    was, with the same source high watermark."""

    session_id: int = 0
    next_epoch: int = OPENING
    # Each partition's fetch as the source's session holds it.
    sent: dict[Key, PartitionFetch] = field(default_factory=dict)
    # The source HW of each partition's last plain answer: a quiet
    # partition is reached at it.
    known_hw: dict[Key, int] = field(default_factory=dict)
    # A request left and its answer has not come: until it does, what the
    # source holds is not known, so the next request is full.
    in_flight: bool = False
    # The partitions of the last full request: each fetch there is, or
    # equals, the one `sent` holds for its partition.
    last_full: tuple[PartitionFetch, ...] = ()
    # Each partition's place in the session's order (`sent`'s order).
    place: dict[Key, int] = field(default_factory=dict)
    next_place: int = 0
    # The last answer's quiet partitions (the session's own: each answer's
    # `QuietPartitions` reads it until the next answer), the partitions it
    # answered, those named, added or forgotten since, and its number
    # (`compared`: False when no answer since the session (re)opened).
    quiet: dict[Key, int] = field(default_factory=dict)
    last_present: set[Key] = field(default_factory=set)
    between: set[Key] = field(default_factory=set)
    answers: int = 0
    compared: bool = False

    def reset(self) -> None:
        self.session_id, self.next_epoch = 0, OPENING
        self.sent.clear()
        self.last_full = ()
        self.known_hw.clear()
        self.in_flight = False
        self.compared = False

    def request(self, full: FetchRequest) -> FetchRequest:
        """What to send for `full` (every partition the follower fetches):
        all of it when the session opens, else only the partitions whose
        fetch changed and those no longer fetched."""
        if self.in_flight:
            self.reset()  # the last request was never answered
        self.in_flight = True
        if self.next_epoch == OPENING:
            self.sent = {_key(p): p for p in full.partitions}
            self.place = dict(zip(self.sent, itertools.count()))
            self.next_place = len(self.place)
            self.known_hw.clear()
            self.last_full = full.partitions
            self.compared = False
            return replace(full, fetch_session=FetchSessionRef(0, OPENING))
        changed: list[PartitionFetch] = []
        added = 0
        for p in _not_as_last(full.partitions, self.last_full):
            before = self.sent.get(_key(p))
            if before is not p and before != p:
                changed.append(p)
                added += before is None
        forgotten: tuple[Key, ...] = ()
        if len(self.sent) + added > len(full.partitions):
            current = {_key(p) for p in full.partitions}
            forgotten = tuple(sorted(k for k in self.sent if k not in current))
            for k in forgotten:
                del self.sent[k]
                del self.place[k]
                self.known_hw.pop(k, None)
        for p in changed:
            k = _key(p)
            if k not in self.sent:
                self.place[k] = self.next_place
                self.next_place += 1
            self.sent[k] = p
        self.between.update(map(_key, changed))
        self.between.update(forgotten)
        self.last_full = full.partitions
        ref = FetchSessionRef(self.session_id, self.next_epoch, forgotten)
        return replace(full, partitions=tuple(changed), fetch_session=ref)

    def answered(self, request: FetchRequest, answer: FetchAnswer) -> FetchAnswer | None:
        """`answer` to `request`, with every quiet partition put back as
        reached (`FetchAnswer.unchanged`). None: the source refused the
        session (the next request is full; the round learned nothing)."""
        self.in_flight = False
        ref = request.fetch_session
        if answer.fetch_session_refused:
            self.reset()
            return None
        if ref.epoch == SESSIONLESS:
            return answer
        if ref.epoch == OPENING:
            if answer.fetch_session_id == 0:
                self.reset()  # the source keeps no session: every request is full
                return answer
            self.session_id = answer.fetch_session_id
        self.next_epoch = _next_epoch(ref.epoch)
        present: set[Key] = set()
        for entry in answer.partitions:
            k = _key(entry)
            present.add(k)
            if _plain(entry):
                self.known_hw[k] = entry.high_watermark
            else:
                self.known_hw.pop(k, None)
        touched = self._quiet_now(present)
        self.answers += 1
        return replace(
            answer,
            unchanged=QuietPartitions(self.quiet, touched, self.place, self, self.answers),
        )

    def _quiet_now(self, present: set[Key]) -> AbstractSet[Key] | None:
        """The quiet partitions of the answer that answered `present`, into
        `quiet`; returns those whose entry may have changed since the last
        answer's (None: every one)."""
        known, quiet = self.known_hw, self.quiet
        touched: set[Key] | None = None
        if self.compared:
            touched = present | self.last_present | self.between
            for k in touched:
                if k in known and k not in present and k in self.sent:
                    quiet[k] = known[k]
                else:
                    quiet.pop(k, None)
        else:
            self.quiet = quiet = self._scan_quiet(present)
        self.last_present, self.between, self.compared = present, set(), True
        if self.check_against_scan:
            assert quiet == self._scan_quiet(present), (
                "the quiet partitions kept by difference are not what a scan finds"
            )
            assert list(self.place) == list(self.sent), "the session's order is not its places'"
        return touched

    def _scan_quiet(self, present: set[Key]) -> dict[Key, int]:
        """The quiet partitions, every one looked at (at C speed)."""
        known = self.known_hw
        unanswered = itertools.filterfalse(present.__contains__, self.sent)
        keys = [*filter(known.__contains__, unanswered)]
        return dict(zip(keys, map(known.__getitem__, keys), strict=True))

    # Tests and validation runs: each answer's quiet partitions are checked
    # against a look at every partition.
    check_against_scan: ClassVar[bool] = False


# -- source side -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogSeen:
    """A partition's log as the source's last plain answer found it, with no
    record carried. The same log with the same bounds, epoch and rewrites has
    nothing new to report; if the follower held all of it then (`caught_up`)
    nothing to copy either."""

    log: PartitionLog
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    leader_epoch: int
    rewrites: int
    caught_up: bool

    @staticmethod
    def of(log: PartitionLog, caught_up: bool) -> LogSeen:
        return LogSeen(
            log,
            log.log_start_offset,
            log.log_end_offset,
            log.high_watermark,
            log.leader_epoch,
            log.rewrites,
            caught_up,
        )


# What of a log (and of a `LogSeen`) says whether it is as last answered.
_BOUNDS = operator.attrgetter(
    "log_end_offset", "high_watermark", "log_start_offset", "leader_epoch", "rewrites"
)
_LOG = operator.attrgetter("log")
_CAUGHT_UP = operator.attrgetter("caught_up")
# No log is this one: a partition with no `LogSeen` is answered.
_NEVER_SEEN = LogSeen(cast(PartitionLog, None), -1, -1, -1, -1, -1, False)


@dataclass(slots=True)
class SourceFetchSession:
    """The source's half of a link's fetch session (not durable).

    Each round sorts the session's partitions into those to answer, the
    spare ones and the quiet ones (`parts_to_serve`). The sorting is kept
    between rounds: a round sorts again only the partitions that may have
    changed since (named by the request, answered by the last round, or
    whose log moved: `log_feed.LogFeed`), and every one when the link's
    configuration or the cluster's layout of logs changed. The rule for
    one partition is the same either way (`_sort_one`); with
    `check_against_scan` (tests) every round is checked against a sort of
    every partition."""

    session_id: int
    next_epoch: int
    link_name: str
    # The link's configuration as last served (`config_seen`): a change (a
    # mapping attached, detached or reversed, the mode) serves every
    # partition again.
    config: tuple[object, ...]
    parts: dict[Key, PartitionFetch]
    seen: dict[Key, LogSeen] = field(default_factory=dict)
    # Each partition's place in the session's order (`parts`' order).
    order: dict[Key, int] = field(default_factory=dict)
    # The last sorting: to answer, spare (by place), quiet.
    serving: set[Key] = field(default_factory=set)
    spare: dict[int, Key] = field(default_factory=dict)
    spare_at: list[int] = field(default_factory=list)
    quiet: set[Key] = field(default_factory=set)
    # Partitions to sort again in the next round (named, answered, taken).
    touched: set[Key] = field(default_factory=set)
    # The log feed as the last sorting read it: its sequence number and
    # layout (-1: sort every partition).
    feed_seq: int = -1
    layout: int = -1
    next_place: int = 0
    # Rounds sorted so far; the partitions sorted again by the last one
    # (None: every one), forgotten since, and the spare ones the last round
    # answered: what may be in or out of the unanswered partitions where it
    # was not the round before (`Sorted.unanswered`).
    rounds: int = 0
    resorted: set[Key] | None = None
    forgotten: set[Key] = field(default_factory=set)
    spare_answered: list[Key] = field(default_factory=list)

    check_against_scan: ClassVar[bool] = False

    def __post_init__(self) -> None:
        self.order = {k: i for i, k in enumerate(self.parts)}
        self.next_place = len(self.order)

    def take(self, part: PartitionFetch) -> None:
        """The request named `part`: its fetch is the session's now."""
        k = _key(part)
        if k not in self.parts:
            self.order[k] = self.next_place
            self.next_place += 1
        self.parts[k] = part
        self.seen.pop(k, None)
        self.touched.add(k)

    def forget(self, k: Key) -> None:
        """The request says `k` is no longer fetched."""
        if self.parts.pop(k, None) is None:
            return
        self.seen.pop(k, None)
        self._unsort(k)
        del self.order[k]
        self.touched.discard(k)
        self.forgotten.add(k)

    def parts_to_serve(self, state: ClusterState, named: tuple[PartitionFetch, ...]) -> Sorted:
        """The partitions named and those whose log is not as their last
        answer found it (all of them when the link's configuration changed
        since) are answered; of the rest, those whose follower was behind
        are spare (answered while the byte budget lasts:
        `serve_replica_fetch`), the others quiet."""
        config = state.links.configs.get(self.link_name)
        now = config_seen(config) if config is not None else ()
        if now != self.config:
            self.seen.clear()
            self.config = now
            self.layout = -1
        names = {_key(p) for p in named}
        feed = state.log_feed
        if self.layout != feed.layout:
            self._sort_all(state, names)
            self.resorted = None
        else:
            moved = feed.since(self.feed_seq)
            resorted = self.resorted = set()
            for k in itertools.chain(self.touched, names, moved):
                if k in self.parts:
                    self._sort_one(state, k, names)
                    resorted.add(k)
        self.rounds += 1
        self.touched = names  # (served now: sorted again next round)
        self.feed_seq, self.layout = feed.seq, feed.layout
        if self.check_against_scan:
            self._check(state, names)
        return Sorted(self)

    def _unsort(self, k: Key) -> None:
        if k in self.serving:
            self.serving.discard(k)
        elif k in self.quiet:
            self.quiet.discard(k)
        else:
            at = self.order[k]
            if self.spare.pop(at, None) is not None:
                del self.spare_at[bisect.bisect_left(self.spare_at, at)]

    def _sort_one(self, state: ClusterState, k: Key, names: set[Key]) -> None:
        """Sorts one partition again (`_sort_each`'s rule)."""
        self._unsort(k)
        seen = None if k in names else self.seen.get(k)
        if seen is None:
            self.serving.add(k)
            return
        topic = state.topics.get(k[0])
        logs = topic.partitions if topic is not None else ()
        log = logs[k[1]] if k[1] < len(logs) else None
        if log is not seen.log or _BOUNDS(log) != _BOUNDS(seen):
            self.serving.add(k)
        elif seen.caught_up:
            self.quiet.add(k)
        else:
            at = self.order[k]
            self.spare[at] = k
            bisect.insort(self.spare_at, at)

    def _sort_all(self, state: ClusterState, names: set[Key]) -> None:
        serve, spare, quiet = self._scan(state, names)
        self.serving = set(map(_key, serve))
        self.quiet = set(map(_key, quiet))
        order = self.order
        self.spare = {order[k]: k for k in map(_key, spare)}
        self.spare_at = list(self.spare)  # (in the session's order: ascending)

    def _scan(
        self, state: ClusterState, names: set[Key]
    ) -> tuple[list[PartitionFetch], list[PartitionFetch], list[PartitionFetch]]:
        """(to answer, spare, quiet), each in the session's order, every
        partition sorted."""
        serve: list[PartitionFetch] = []
        spare: list[PartitionFetch] = []
        quiet: list[PartitionFetch] = []
        # The partitions come a topic at a time: each run is judged at once.
        for topic, run in itertools.groupby(self.parts, operator.itemgetter(0)):
            keys = list(run)
            sorts = serve, spare, quiet
            if not self._run_as_seen(state, topic, keys, names, sorts):
                self._sort_each(state, topic, keys, names, sorts)
        return serve, spare, quiet

    def _check(self, state: ClusterState, names: set[Key]) -> None:
        """The kept sorting is what a sort of every partition gives."""
        sorted_now = Sorted(self)
        serve, spare, quiet = self._scan(state, names)
        kept = (sorted_now.serve, list(sorted_now.spare_in_order()), sorted_now.quiet_in_order())
        assert kept == (serve, spare, quiet), (
            f"link {self.link_name!r} fetch session {self.session_id}: the kept sorting "
            f"differs from a scan: kept {[list(map(_key, x)) for x in kept]}, scan "
            f"{[list(map(_key, x)) for x in (serve, spare, quiet)]}"
        )

    def _run_as_seen(
        self,
        state: ClusterState,
        topic: str,
        keys: list[Key],
        names: set[Key],
        sorts: tuple[list[PartitionFetch], list[PartitionFetch], list[PartitionFetch]],
    ) -> bool:
        """`parts_to_serve` for a run of one topic's partitions whose logs are
        all there, judged a column at a time (at C speed). False: not so
        (the run is left to `_sort_each`)."""
        topic_of = state.topics.get(topic)
        if topic_of is None:
            return False
        logs = topic_of.partitions
        indices = list(map(operator.itemgetter(1), keys))
        if max(indices) >= len(logs):
            return False
        mine = list(map(logs.__getitem__, indices))
        seens = list(map(self.seen.get, keys, itertools.repeat(_NEVER_SEEN)))
        same = map(operator.is_, map(_LOG, seens), mine)  # (the very log)
        bounds = map(operator.eq, map(_BOUNDS, seens), map(_BOUNDS, mine))
        unnamed = map(operator.not_, map(names.__contains__, keys))
        as_seen = list(map(all, zip(same, bounds, unnamed, strict=True)))
        caught = list(map(_CAUGHT_UP, seens))
        parts = list(map(self.parts.__getitem__, keys))
        serve, spare, quiet = sorts
        serve += itertools.compress(parts, map(operator.not_, as_seen))
        quiet += itertools.compress(parts, map(operator.and_, as_seen, caught))
        spare += itertools.compress(parts, map(operator.gt, as_seen, caught))
        return True

    def _sort_each(
        self,
        state: ClusterState,
        topic: str,
        keys: list[Key],
        names: set[Key],
        sorts: tuple[list[PartitionFetch], list[PartitionFetch], list[PartitionFetch]],
    ) -> None:
        """`parts_to_serve` for a run of one topic's partitions, a partition
        at a time."""
        serve, spare, quiet = sorts
        topic_of = state.topics.get(topic)
        logs = topic_of.partitions if topic_of is not None else []
        for k in keys:
            part = self.parts[k]
            seen = None if k in names else self.seen.get(k)
            if seen is None:
                serve.append(part)
                continue
            log = logs[k[1]] if k[1] < len(logs) else None
            if log is not seen.log or _BOUNDS(log) != _BOUNDS(seen):
                serve.append(part)
            elif seen.caught_up:
                quiet.append(part)
            else:
                spare.append(part)

    def answered(self, state: ClusterState, answer: FetchAnswer) -> None:
        """Remembers what `answer` (served from this session) told of each
        partition: after a plain answer that carried no record, the
        partition is quiet (its follower holds the whole log) or spare (it
        does not) until its log changes or the follower's fetch does."""
        for entry in answer.partitions:
            k = _key(entry)
            self.touched.add(k)
            part = self.parts.get(k)
            topic = state.topics.get(k[0])
            if (
                part is None
                or topic is None
                or k[1] >= len(topic.partitions)
                or not _plain(entry)
                or entry.records
            ):
                self.seen.pop(k, None)
                continue
            log = topic.partitions[k[1]]
            if entry.log_end_offset != log.log_end_offset:
                self.seen.pop(k, None)  # the log moved after the answer was read
                continue
            state.log_feed.watch(log)
            self.seen[k] = LogSeen.of(log, part.fetch_offset == log.log_end_offset)


class Sorted:
    """One round's sorting of a session's partitions (`parts_to_serve`):
    those to answer (`serve`, in the session's order), the spare ones (in
    that order, `spare_in_order`) and the quiet ones. Read it before the
    session changes (`answered`)."""

    __slots__ = ("_session", "serve")

    def __init__(self, session: SourceFetchSession) -> None:
        self._session = session
        order, parts = session.order, session.parts
        self.serve = [parts[k] for k in sorted(session.serving, key=order.__getitem__)]

    def spare_in_order(self) -> Iterator[PartitionFetch]:
        s = self._session
        return map(s.parts.__getitem__, map(s.spare.__getitem__, s.spare_at))

    def quiet_in_order(self) -> list[PartitionFetch]:
        s = self._session
        return [s.parts[k] for k in sorted(s.quiet, key=s.order.__getitem__)]

    def unanswered(self, spare_served: int) -> FetchedAgain:
        """The quiet partitions and the spare ones after the first
        `spare_served`: fetched again, not answered. Also which may be in or
        out where they were not the session's round before: the partitions
        sorted again, forgotten, or spare and answered by either round. Call
        it once a round: it starts the session's count of those anew."""
        s = self._session
        spare_at, spare = s.spare_at, s.spare
        answered = list(map(spare.__getitem__, spare_at[:spare_served]))
        changed: set[Key] | None = None
        if s.resorted is not None:
            changed = s.resorted | s.forgotten
            changed.update(s.spare_answered, answered)
        s.forgotten, s.spare_answered = set(), answered
        rest = spare_at[spare_served:]
        first = rest[0] if rest else None
        quiet, order, parts = s.quiet, s.order, s.parts  # (read at once, not kept)

        def keys() -> AbstractSet[Key]:
            return quiet.union(map(spare.__getitem__, rest)) if rest else set(quiet)

        def contains(k: Key) -> bool:
            if k in quiet:
                return True
            at = order.get(k)
            return first is not None and at is not None and at >= first and spare.get(at) == k

        def fetches(of: AbstractSet[Key]) -> list[tuple[str, int, int]]:
            # The quiet ones first, then the spare ones, each in the session's order.
            ks = sorted(of & quiet, key=order.__getitem__)
            ks += sorted(of - quiet, key=order.__getitem__)
            return [(k[0], k[1], parts[k].fetch_offset) for k in ks]

        return FetchedAgain(keys, fetches, contains, (s, s.rounds), changed)


def config_seen(config: LinkConfig) -> tuple[object, ...]:
    """What of a link's configuration decides how a source serves it (the
    configuration is changed in place, so it is compared by value)."""
    return (config.link_id, config.mode, config.fetch_bound, tuple(config.mappings.items()))


@dataclass(frozen=True, slots=True)
class SessionRefused:
    """Why the source refused a request's session."""

    reason: str


def source_session(
    state: ClusterState, link_id: str, request: FetchSessionRef, named: tuple[PartitionFetch, ...]
) -> SourceFetchSession | SessionRefused | None:
    """Source side, as a fetch arrives: the session it belongs to, updated
    with its partitions (None: a request with no session). An OPENING request
    opens a new session in place of the link's last; an incremental one must
    name the link's session and its next epoch, else it is refused and the
    session closed (the follower's next request is full)."""
    if request.epoch == SESSIONLESS:
        return None
    config = state.links.by_id(link_id)
    runtime = state.links.runtime.get(config.name)
    if runtime is None:
        return None
    if request.epoch == OPENING:
        runtime.fetch_session_ids += 1
        opened = SourceFetchSession(
            runtime.fetch_session_ids, 1, config.name, config_seen(config),
            {_key(p): p for p in named},
        )  # fmt: skip
        runtime.source_fetch_session = opened
        return opened
    session = runtime.source_fetch_session
    if not isinstance(session, SourceFetchSession) or session.session_id != request.session_id:
        runtime.source_fetch_session = None
        return SessionRefused(
            f"link {config.name!r}: fetch session {request.session_id} is not known here "
            "(the source restarted or opened another): the next fetch is a full one"
        )
    if session.next_epoch != request.epoch:
        runtime.source_fetch_session = None
        return SessionRefused(
            f"link {config.name!r}: fetch session {request.session_id} expected epoch "
            f"{session.next_epoch}, got {request.epoch}: the next fetch is a full one"
        )
    session.next_epoch = _next_epoch(request.epoch)
    for k in request.forgotten:
        session.forget(k)
    for p in named:
        session.take(p)
    return session


def still_open(state: ClusterState, link_id: str, session: SourceFetchSession) -> bool:
    """Whether `session` is still the link's (a later request may have
    opened another, or closed it)."""
    config = state.links.by_id(link_id)
    runtime = state.links.runtime.get(config.name)
    return runtime is not None and runtime.source_fetch_session is session


__all__ = [
    "FollowerFetchSession",
    "LogSeen",
    "SessionRefused",
    "Sorted",
    "SourceFetchSession",
    "source_session",
    "still_open",
]
