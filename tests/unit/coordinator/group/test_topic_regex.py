"""SubscribedTopicRegex through RE2: whole-name matching as Java's ``matches()``, internal topics
excluded, invalid patterns rejected with an operator-readable reason, patterns that are
catastrophic for a backtracking engine matched in linear time, the compiled-pattern cache
bounded."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from coordinator.group import topic_regex
from coordinator.group.topic_regex import (
    CACHE_SIZE,
    MAX_PATTERN_LENGTH,
    InvalidTopicRegex,
    TopicRegex,
    cache_info,
    clear_cache,
    compile_topic_regex,
    matching_topics,
)


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    clear_cache()
    yield
    clear_cache()


MATCH_CASES = [
    ("prefix", "orders-.*", "orders-eu", True),
    ("prefix-needs-whole-name", "orders", "orders-eu", False),
    ("not-a-search", "eu", "orders-eu", False),
    ("alternation-is-whole", "a|b", "ab", False),
    ("alternation", "orders|payments", "payments", True),
    ("dot-is-any-char", "orders.eu", "orders-eu", True),
    ("escaped-dot", r"orders\.eu", "orders-eu", False),
    ("char-class", "t[0-9]+", "t42", True),
    ("char-class-rejects", "t[0-9]+", "t4x", False),
    ("case-sensitive", "Orders.*", "orders-eu", False),
    ("inline-flag", "(?i)Orders.*", "orders-eu", True),
    ("anchors-allowed", "^orders-.*$", "orders-eu", True),
    ("empty-name", ".*", "", True),
]


@pytest.mark.parametrize(
    ("pattern", "name", "expected"), [c[1:] for c in MATCH_CASES], ids=[c[0] for c in MATCH_CASES]
)
def test_whole_name_match_like_java_matches(pattern: str, name: str, expected: bool) -> None:
    assert compile_topic_regex(pattern).matches(name) is expected


def test_matching_topics_excludes_internal_topics() -> None:
    names = [
        "__consumer_offsets",
        "__share_group_state",
        "__transaction_state",
        "__my_own",  # not internal: a user topic with underscores
        "orders",
        "payments",
    ]
    assert matching_topics(compile_topic_regex(".*"), names) == frozenset(
        {"__my_own", "orders", "payments"}
    )
    assert matching_topics(compile_topic_regex("__.*"), names) == frozenset({"__my_own"})
    assert matching_topics(compile_topic_regex("nothing"), names) == frozenset()


INVALID_CASES = [
    ("unbalanced-paren", "orders-(", "missing )"),
    ("bad-class", "t[0-9", "missing ]"),
    ("dangling-repeat", "*orders", "no argument for repetition operator"),
    ("backreference", r"(a)\1", "invalid escape sequence"),
    ("lookahead", "(?=orders)orders", "invalid perl operator"),
    ("huge-repeat", "a{1001}", "invalid repetition size"),
]


@pytest.mark.parametrize(
    ("pattern", "reason"), [c[1:] for c in INVALID_CASES], ids=[c[0] for c in INVALID_CASES]
)
def test_invalid_syntax_names_pattern_and_reason(pattern: str, reason: str) -> None:
    with pytest.raises(InvalidTopicRegex) as info:
        compile_topic_regex(pattern)
    message = str(info.value)
    assert repr(pattern) in message
    assert reason in message
    assert "RE2" in message
    assert isinstance(info.value, ValueError)


def test_empty_pattern_is_invalid() -> None:
    with pytest.raises(InvalidTopicRegex, match="empty"):
        compile_topic_regex("")


def test_over_length_pattern_is_invalid_at_the_boundary() -> None:
    assert compile_topic_regex("a" * MAX_PATTERN_LENGTH).matches("a" * MAX_PATTERN_LENGTH)
    with pytest.raises(InvalidTopicRegex, match=f"{MAX_PATTERN_LENGTH + 1} characters long"):
        compile_topic_regex("a" * (MAX_PATTERN_LENGTH + 1))


def test_pattern_too_large_for_the_memory_bound_is_invalid() -> None:
    # Short but expands to a huge program (1000 copies of every Unicode letter range).
    with pytest.raises(InvalidTopicRegex, match="too large to compile"):
        compile_topic_regex(r"\pL{1000}")


def test_long_alternation_of_names_compiles() -> None:
    names = [f"topic-{i:04d}" for i in range(300)]
    regex = compile_topic_regex("|".join(names))
    assert matching_topics(regex, [*names, "topic-9999"]) == frozenset(names)


@pytest.mark.parametrize(
    ("pattern", "subject"),
    [("(a+)+b", "a" * 100_000), ("(a|aa)*c", "a" * 100_000), ("(.*a){20}", "a" * 100_000 + "!")],
    ids=["nested-plus", "overlapping-alternation", "repeated-star"],
)
def test_catastrophic_backtracking_patterns_finish_fast(pattern: str, subject: str) -> None:
    # Exponential in a backtracking engine (Python re would not finish); linear in RE2.
    regex = compile_topic_regex(pattern)
    start = time.perf_counter()
    assert regex.matches(subject) is False
    assert matching_topics(regex, [subject] * 10) == frozenset()
    assert time.perf_counter() - start < 1.0


def test_same_pattern_compiles_once() -> None:
    first = compile_topic_regex("orders-.*")
    assert compile_topic_regex("orders-.*") is first
    assert first == TopicRegex("orders-.*", None) and first.pattern == "orders-.*"
    assert cache_info() == (1, CACHE_SIZE)


def test_cache_is_bounded_least_recently_used_evicted() -> None:
    keep = compile_topic_regex("keep-.*")
    for i in range(CACHE_SIZE + 50):
        compile_topic_regex(f"t{i}-.*")
        compile_topic_regex("keep-.*")  # used all the time: never evicted
    assert cache_info() == (CACHE_SIZE, CACHE_SIZE)
    assert compile_topic_regex("keep-.*") is keep
    assert "t0-.*" not in topic_regex._cache  # the oldest unused pattern went first


def test_invalid_patterns_are_not_cached() -> None:
    for _ in range(2):
        with pytest.raises(InvalidTopicRegex):
            compile_topic_regex("(")
    assert cache_info() == (0, CACHE_SIZE)
