"""Share sessions: per (group, member) on this broker, the partitions it fetches and its epoch.

Epoch rules (KIP-932; reference section 4): a ShareFetch with epoch 0 replaces any session of the
same key (without releasing records) and expects epoch 1 next; epoch n > 0 must match the session;
each successful request increments it (2^31-1 wraps to 1); -1 closes it. A session also dies with
the TCP connection that created it, and with its member: when the member leaves its group or is
fenced, and when the cache is full and a live member needs the slot of a departed one.
``group.share.max.share.sessions`` bounds the cache.

Pure bookkeeping: no I/O and no clock. The shell releases records when a session closes.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

INT32_MAX = 2**31 - 1

TopicIdPartition = tuple[uuid.UUID, int]


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    connection_id: int
    epoch: int = 1
    partitions: dict[TopicIdPartition, None] = field(default_factory=dict)  # ordered set
    rotation: int = 0

    def bump(self) -> None:
        self.epoch = 1 if self.epoch >= INT32_MAX else self.epoch + 1


class ShareSessionCache:
    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self._sessions: dict[tuple[str, str], ShareSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def open(self, group_id: str, member_id: str, connection_id: int,
             partitions: list[TopicIdPartition]) -> ShareSession | None:
        """Epoch 0: replace or create the session; None when the cache is full."""
        key = (group_id, member_id)
        if key not in self._sessions and len(self._sessions) >= self.max_sessions:
            return None
        s = ShareSession(group_id, member_id, connection_id)
        for tp in partitions:
            s.partitions[tp] = None
        self._sessions[key] = s
        return s

    def check(self, group_id: str, member_id: str, epoch: int) -> tuple[ErrorCode, ShareSession | None]:
        """Validate a request's epoch (> 0 or -1) against the cache."""
        s = self._sessions.get((group_id, member_id))
        if s is None:
            return ErrorCode.share_session_not_found, None
        if epoch != -1 and epoch != s.epoch:
            return ErrorCode.invalid_share_session_epoch, None
        return ErrorCode.none, s

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.pop((group_id, member_id), None)

    def close_connection(self, connection_id: int) -> list[ShareSession]:
        """Remove and return every session created on a connection that went away."""
        gone = [s for s in self._sessions.values() if s.connection_id == connection_id]
        for s in gone:
            del self._sessions[(s.group_id, s.member_id)]
        return gone

    def departed(self, is_member: Callable[[str, str], bool]) -> ShareSession | None:
        """The oldest session whose member is no longer in its group, if any (the one a new
        session of a live member may take the place of when the cache is full)."""
        for s in self._sessions.values():
            if not is_member(s.group_id, s.member_id):
                return s
        return None

    def group_has_sessions(self, group_id: str) -> bool:
        return any(g == group_id for g, _ in self._sessions)
