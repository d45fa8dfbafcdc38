"""The share-state writes of one share-partition (WriteShareGroupState, reference section 3).

:class:`StateWrites` decides what each write says and keeps the book of writes not known
durable:

- an acknowledgement's write carries a *token*; its transitions stay pending in the in-flight
  cache until the shell reports the write's outcome (``finish``), so the client is answered only
  after commit;
- a timer, release or dead-letter write is fire and forget: its in-memory change stands, and if
  the write fails (``failed``) the ranges it described, and its start offset, are carried again by
  the next write (the *dirty* ranges);
- ``written_start`` is the highest start offset in any write issued (timer/release) or committed
  (acks): when the SPSO moves past it, the persister must be told even if no batch changed.

A write describes persistable states only (AVAILABLE, ACKNOWLEDGED, ARCHIVED, ARCHIVING;
acquisition is never written), read from the cache by :meth:`InFlightCache.state_batches`.
"""

from __future__ import annotations

from broker.share.inflight import InFlightCache, merge_ranges
from persister.api import SharePartitionKey, WriteParams

__all__ = ["StateWrites"]


class StateWrites:
    """The writes of one share-partition: build them, track the pending and the failed ones."""

    __slots__ = ("_cache", "_dirty", "_next_token", "_pending", "key", "leader_epoch",
                 "state_epoch", "written_start")

    def __init__(
        self,
        cache: InFlightCache,
        key: SharePartitionKey,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
    ) -> None:
        self._cache = cache
        self.key = key
        self.state_epoch = state_epoch
        self.leader_epoch = leader_epoch
        self._next_token = 1
        # token -> (offset ranges of the pending ack, start offset its write carries, ranges of
        # earlier failed writes it carries again)
        self._pending: dict[int, tuple[list[tuple[int, int]], int, list[tuple[int, int]]]] = {}
        # Ranges whose fire-and-forget write failed: the next write describes them again.
        self._dirty: list[tuple[int, int]] = []
        self.written_start = start_offset

    @property
    def next_token(self) -> int:
        """The token the next acknowledgement write (:meth:`begin`) will carry."""
        return self._next_token

    @property
    def has_dirty(self) -> bool:
        """Ranges of failed writes wait to be sent again."""
        return bool(self._dirty)

    @property
    def pending_tokens(self) -> frozenset[int]:
        return frozenset(self._pending)

    def build(self, start: int, changed: list[tuple[int, int]], token: int | None) -> WriteParams:
        """A write for ``changed`` from the SPSO ``start`` (as it will be if ``token`` commits)."""
        new_start, complete = self._cache.scan_prefix(start, token)
        return WriteParams(
            key=self.key,
            state_epoch=self.state_epoch,
            leader_epoch=self.leader_epoch,
            start_offset=new_start,
            delivery_complete_count=complete,
            state_batches=tuple(self._cache.state_batches(changed, new_start, token)),
        )

    def committed(self, start: int, changed: list[tuple[int, int]]) -> WriteParams | None:
        """A write for already-applied changes, or None if it would tell the persister nothing
        new (no persistable batch at/after the SPSO and no start offset beyond the last sent)."""
        if not changed and not self._dirty and start <= self.written_start:
            return None  # nothing the persister does not know already (skip the scan)
        dirty, self._dirty = self._dirty, []
        write = self.build(start, merge_ranges(changed + dirty), None)
        if not write.state_batches and write.start_offset <= self.written_start:
            return None
        self.written_start = max(self.written_start, write.start_offset)
        return write

    def begin(self, start: int, changed: list[tuple[int, int]]) -> WriteParams:
        """The write of an acknowledgement whose transitions (merged ``changed``) are pending
        under :attr:`next_token`; the failed ranges ride along."""
        token = self._next_token
        self._next_token += 1
        dirty, self._dirty = self._dirty, []
        write = self.build(start, merge_ranges(changed + dirty), token)
        self._pending[token] = (changed, write.start_offset, dirty)
        return write

    def finish(self, token: int, ok: bool) -> list[tuple[int, int]]:
        """The write ``token`` committed (``ok``) or failed; returns the ranges it covered.

        Raises:
            KeyError: ``token`` is unknown or already finished (a shell bug).
        """
        ranges, write_start, dirty = self._pending.pop(token)
        if ok:
            self.written_start = max(self.written_start, write_start)
        else:
            self._dirty = merge_ranges(self._dirty + dirty)
        return ranges

    def failed(self, write: WriteParams) -> None:
        """A fire-and-forget write failed: the next write carries its ranges and start again."""
        ranges = [(b.first_offset, b.last_offset) for b in write.state_batches]
        self._dirty = merge_ranges(self._dirty + ranges)
        self.written_start = min(self.written_start, write.start_offset - 1)

    def settled(self, start: int) -> bool:
        """No write in flight, none to resend, and the persister knows the SPSO ``start``."""
        return not self._pending and not self._dirty and start <= self.written_start
