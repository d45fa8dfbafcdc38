"""Keyed sans-IO timer: schedule/cancel/replace, deterministic poll order, next_deadline."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.runtime.timer import Timer


def test_empty_timer_has_no_deadline() -> None:
    timer: Timer[str] = Timer()
    assert timer.next_deadline() is None
    assert timer.poll(10**12) == []
    assert len(timer) == 0


def test_poll_returns_due_keys_in_deadline_then_schedule_order() -> None:
    timer: Timer[str] = Timer()
    timer.schedule("c", 30)
    timer.schedule("a", 10)
    timer.schedule("b", 10)
    timer.schedule("d", 40)
    assert timer.next_deadline() == 10
    assert timer.poll(9) == []
    assert timer.poll(30) == ["a", "b", "c"]  # equal deadlines keep scheduling order
    assert timer.keys() == ["d"]
    assert timer.next_deadline() == 40
    assert timer.poll(40) == ["d"]
    assert timer.poll(10**9) == []


def test_reschedule_replaces_the_deadline() -> None:
    timer: Timer[str] = Timer()
    timer.schedule("session", 100)
    timer.schedule("session", 500)  # a heartbeat pushes the session deadline out
    assert timer.deadline("session") == 500
    assert timer.next_deadline() == 500
    assert timer.poll(499) == []
    assert timer.poll(500) == ["session"]
    assert "session" not in timer


def test_reschedule_earlier_and_cancel() -> None:
    timer: Timer[tuple[str, str]] = Timer()
    timer.schedule(("s", "x"), 500)
    timer.schedule(("s", "x"), 100)
    timer.schedule(("s", "y"), 200)
    assert timer.cancel(("s", "y")) is True
    assert timer.cancel(("s", "y")) is False
    assert timer.next_deadline() == 100
    assert timer.poll(1000) == [("s", "x")]
    assert timer.next_deadline() is None


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(
    st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(0, 100), st.booleans()), max_size=40),
    st.integers(0, 120),
)
def test_poll_matches_a_simple_model(ops: list[tuple[str, int, bool]], now: int) -> None:
    timer: Timer[str] = Timer()
    model: dict[str, tuple[int, int]] = {}
    for seq, (key, deadline, cancel) in enumerate(ops):
        if cancel:
            assert timer.cancel(key) == (key in model)
            model.pop(key, None)
        else:
            timer.schedule(key, deadline)
            model[key] = (deadline, seq)
    expected_next = min((d for d, _ in model.values()), default=None)
    assert timer.next_deadline() == expected_next
    due = sorted((v, k) for k, v in model.items() if v[0] <= now)
    assert timer.poll(now) == [k for _, k in due]
    assert sorted(timer.keys()) == sorted(k for k, v in model.items() if v[0] > now)
