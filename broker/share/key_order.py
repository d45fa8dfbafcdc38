"""Per-key ordering while sharing (``share.ordering=key``, a Shoal extension, opt-in per group).

Within one share-partition:

- at most one record per key is acquired at a time, and a key's records are first delivered in
  offset order;
- a record of a key that was delivered and is not done yet (ACQUIRED, an acknowledgement write in
  flight, or AVAILABLE again after RELEASE, lock expiry or its member leaving, in redelivery
  backoff or not) *holds* its key: only that record can be acquired for the key, so it is
  delivered again before any later record of the key;
- a record that becomes terminal (ACCEPT, REJECT, delivery-limit or any other archive) frees its
  key; the next record of the key in offset order is then acquirable;
- records with a null key (or in batches whose keys cannot be read) are not ordered.

The rule the acquisition applies is: *an AVAILABLE record is acquirable only if no record of its
key below it is still non-terminal*. Acquisition walks offsets in order from the first fetchable
one, so for records ahead of the walk the rule is kept by remembering, during one walk, every key
whose record was passed over. For records behind it (acquired, or waiting in backoff) the
share-partition keeps :class:`KeyIndex`: key hash -> offset of the record holding the key.
Entries are checked lazily against the in-flight cache (a holder that became terminal or left
the cache no longer holds), so no transition needs to update the index, and a periodic sweep
keeps its size bounded by the in-flight window.

With ordering on, acquisition works record by record (like ShareAcquireMode record_limit), so a
log batch can be split between keys; the shell hands the record keys of the batches it read
(``protocol/record_keys.py``). Keys are compared by ``hash(bytes)``: a collision only makes two
keys wait for each other, never breaks the order.

Restart: the share state does not record keys. A loaded AVAILABLE record with delivery count
>= 1 was delivered before, so it holds its key: the shell reads the keys of those records from
the log (``SharePartition.unkeyed_ranges`` / ``register_keys``) before the first keyed
acquisition. Records ACQUIRED at the crash come back as their persisted state says, as in Kafka.

Switching ``share.ordering`` applies to new acquisitions: records acquired before the switch to
``key`` do not hold their keys.
"""

from __future__ import annotations

from collections.abc import Mapping

from broker.share.inflight import InFlightCache
from broker.share.record_state import RecordState

__all__ = ["KeyIndex", "KeyMap"]

#: offset -> hash of the record's key, or None for a null key (absent offsets are keyless too).
KeyMap = Mapping[int, int | None]

_MIN_SWEEP = 1024
_ACQUIRED = RecordState.ACQUIRED
_AVAILABLE = RecordState.AVAILABLE


class KeyIndex:
    """key hash -> offset of the delivered, not yet terminal record holding that key."""

    __slots__ = ("_cache", "_sweep_at", "held")

    def __init__(self, cache: InFlightCache) -> None:
        self._cache = cache
        self.held: dict[int, int] = {}
        self._sweep_at = _MIN_SWEEP

    def blocks(self, key: int, offset: int) -> bool:
        """Whether another record holds ``key``, so the record at ``offset`` must wait (the
        hot path of acquisition: :meth:`holder` inlined)."""
        held = self.held.get(key)
        if held is None or held == offset:
            return False
        batch = self._cache.containing(held)
        if batch is not None:
            state = batch.info(held).state
            if state is _ACQUIRED or state is _AVAILABLE:
                return True
        del self.held[key]
        return False

    def __len__(self) -> int:
        return len(self.held)

    def holder(self, cache: InFlightCache, key: int) -> int | None:
        """The offset holding ``key``, or None if the key is free (stale entries dropped)."""
        offset = self.held.get(key)
        if offset is None:
            return None
        batch = cache.containing(offset)
        if batch is not None:
            state = batch.info(offset).state
            if state is _ACQUIRED or state is _AVAILABLE:
                return offset
        del self.held[key]
        return None

    def hold(self, cache: InFlightCache, key: int, offset: int) -> None:
        self.held[key] = offset
        self.maybe_sweep(cache)

    def hold_new(self, key: int, offset: int) -> None:
        """As :meth:`hold`, the caller sweeping (:meth:`maybe_sweep`) after a run of them."""
        self.held[key] = offset

    def maybe_sweep(self, cache: InFlightCache) -> None:
        """Drop stale entries once the index doubled since the last sweep (bounded memory)."""
        if len(self.held) >= self._sweep_at:
            for k in list(self.held):
                self.holder(cache, k)
            self._sweep_at = max(_MIN_SWEEP, 2 * len(self.held))

    def items(self) -> list[tuple[int, int]]:
        """(key hash, holding offset) of every entry, stale ones included."""
        return list(self.held.items())
