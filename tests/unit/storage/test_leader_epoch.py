"""storage/leader_epoch.py: the leader-epoch cache's rules (Kafka ``LeaderEpochFileCache``) and
its checkpoint file (Kafka's text format)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import leader_epoch as le
from storage.leader_epoch import EpochEntry as E
from storage.leader_epoch import LeaderEpochCache


def test_assign_appends_newer_epochs_and_ignores_repeats() -> None:
    entries = le.assign((), 0, 0)
    entries = le.assign(entries, 0, 5)  # the same epoch further on: nothing new
    entries = le.assign(entries, 2, 10)
    assert entries == (E(0, 0), E(2, 10))


def test_assign_same_epoch_at_a_lower_offset_moves_it() -> None:
    assert le.assign((E(0, 0), E(2, 10)), 2, 7) == (E(0, 0), E(2, 7))


def test_assign_older_epoch_drops_the_conflicting_newer_entries() -> None:
    # A follower that appends an older leader's batch after newer ones (Kafka keeps the cache
    # monotonic by dropping what the new entry contradicts).
    assert le.assign((E(1, 0), E(3, 10), E(5, 20)), 4, 15) == (E(1, 0), E(3, 10), E(4, 15))
    assert le.assign((E(1, 0), E(3, 10)), 4, 5) == (E(1, 0), E(4, 5))


def test_assign_refuses_negative_values() -> None:
    with pytest.raises(ValueError):
        le.assign((), -1, 0)
    with pytest.raises(ValueError):
        le.assign((), 0, -3)


@pytest.mark.parametrize(("epoch", "expected"), [
    (-1, (-1, -1)),      # undefined epoch
    (5, (5, 100)),       # the latest epoch ends at the log end offset
    (6, (-1, -1)),       # above every known epoch
    (3, (3, 40)),        # known, ends where the next starts
    (4, (3, 40)),        # unknown between two: the floor epoch, ending at the next start
    (0, (0, 10)),        # below every known epoch: the first start offset
])
def test_end_offset_for_follows_kafka(epoch: int, expected: tuple[int, int]) -> None:
    entries = (E(1, 10), E(3, 20), E(5, 40))
    assert le.end_offset_for(entries, epoch, 100) == expected


def test_end_offset_for_an_empty_cache_is_undefined() -> None:
    assert le.end_offset_for((), 0, 100) == (-1, -1)


def test_truncate_from_end_drops_entries_at_or_after_the_offset() -> None:
    entries = (E(1, 0), E(2, 10), E(4, 20))
    assert le.truncate_from_end(entries, 20) == (E(1, 0), E(2, 10))
    assert le.truncate_from_end(entries, 11) == (E(1, 0), E(2, 10))
    assert le.truncate_from_end(entries, 10) == (E(1, 0),)
    assert le.truncate_from_end(entries, 25) is entries


def test_truncate_from_start_moves_the_epoch_holding_the_new_start() -> None:
    entries = (E(1, 0), E(2, 10), E(4, 20))
    assert le.truncate_from_start(entries, 15) == (E(2, 15), E(4, 20))
    assert le.truncate_from_start(entries, 20) == (E(4, 20),)
    assert le.truncate_from_start(entries, 0) is entries
    assert le.truncate_from_start((E(3, 5),), 2) == (E(3, 5),)


def test_checkpoint_file_has_kafkas_text_format(tmp_path: Path) -> None:
    cache = LeaderEpochCache.load(tmp_path)
    assert cache.latest_epoch == -1
    assert cache.replace((E(3, 0), E(5, 1200)))
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n2\n3 0\n5 1200\n"
    assert not (tmp_path / "leader-epoch-checkpoint.tmp").exists()
    assert LeaderEpochCache.load(tmp_path).entries == (E(3, 0), E(5, 1200))
    assert not cache.replace((E(3, 0), E(5, 1200)))  # unchanged: nothing written


@pytest.mark.parametrize("text", ["", "1\n0\n", "0\n2\n3 0\n", "0\n1\n3\n", "0\n2\n5 0\n3 10\n",
                                  "0\n1\n-1 0\n", "0\nx\n"])
def test_malformed_checkpoint_starts_empty(tmp_path: Path, text: str,
                                           caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "leader-epoch-checkpoint").write_text(text)
    assert LeaderEpochCache.load(tmp_path).entries == ()
    assert "leader-epoch-checkpoint is unusable" in caplog.text


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 200)), max_size=30),
       st.integers(0, 250), st.integers(0, 250))
def test_entries_stay_strictly_increasing(ops: list[tuple[int, int]], end: int,
                                          start: int) -> None:
    entries: le.Entries = ()
    for epoch, offset in ops:
        entries = le.assign(entries, epoch, offset)
        assert entries[-1].epoch == epoch
        assert entries[-1].start_offset <= offset
    for cut in (le.truncate_from_end(entries, end), le.truncate_from_start(entries, start)):
        assert all(a.epoch < b.epoch and a.start_offset < b.start_offset
                   for a, b in zip(cut, cut[1:], strict=False))
        assert le.decode(le.encode(cut).decode()) == cut
