"""The link driver's rules (linkd/core/link_driver.py), one lane at a time:
the test answers each request a lane yields, as a shell would, and looks at
what the lane asks next. The transcripts (tests/transcripts/driver_*.txt)
tell the same rules as stories through both shells."""

from __future__ import annotations

import copy
from collections.abc import Callable, Generator

from linkd.core import link_admin as admin
from linkd.core import link_driver as driver
from linkd.core import link_rounds as rounds
from linkd.core import records as rb
from linkd.core.cluster import AppendBatch, ClusterState, Effect
from linkd.core.effects import journal
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.link_calls import (
    Answered,
    Applied,
    Dial,
    Drop,
    FetchGroupOffsets,
    GroupOffsets,
    Idle,
    LaneRequest,
    ListSourceTopics,
    OpenSession,
    Receive,
    ReplicaFetch,
    ReplicaPush,
    Send,
    ServeFetch,
    SessionOpened,
    Ticket,
    WakeLanes,
)
from linkd.core.link_driver import Lane
from linkd.core.links import Leader, LinkLimits, LinkTable, Mapping, MappingType
from linkd.core.namespaces import ResourceType
from linkd.core.requests import Execute, Note, Now, Sleep

NOW = 1_000


def _leader() -> ClusterState:
    """A leads orders- and the groups under g- on link ab, and holds five
    one-record batches of orders-1 and a group's commit."""
    STORED.clear()
    a = ClusterState("A")
    a.links = LinkTable("A", LinkLimits())
    _apply(a, journal(a.namespaces.create(ResourceType.TOPIC, "orders-", False)))
    _apply(a, journal(a.namespaces.create(ResourceType.GROUP, "g-", False)))
    config = a.links.new_config("ab", "id-1", "B", "b:1", "", "local_dials", "", NOW)
    _apply(a, journal(a.links.store(config, NOW)))
    for kind, prefix in ((MappingType.TOPIC, "orders-"), (MappingType.GROUP, "g-")):
        mapping = Mapping(kind, prefix, prefix, Leader.LOCAL, True, (0, 0, ""))
        _apply(a, admin.put_mapping(a, "ab", admin.versioned(a, mapping, NOW), NOW))
    _topic, effects = a.create_topic("orders-1", 1, {}, "t-1")
    _apply(a, effects)
    for i in range(5):
        batch = rb.build_batch([rb.RecordSpec(None, b"x", NOW + i)])
        _apply(a, list(a.produce("orders-1", 0, batch, "", NOW).effects))
    _apply(a, a.commit_group_offsets("g-1", -1, "", {("orders-1", 0): (3, "", -1)}, NOW))
    return a


def _follower(*topics: str) -> ClusterState:
    """B follows orders- from A on link ab (its namespace reserved), holding
    `topics` (one partition each) already."""
    b = ClusterState("B")
    b.links = LinkTable("B", LinkLimits())
    for name in topics:
        _topic, effects = b.create_topic(name, 1, {}, f"t-{name}")
        _apply(b, effects)
    _apply(b, journal(b.namespaces.create(ResourceType.TOPIC, "orders-", True)))
    config = b.links.new_config("ab", "id-1", "A", "a:1", "", "local_dials", "", NOW)
    _apply(b, journal(b.links.store(config, NOW)))
    mapping = Mapping(MappingType.TOPIC, "orders-", "orders-", Leader.REMOTE, True, (0, 0, ""))
    _apply(b, admin.put_mapping(b, "ab", admin.versioned(b, mapping, NOW), NOW))
    return b


STORED: dict[tuple[str, int], list[AppendBatch]] = {}


def _apply(state: ClusterState, effects: list[Effect]) -> None:
    for effect in effects:
        if isinstance(effect, AppendBatch):
            STORED.setdefault((state.cluster_id, effect.header.base_offset), []).append(effect)
            state.mark_durable("orders-1", effect.partition, effect.header.next_offset)


def _reader(state: ClusterState) -> rounds.ReplicaReader:
    def read(topic_id: str, p: int, start: int, end: int, max_bytes: int) -> tuple[bytes, int]:
        batches = [
            e.batch for (cid, base), es in sorted(STORED.items()) for e in es
            if cid == state.cluster_id and start <= base < end
        ]  # fmt: skip
        data = batches[0] if batches else b""  # one batch a read (a small max bytes)
        return data, len(data)

    return read


class Script:
    """Answers a lane's requests; the clock moves only when told."""

    def __init__(self, state: ClusterState, lane: Generator[LaneRequest, object, None]) -> None:
        self.state, self.lane, self.now = state, lane, NOW
        self.sent: list[ReplicaPush] = []
        self.sleeps: list[int] = []

    def until(self, stop: Callable[[LaneRequest], bool], answer: Callable[[LaneRequest], object]
              ) -> LaneRequest:  # fmt: skip
        """Runs the lane until it yields a request `stop` accepts."""
        reply: object = None
        for _ in range(1_000):
            request = self.lane.send(reply)
            if stop(request):
                return request
            reply = self._common(request, answer)
        raise AssertionError("the lane never got there")

    def _common(self, request: LaneRequest, answer: Callable[[LaneRequest], object]) -> object:
        if isinstance(request, Now):
            return self.now
        if isinstance(request, Execute):
            _apply(self.state, list(request.effects))
            return self.now
        if isinstance(request, Note | WakeLanes | Applied | Drop):
            return None
        if isinstance(request, Dial) and isinstance(request.call, OpenSession):
            return Answered(SessionOpened())
        if isinstance(request, Sleep):
            self.sleeps.append(request.ms)
            self.now += request.ms
            return self.now
        return answer(request)


def test_a_pushed_pipeline_carries_group_offsets_each_discovery_interval() -> None:
    """N5: a pipeline lasts as long as the leader has more to send at once;
    its read-ahead pushes carry the group offsets too once the discovery
    interval has passed, not only its first push."""
    a = _leader()
    d = driver.LinkDriver(a, "ab", lambda: "id", driver.DriverSettings(partition_max_bytes=1))
    d.handshaken = True
    d.last_handshake_ms = NOW
    d.next_fetch = rounds.FetchRequest(
        "id-1", (rounds.PartitionFetch("orders-1", 0, 0, -1),), {}, NOW
    )
    script = Script(a, d.lane(Lane.PUSH))
    tickets = 0

    def answer(request: LaneRequest) -> object:
        nonlocal tickets
        if isinstance(request, ServeFetch):
            serving = driver.hold_fetch(
                a, request.link_id, request.parts, 0, 1, _reader(a), d.settings,
                from_remote=False, acknowledges=request.acknowledges,
            )  # fmt: skip
            return Answered(_run(serving, script.now))
        if isinstance(request, Send) and isinstance(request.call, ReplicaPush):
            script.sent.append(request.call)
            tickets += 1
            return Ticket(tickets)
        if isinstance(request, Receive):
            script.now += 600  # the follower takes its time: a discovery interval passes
            nxt = rounds.FetchRequest("id-1", (), {}, script.now)
            return Answered(nxt)
        raise AssertionError(request)

    script.until(lambda r: isinstance(r, Receive) and r.ticket.number == 2, answer)
    offsets = [len(push.push.group_offsets) for push in script.sent]
    # The first push of the pipeline carries them (never sent yet), the next
    # two leave in the same instant, and the fourth after 600 ms more.
    assert offsets == [1, 0, 0, 1]
    assert [push.push.data is not None for push in script.sent] == [True] * 4


def test_a_lane_refused_again_and_again_backs_off_to_the_maximum_then_resets() -> None:
    """The back-off doubles with each failure in a row, refusals included,
    and starts again from the minimum only after a step succeeded."""
    b = _follower("orders-1")
    d = driver.LinkDriver(b, "ab", lambda: "id")
    d.handshaken = True
    d.last_handshake_ms = d.last_discovery_ms = NOW
    script = Script(b, d.lane(Lane.PULL))
    refusals = 0

    def answer(request: LaneRequest) -> object:
        nonlocal refusals
        assert isinstance(request, Dial) and isinstance(request.call, ReplicaFetch)
        refusals += 1
        if refusals == 8:  # the remote answers, once
            return Answered(rounds.FetchAnswer([]))
        return Answered(None, ClusterError(ErrorCode.UNKNOWN_LINK, "ab", "refused"))

    def tenth(_request: LaneRequest) -> bool:
        return refusals == 9 and len(script.sleeps) == 8

    script.until(tenth, answer)
    assert script.sleeps == [100, 200, 400, 800, 1_600, 2_000, 2_000, 100]


def _run(procedure: Generator[LaneRequest, object, rounds.FetchAnswer], now: int
         ) -> rounds.FetchAnswer:  # fmt: skip
    reply: object = None
    while True:
        try:
            request = procedure.send(reply)
        except StopIteration as stop:
            return stop.value
        reply = now if isinstance(request, Now) else None


def test_a_namespace_detached_while_its_topics_were_listed__makes_no_follower_topic() -> None:
    """Seed 22466 on 2 clusters: B listed the topics of a namespace it
    followed; before the answer came, the source's detach reached B (its
    mapping detached, no topic yet to record the end in). The answer, read
    under the configuration the discovery began with, made the follower topic
    anyway: a topic no round would fill and no provenance said had left the
    link, so the source's records never came and nothing said so. The
    answer is now read under the configuration as it is when it arrives."""
    b = _follower()
    d = driver.LinkDriver(b, "ab", lambda: "id")
    d.handshaken = True
    d.last_handshake_ms = NOW
    script = Script(b, d.lane(Lane.CONTROL))  # (discovery is the control lane's)

    def answer(request: LaneRequest) -> object:
        assert isinstance(request, Dial) and isinstance(request.call, ListSourceTopics), request
        # The remote's view merged in: a new configuration object, detached.
        told = copy.deepcopy(b.links.get("ab"))
        detached = Mapping(MappingType.TOPIC, "orders-", "orders-", Leader.REMOTE, False,
                           (0, 0, ""))  # fmt: skip
        told.mappings[detached.key] = admin.versioned(b, detached, NOW)
        _apply(b, journal(b.links.store(told, NOW)))
        listed = rounds.SourceTopic("orders-1", 1, {})
        return Answered(rounds.SourceNamespace("orders-", (listed,), ()))

    def listed_and_on(r: LaneRequest) -> bool:
        fetch = isinstance(r, Dial) and isinstance(r.call, ReplicaFetch)
        return fetch or isinstance(r, Idle | Sleep)

    script.until(listed_and_on, answer)
    assert "orders-1" not in b.topics


def test_a_discovery_asks_for_the_offsets_of_the_group_namespaces_followed_as_it_asks() -> None:
    """The group namespaces whose offsets a discovery asks for are those the
    link follows once the topic listings are answered, not when it began: a
    group namespace detached meanwhile (the remote's detach, told while the
    listing was answered) is not asked for."""
    b = _follower()
    _apply(b, journal(b.namespaces.create(ResourceType.GROUP, "g-", True)))
    groups = Mapping(MappingType.GROUP, "g-", "g-", Leader.REMOTE, True, (0, 0, ""))
    _apply(b, admin.put_mapping(b, "ab", admin.versioned(b, groups, NOW), NOW))
    d = driver.LinkDriver(b, "ab", lambda: "id")
    d.handshaken = True
    d.last_handshake_ms = NOW
    script = Script(b, d.lane(Lane.CONTROL))
    asked: list[str] = []

    def answer(request: LaneRequest) -> object:
        assert isinstance(request, Dial), request
        if isinstance(request.call, FetchGroupOffsets):
            asked.append(request.call.prefix)
            return Answered(GroupOffsets(()))
        assert isinstance(request.call, ListSourceTopics), request
        told = copy.deepcopy(b.links.get("ab"))
        detached = Mapping(MappingType.GROUP, "g-", "g-", Leader.REMOTE, False, (0, 0, ""))
        told.mappings[detached.key] = admin.versioned(b, detached, NOW)
        _apply(b, journal(b.links.store(told, NOW)))
        return Answered(rounds.SourceNamespace("orders-", (), ()))

    script.until(lambda r: isinstance(r, Idle | Sleep), answer)
    assert asked == []
