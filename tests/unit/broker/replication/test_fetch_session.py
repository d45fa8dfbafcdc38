"""The leader's follower fetch sessions (``broker/replication/fetch_session.py``)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.replication.fetch_session import FINAL_EPOCH, INITIAL_EPOCH, FetchSessions


def test_a_full_fetch_opens_a_session_whose_next_fetch_carries_epoch_1() -> None:
    sessions = FetchSessions(10)
    s, err = sessions.begin(2, 0, INITIAL_EPOCH)
    assert err == ErrorCode.none and s is not None and s.full and s.id != 0
    s.bump()
    assert not s.full and s.next_epoch == 1
    again, err = sessions.begin(2, s.id, 1)
    assert again is s and err == ErrorCode.none


def test_wrong_epoch_unknown_id_and_another_replicas_session_are_refused() -> None:
    sessions = FetchSessions(10)
    s, _ = sessions.begin(2, 0, INITIAL_EPOCH)
    assert s is not None
    s.bump()
    assert sessions.begin(2, s.id, 2) == (None, ErrorCode.invalid_fetch_session_epoch)
    assert sessions.begin(2, s.id + 1, 1) == (None, ErrorCode.fetch_session_id_not_found)
    assert sessions.begin(3, s.id, 1) == (None, ErrorCode.fetch_session_id_not_found)
    # Refusals leave the session as it was.
    assert sessions.begin(2, s.id, 1) == (s, ErrorCode.none)


def test_final_epoch_closes_the_session_and_is_sessionless() -> None:
    sessions = FetchSessions(10)
    s, _ = sessions.begin(2, 0, INITIAL_EPOCH)
    assert s is not None
    assert sessions.begin(2, s.id, FINAL_EPOCH) == (None, ErrorCode.none)
    assert len(sessions) == 0


def test_a_replica_keeps_one_session_and_the_cache_is_bounded_least_recently_used() -> None:
    sessions = FetchSessions(2)
    first, _ = sessions.begin(1, 0, INITIAL_EPOCH)
    second, _ = sessions.begin(1, 0, INITIAL_EPOCH)
    assert first is not None and second is not None and len(sessions) == 1
    other, _ = sessions.begin(2, 0, INITIAL_EPOCH)
    assert other is not None
    second.bump()
    other.bump()
    assert sessions.begin(1, second.id, 1)[0] is second  # 1 is now the most recently used
    third, _ = sessions.begin(3, 0, INITIAL_EPOCH)
    assert third is not None and len(sessions) == 2
    assert sessions.begin(2, other.id, 1) == (None, ErrorCode.fetch_session_id_not_found)


def test_no_slots_means_every_fetch_is_a_full_one_without_a_session() -> None:
    sessions = FetchSessions(0)
    assert sessions.begin(2, 0, INITIAL_EPOCH) == (None, ErrorCode.none)
    assert len(sessions) == 0


def test_the_epoch_wraps_to_1_after_the_largest_int32() -> None:
    sessions = FetchSessions(1)
    s, _ = sessions.begin(2, 0, INITIAL_EPOCH)
    assert s is not None
    s.next_epoch = 2**31 - 1
    s.bump()
    assert s.next_epoch == 1
