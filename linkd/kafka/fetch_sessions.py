"""Incremental fetch sessions (KIP-227), as a Kafka broker keeps them.

A consumer of many partitions would send all of them in every Fetch and get
all of them back. With a session, the broker remembers the partitions a
fetcher reads and where; each later (incremental) request names only the
partitions that changed (new, moved on, or `forgotten_topics_data`), and the
answer holds only partitions with something to say: records, an error, a
diverging epoch, or a high watermark, last stable offset or log start offset
that moved since the last answer of the session.

Rules (Kafka's FetchManager and FetchSession):
- session id 0, epoch -1: no session, a full fetch (sessionless).
- epoch 0 (with any session id): a full fetch that starts a new session (an
  old one of that id is closed); its id comes back in the answer. When the
  cache is full, the least recently used session makes room.
- session id N, epoch E > 0: an incremental fetch of session N, which must
  expect epoch E (else INVALID_FETCH_SESSION_EPOCH; an unknown N is
  FETCH_SESSION_ID_NOT_FOUND); its epoch then moves to E + 1.
- session id N, epoch -1: closes session N, then a full sessionless fetch.
- session id 0 with an epoch above 0: INVALID_FETCH_SESSION_EPOCH.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode as K

FINAL_EPOCH = -1
INITIAL_EPOCH = 0
DEFAULT_SESSION_SLOTS = 1000  # Kafka's max.incremental.fetch.session.cache.slots

# A partition of a session: (the topic's key in requests: id or name, partition).
PartitionKey = tuple[Any, int]


@dataclass
class FetchSession:
    id: int
    epoch: int  # the epoch its next incremental request must carry
    # The partitions it reads, as last requested (kio partition entries).
    partitions: OrderedDict[PartitionKey, Any] = field(default_factory=OrderedDict)
    # What its last answer said of each partition: (HW, LSO, log start).
    reported: dict[PartitionKey, tuple[int, int, int]] = field(default_factory=dict)

    def update(self, topics: Any, forgotten: Any, by_id: bool) -> None:
        for t in topics:
            key = t.topic_id if by_id else t.topic
            for p in t.partitions:
                self.partitions[(key, int(p.partition))] = p
        for t in forgotten or ():
            key = t.topic_id if by_id else t.topic
            for index in t.partitions:
                self.partitions.pop((key, int(index)), None)
                self.reported.pop((key, int(index)), None)

    def worth_answering(self, key: PartitionKey, answer: dict[str, Any]) -> bool:
        """Whether an incremental answer includes this partition (and, if so,
        remembers what it said)."""
        now = (
            int(answer.get("high_watermark", -1)),
            int(answer.get("last_stable_offset", -1)),
            int(answer.get("log_start_offset", -1)),
        )
        changed = (
            bool(answer.get("records"))
            or int(answer.get("error_code", 0)) != 0
            or "diverging_epoch" in answer
            or self.reported.get(key) != now
        )
        if changed:
            self.reported[key] = now
        return changed


@dataclass(frozen=True, slots=True)
class FetchPlan:
    """What one Fetch request reads, under which session."""

    error: int  # a Kafka error code for the whole request, 0 if none
    session_id: int  # what the answer says (0: no session)
    topics: list[tuple[Any, list[Any]]]  # (topic key, kio partition entries), in order
    session: FetchSession | None  # the session the answer reports to
    incremental: bool  # only partitions worth answering are answered


class FetchSessionCache:
    def __init__(self, slots: int = DEFAULT_SESSION_SLOTS) -> None:
        assert slots > 0
        self.slots = slots
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def plan(self, req: Any, by_id: bool) -> FetchPlan:
        session_id = int(getattr(req, "session_id", 0) or 0)
        epoch = int(getattr(req, "session_epoch", FINAL_EPOCH))
        full = [(t.topic_id if by_id else t.topic, list(t.partitions)) for t in req.topics]
        if epoch == FINAL_EPOCH:
            self._sessions.pop(session_id, None)
            return FetchPlan(0, 0, full, None, False)
        if epoch == INITIAL_EPOCH:
            self._sessions.pop(session_id, None)
            session = self._new_session()
            session.update(req.topics, (), by_id)
            return FetchPlan(0, session.id, full, session, False)
        if session_id == 0:
            return FetchPlan(int(K.invalid_fetch_session_epoch), 0, [], None, False)
        found = self._sessions.get(session_id)
        if found is None:
            return FetchPlan(int(K.fetch_session_id_not_found), 0, [], None, False)
        if found.epoch != epoch:
            return FetchPlan(int(K.invalid_fetch_session_epoch), 0, [], None, False)
        self._sessions.move_to_end(session_id)
        found.update(req.topics, getattr(req, "forgotten_topics_data", ()), by_id)
        found.epoch += 1
        topics: OrderedDict[Any, list[Any]] = OrderedDict()
        for (key, _index), p in found.partitions.items():
            topics.setdefault(key, []).append(p)
        return FetchPlan(0, found.id, list(topics.items()), found, True)

    def _new_session(self) -> FetchSession:
        while len(self._sessions) >= self.slots:
            self._sessions.popitem(last=False)
        # Random ids, as Kafka's: a fetcher's session id from before a restart
        # is then unknown here, not some other fetcher's session.
        session_id = 0
        while session_id == 0 or session_id in self._sessions:
            session_id = 1 + secrets.randbelow(2**31 - 1)
        session = FetchSession(session_id, INITIAL_EPOCH + 1)
        self._sessions[session.id] = session
        return session


__all__ = ["FetchPlan", "FetchSession", "FetchSessionCache"]
