"""``GroupStore``: the share groups of one ``__consumer_offsets`` partition as a fold of its records.

Concept (STYLE.md 1.3-1.4; Kafka keeps the same state in ``SnapshotRegistry``-backed timeline maps):
``replay(offset, key, value)`` folds one record into the groups (through
``share_group.apply_record``, the only place a record changes a group). The coordinator runtime
replays a write op's records as soon as the op runs, before they are durable, so later ops see
them; ``commit(offset)`` then says which of them are durable and ``revert(offset)`` undoes the ones
whose append or fsync failed. To do that the store keeps an undo log: one entry per record replayed
above the committed offset, holding what the record replaced. Groups are immutable values, so an
entry is just the previous value of one group plus the previous log offset of the record's key.

Reads that answer clients (describe, list, membership checks) use the committed view
(``committed_group``/``committed_groups``: the current groups with the undo log applied
backwards; ``coordinator/runtime/undo.py``, shared with the classic-record store of
``offsets.py``); write ops use the latest groups.

Log pruning: every record is the full value of its key (or a tombstone), so the committed state is
rebuilt by the latest record of every live key. The store tracks, per group, the offset of each
live key's latest record; ``last_redundant_offset`` is the lowest of them in the committed view (or
the committed offset when nothing is live), and the runtime may delete the log below it. Deleting a
group (a ShareGroupMetadata tombstone) drops every key of that group, as replay does.

Invariants:
- offsets passed to ``replay`` increase; ``revert`` never goes below the committed offset;
- after ``revert(o)`` the groups and key offsets equal those right after the record at ``o - 1``;
- the undo log holds exactly the records at or above the committed offset, and only while
  ``journaling`` is on (it is off while loading: the loader commits the whole log at once, and an
  undo entry per loaded record would pin every old group value in memory);
- ``removed members`` are reported by ``commit`` once the member tombstone is durable, never for a
  reverted one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coordinator.group.share import records as r
from coordinator.group.share.group import apply_record
from coordinator.runtime.undo import UndoLog

KeyOffsets = dict[r.RecordKey, int]


@dataclass(frozen=True, slots=True)
class _Undo:
    offset: int
    group_id: str
    group: Any  # the group's value before the record (None: absent)
    key: r.RecordKey
    key_offset: int | None  # the key's latest offset before the record (None: not live)
    dropped: KeyOffsets | None  # every key offset of the group, when the record deleted it

    @property
    def ident(self) -> str:
        return self.group_id

    @property
    def before(self) -> Any:
        return self.group


class GroupStore:
    """Groups by id, their key offsets, and an undo log back to the committed offset.

    Share groups by default; consumer groups (``consumer/group.py``) use the same store with
    their own ``apply`` and member-metadata key type.
    """

    __slots__ = ("groups", "journaling", "_keys", "_undo", "_removed", "end_offset",
                 "committed_offset", "_apply", "_member_key")

    def __init__(self, *, journaling: bool = True,
                 apply: Callable[[Any, Any], Any] = apply_record,
                 member_key: type[Any] = r.ShareGroupMemberMetadataKey) -> None:
        self.groups: dict[str, Any] = {}
        self._apply = apply
        self._member_key = member_key
        self.journaling = journaling
        self._keys: dict[str, KeyOffsets] = {}
        self._undo: UndoLog[_Undo] = UndoLog()
        self._removed: deque[tuple[int, str, str]] = deque()  # (offset, group id, member id)
        self.end_offset = 0  # the offset after the last replayed record
        self.committed_offset = 0

    # ------------------------------------------------------------------ the write side

    def replay(self, offset: int, key: r.RecordKey, value: r.RecordValue | None) -> None:
        """Fold the record at ``offset`` into the groups.

        Raises:
            ValueError: ``offset`` is below an offset already replayed (a caller bug).
            TypeError: ``key`` is not a share-group record key.
        """
        if offset < self.end_offset:
            raise ValueError(f"replay at offset {offset} below the end offset {self.end_offset}")
        gid = key.group_id
        before = self.groups.get(gid)
        after = self._apply(before, r.Record(key, value))
        keys = self._keys.get(gid)
        key_offset = keys.get(key) if keys is not None else None
        dropped: KeyOffsets | None = None
        if after is None:
            self.groups.pop(gid, None)
            dropped = self._keys.pop(gid, None)
        else:
            self.groups[gid] = after
            keys = self._keys.setdefault(gid, {})
            if value is None:
                keys.pop(key, None)
            else:
                keys[key] = offset
        if self.journaling:
            self._undo.append(_Undo(offset, gid, before, key, key_offset, dropped))
            if (value is None and isinstance(key, self._member_key)
                    and before is not None and key.member_id in before.members):
                self._removed.append((offset, gid, key.member_id))
        self.end_offset = offset + 1

    def commit(self, offset: int) -> list[tuple[str, str]]:
        """Records below ``offset`` are durable: forget their undo entries. Returns the
        (group id, member id) of members whose removal became durable, in log order."""
        self.committed_offset = max(self.committed_offset, offset)
        self._undo.commit(offset)
        removed = []
        while self._removed and self._removed[0][0] < offset:
            _, gid, mid = self._removed.popleft()
            removed.append((gid, mid))
        return removed

    def revert(self, offset: int) -> None:
        """Undo every record replayed at ``offset`` or later.

        Raises:
            ValueError: ``offset`` is below the committed offset.
        """
        if offset < self.committed_offset:
            raise ValueError(f"cannot revert to {offset} below the committed offset "
                             f"{self.committed_offset}")
        self._undo.revert(offset, self._restore)
        while self._removed and self._removed[-1][0] >= offset:
            self._removed.pop()
        self.end_offset = min(self.end_offset, offset)

    def _restore(self, entry: _Undo) -> None:
        gid = entry.group_id
        if entry.group is None:
            self.groups.pop(gid, None)
        else:
            self.groups[gid] = entry.group
        if entry.dropped is not None:
            self._keys[gid] = entry.dropped
        else:
            keys = self._keys.setdefault(gid, {})
            if entry.key_offset is None:
                keys.pop(entry.key, None)
            else:
                keys[entry.key] = entry.key_offset
            if not keys:
                del self._keys[gid]

    def clear(self) -> None:
        """Forget everything (the partition is unloaded)."""
        self.groups.clear()
        self._keys.clear()
        self._undo.clear()
        self._removed.clear()
        self.end_offset = self.committed_offset = 0

    # ------------------------------------------------------------------ the read side

    def committed_group(self, group_id: str) -> Any:
        """The group as of the committed offset (None if absent then)."""
        return self._undo.committed(group_id, self.groups.get(group_id))

    def committed_groups(self) -> dict[str, Any]:
        """Every group as of the committed offset."""
        return self._undo.committed_view(self.groups)

    @property
    def uncommitted(self) -> int:
        """Records replayed but not committed yet (undo log length)."""
        return len(self._undo)

    def last_redundant_offset(self) -> int | None:
        """The lowest offset the committed state still needs (see module doc); None when
        nothing is committed."""
        keys = {gid: dict(offsets) for gid, offsets in self._keys.items()}
        for entry in self._undo.newest_first():
            if entry.dropped is not None:
                keys[entry.group_id] = dict(entry.dropped)
                continue
            group_keys = keys.setdefault(entry.group_id, {})
            if entry.key_offset is None:
                group_keys.pop(entry.key, None)
            else:
                group_keys[entry.key] = entry.key_offset
        live = [o for offsets in keys.values() for o in offsets.values()]
        if live:
            return min(live)
        return self.committed_offset or None
