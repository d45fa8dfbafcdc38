"""``UndoLog``: what each replayed but not yet committed record replaced, back to the committed
offset.

Concept (STYLE.md 1.4; Kafka keeps the same history in ``SnapshotRegistry`` timeline structures):
the coordinator runtime replays a write op's records as soon as the op runs, before they are
durable, so later ops see them. A store that folds records by id (a group id, a record key)
appends one entry per such record: the record's ``offset``, the ``ident`` it changed and the value
it had ``before`` (None: absent), plus whatever else that store needs to restore itself.
``commit(offset)`` forgets the entries of durable records, ``revert(offset, restore)`` hands the
entries at or above ``offset`` back to the store newest first, and the committed view of an id is
the ``before`` of its oldest entry (or its current value when it has none).

Invariants: entries are appended in increasing offset order; the log holds exactly the entries of
records replayed at or above the last committed offset (while the store journals at all).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterator
from typing import Any, Generic, Protocol, TypeVar


class UndoEntry(Protocol):
    """One replayed record: its offset, what it changed and that thing's value before."""

    @property
    def offset(self) -> int: ...

    @property
    def ident(self) -> Hashable: ...

    @property
    def before(self) -> Any: ...


E = TypeVar("E", bound=UndoEntry)


class UndoLog(Generic[E]):
    """Undo entries, oldest first (see the module docstring)."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: deque[E] = deque()

    def append(self, entry: E) -> None:
        self._entries.append(entry)

    def commit(self, offset: int) -> None:
        """Records below ``offset`` are durable: forget their entries."""
        entries = self._entries
        while entries and entries[0].offset < offset:
            entries.popleft()

    def revert(self, offset: int, restore: Callable[[E], None]) -> None:
        """Hand every entry at ``offset`` or later to ``restore``, newest first, and drop it."""
        entries = self._entries
        while entries and entries[-1].offset >= offset:
            restore(entries.pop())

    def committed(self, ident: Hashable, current: Any) -> Any:
        """The value of ``ident`` as of the committed offset, given its ``current`` value."""
        for entry in self._entries:  # oldest first: the first entry of the id holds its value
            if entry.ident == ident:
                return entry.before
        return current

    def committed_view(self, current: dict[Any, Any]) -> dict[Any, Any]:
        """A copy of ``current`` (values by id) as of the committed offset."""
        view = dict(current)
        seen: set[Hashable] = set()
        for entry in self._entries:
            if entry.ident in seen:
                continue
            seen.add(entry.ident)
            if entry.before is None:
                view.pop(entry.ident, None)
            else:
                view[entry.ident] = entry.before
        return view

    def oldest_first(self) -> Iterator[E]:
        return iter(self._entries)

    def newest_first(self) -> Iterator[E]:
        return reversed(self._entries)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
