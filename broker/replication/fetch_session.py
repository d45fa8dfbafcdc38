"""Follower fetch sessions (KIP-227's incremental fetch), the leader's side. Sans-IO.

A follower's fetch names every partition it follows from this leader. Most of them, most of the
time, have nothing new: the internal topics alone put 150 partitions at replication factor 3 on
a small cluster. Without a session, both ends build, encode and decode every one of them on every
round, and a round sits on the path of every acks=all produce. A session lets a round carry only
what changed:

- **Opening.** A fetch with session id 0 and epoch 0 (``INITIAL_EPOCH``) is a full fetch: the
  leader opens a session holding every named partition with its fetch offset and epochs, answers
  every partition, and returns the new session's id. A follower's older session is closed then
  (one follower fetcher per leader, so one session per follower).
- **Incremental fetches** carry the session id and the next epoch (1, 2, ...). They name only
  partitions that are new or whose fetch offset or leader epoch changed, and list in
  ``ForgottenTopicsData`` those the follower no longer fetches here. The leader treats every
  partition of the session as fetched at its held offset, and answers only partitions with
  records, an error, or a high watermark or log start offset other than it last sent.
- **Errors.** An unknown session, or one opened by another replica, is
  FETCH_SESSION_ID_NOT_FOUND; an epoch other than the expected one is
  INVALID_FETCH_SESSION_EPOCH. Both are top-level: the follower opens a new session with a full
  fetch. Epoch -1 (``FINAL_EPOCH``) closes the named session and is a full fetch without one.

The cache holds at most ``max_sessions`` sessions (``max.incremental.fetch.session.cache.slots``;
0 switches sessions off); opening one more closes the least recently used. Only followers (CLUSTER_ACTION) reach it; consumer fetches stay sessionless.
"""

from __future__ import annotations

import random
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 2**31 - 1
TP = tuple[str, int]


@dataclass(slots=True)
class SessionPartition:
    """One partition of a session: what the follower last said, and what it was last sent."""

    topic: str | None  # None: a topic id or name this broker does not know
    topic_id: uuid.UUID | None
    partition: int
    fetch_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int
    max_bytes: int
    sent_high_watermark: int = -2  # -2: never sent (every real value differs)
    sent_log_start: int = -2
    request_topic: str | None = None  # the topic's name as the request gave it (v12)


@dataclass(slots=True)
class FetchSession:
    """One follower's session: its partitions and the epoch its next fetch must carry."""

    id: int
    replica: int
    next_epoch: int = 1
    partitions: dict[TP, SessionPartition] = field(default_factory=dict)

    @property
    def full(self) -> bool:
        """Opened by this fetch: it names every partition and is answered with all of them."""
        return self.next_epoch == INITIAL_EPOCH

    def bump(self) -> None:
        """The fetch carrying ``next_epoch`` was accepted; the following one carries the next."""
        self.next_epoch = 1 if self.next_epoch >= _MAX_EPOCH else self.next_epoch + 1


class FetchSessions:
    """The leader's sessions, by id (module doc)."""

    def __init__(self, max_sessions: int = 1000) -> None:
        self._max = max_sessions
        self._by_id: OrderedDict[int, FetchSession] = OrderedDict()
        self._rng = random.Random()

    def __len__(self) -> int:
        return len(self._by_id)

    def begin(self, replica: int, session_id: int, epoch: int
              ) -> tuple[FetchSession | None, ErrorCode]:
        """Resolve a fetch's session id and epoch (module doc). Returns:

        - (session, none): a session; the fetch is full when ``session.full`` (just opened),
          else incremental. The caller applies the fetch's partitions and then calls ``bump``;
        - (None, none): a full fetch without a session (epoch -1);
        - (None, error): answer this top-level error alone."""
        if epoch == FINAL_EPOCH:
            if session_id:
                self._close(session_id, replica)
            return None, ErrorCode.none
        if epoch == INITIAL_EPOCH:
            if session_id:
                self._close(session_id, replica)
            if self._max <= 0:  # sessions switched off: every fetch is a full one
                return None, ErrorCode.none
            return self._open(replica), ErrorCode.none
        s = self._by_id.get(session_id)
        if s is None or s.replica != replica:
            return None, ErrorCode.fetch_session_id_not_found
        if epoch != s.next_epoch:
            return None, ErrorCode.invalid_fetch_session_epoch
        self._by_id.move_to_end(session_id)
        return s, ErrorCode.none

    def _open(self, replica: int) -> FetchSession:
        for sid in [sid for sid, s in self._by_id.items() if s.replica == replica]:
            del self._by_id[sid]
        while len(self._by_id) >= self._max:
            self._by_id.popitem(last=False)
        sid = 0
        while sid == 0 or sid in self._by_id:
            sid = self._rng.randint(1, _MAX_EPOCH)
        s = FetchSession(sid, replica, next_epoch=INITIAL_EPOCH)
        self._by_id[sid] = s
        return s

    def _close(self, session_id: int, replica: int) -> None:
        s = self._by_id.get(session_id)
        if s is not None and s.replica == replica:
            del self._by_id[session_id]

    def clear(self) -> None:
        self._by_id.clear()
