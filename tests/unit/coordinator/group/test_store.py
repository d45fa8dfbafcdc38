"""GroupStore: replay at offsets, commit, revert through the undo log, the committed view, durable
member removals and the last redundant offset (what log pruning may drop)."""

from __future__ import annotations

import uuid

import pytest

from coordinator.group.share import records as r
from coordinator.group.share.store import GroupStore

T = uuid.UUID(int=0x7)


def member(g: str, m: str, topics: tuple[str, ...] = ("t",)) -> r.Record:
    return r.new_member_record(g, m, rack_id=None, client_id="c", client_host="/h",
                               subscribed_topic_names=topics)


def epoch(g: str, e: int) -> r.Record:
    return r.new_share_group_metadata_record(g, e, 0)


def initialized(g: str, parts: tuple[int, ...]) -> r.Record:
    return r.new_state_partition_metadata_record(g, initializing={}, initialized={T: ("t", parts)},
                                                 deleting={})


def feed(store: GroupStore, *records: r.Record) -> None:
    for rec in records:
        store.replay(store.end_offset, rec.key, rec.value)


def fold(records: list[r.Record]) -> GroupStore:
    """A store that replayed ``records`` from offset 0 and committed them (as a load does)."""
    store = GroupStore(journaling=False)
    feed(store, *records)
    store.commit(store.end_offset)
    return store


def test_revert_restores_groups_key_offsets_and_the_end_offset() -> None:
    base = [epoch("g", 1), member("g", "m1"), initialized("g", (0,))]
    store = fold(base)
    store.journaling = True
    before = dict(store.groups)
    redundant = store.last_redundant_offset()
    feed(store, epoch("g", 2), member("g", "m2"), initialized("g", (0, 1)),
         r.new_member_tombstone("g", "m1"), epoch("h", 1))
    assert set(store.groups) == {"g", "h"} and store.uncommitted == 5
    store.revert(3)
    assert store.groups == before
    assert store.end_offset == 3 and store.uncommitted == 0
    assert store.last_redundant_offset() == redundant
    assert store.commit(3) == []  # the reverted removal of m1 is never reported


def test_partial_revert_keeps_the_records_below() -> None:
    store = fold([epoch("g", 1)])
    store.journaling = True
    feed(store, member("g", "m1"), epoch("g", 2), member("g", "m2"))  # offsets 1, 2, 3
    store.revert(3)
    assert set(store.groups["g"].members) == {"m1"} and store.groups["g"].group_epoch == 2
    assert store.end_offset == 3
    feed(store, member("g", "m3"))  # the next record reuses offset 3
    assert set(store.groups["g"].members) == {"m1", "m3"}


def test_committed_view_lags_until_commit() -> None:
    store = fold([epoch("g", 1), member("g", "m1")])
    store.journaling = True
    committed = store.committed_groups()
    feed(store, epoch("g", 2), member("g", "m2"), epoch("new", 1))
    assert store.committed_groups() == committed
    assert store.committed_group("g") == committed["g"]
    assert store.committed_group("new") is None
    assert set(store.groups["g"].members) == {"m1", "m2"}
    store.commit(4)  # offsets 2 and 3 durable, 4 not yet
    assert set(store.committed_groups()) == {"g"}
    assert set(store.committed_groups()["g"].members) == {"m1", "m2"}
    store.commit(5)
    assert store.committed_groups() == store.groups


def test_commit_reports_durable_member_removals_in_order() -> None:
    store = fold([epoch("g", 1), member("g", "m1"), member("g", "m2")])
    store.journaling = True
    feed(store, r.new_member_tombstone("g", "m2"), r.new_member_tombstone("g", "m1"),
         r.new_member_tombstone("g", "gone"))  # an unknown member: nothing to report
    assert store.commit(4) == [("g", "m2")]
    assert store.commit(6) == [("g", "m1")]


def test_no_undo_log_while_loading() -> None:
    store = GroupStore(journaling=False)
    feed(store, epoch("g", 1), member("g", "m1"), r.new_member_tombstone("g", "m1"))
    assert store.uncommitted == 0
    assert store.commit(3) == []


def test_offsets_must_increase_and_revert_stays_above_commit() -> None:
    store = fold([epoch("g", 1), epoch("g", 2)])
    with pytest.raises(ValueError):
        store.replay(1, *_kv(epoch("g", 3)))
    with pytest.raises(ValueError):
        store.revert(1)


def _kv(rec: r.Record) -> tuple[r.RecordKey, r.RecordValue | None]:
    return rec.key, rec.value


# The offset below which records are redundant, and a store folded from the records kept
# (the suffix from that offset) equals the full fold.
REDUNDANT_CASES = [
    pytest.param([], None, id="empty"),
    pytest.param([epoch("g", 1)], 0, id="one-key"),
    pytest.param([epoch("g", 1), epoch("g", 2), epoch("g", 3)], 2, id="rewritten-key"),
    pytest.param([epoch("g", 1), member("g", "m"), epoch("g", 2)], 1, id="oldest-live-key"),
    pytest.param([epoch("g", 1), member("g", "m"), r.new_member_tombstone("g", "m"),
                  epoch("g", 2)], 3, id="tombstoned-key"),
    pytest.param([epoch("g", 1), initialized("g", (0,)), r.new_state_partition_metadata_tombstone(
        "g"), r.new_share_group_metadata_tombstone("g")], 4, id="deleted-group"),
    pytest.param([epoch("g", 1), member("g", "m"), r.new_share_group_metadata_tombstone("g"),
                  epoch("h", 1), epoch("g", 5)], 3, id="deleted-then-recreated"),
]


@pytest.mark.parametrize(("records", "expected"), REDUNDANT_CASES)
def test_last_redundant_offset(records: list[r.Record], expected: int | None) -> None:
    store = fold(records)
    assert store.last_redundant_offset() == expected
    kept = records[expected or 0:]
    assert fold(kept).groups == store.groups


def test_last_redundant_offset_uses_the_committed_view() -> None:
    """A key overwritten by an uncommitted record still needs its committed record."""
    store = fold([epoch("g", 1), member("g", "m")])  # offsets 0, 1
    store.journaling = True
    feed(store, epoch("g", 2), member("g", "m", ("t", "u")))  # offsets 2, 3 (uncommitted)
    assert store.last_redundant_offset() == 0
    store.commit(4)
    assert store.last_redundant_offset() == 2
