"""Safe topic regular expressions for consumer-group regex subscriptions (KIP-848).

Concept: a ConsumerGroupHeartbeat may carry ``SubscribedTopicRegex``, a pattern from an untrusted
client that the coordinator matches against every topic name. Kafka compiles it with RE2/J; we use
google-re2 for the same reason: matching time is linear in the name's length whatever the
pattern, so ``(a+)+b`` cannot stall the coordinator the way Python's backtracking ``re`` would.
Python ``re`` must never see these patterns. RE2 syntax is what Kafka's users write already
(no backreferences, no lookaround; those patterns are rejected, as RE2/J rejects them).

Invariants:
- A ``TopicRegex`` matches a topic when the whole name matches (Java's
  ``Pattern.matcher(topic).matches()``): ``foo`` does not match ``foobar``.
- Compilation is bounded: patterns over ``MAX_PATTERN_LENGTH`` characters and patterns whose
  compiled program would exceed ``MAX_PROGRAM_MEMORY`` bytes are rejected with
  ``InvalidTopicRegex``, as are the empty pattern and syntax errors. Each error message names the
  pattern, what is wrong and what to do; the heartbeat answers it as INVALID_REGULAR_EXPRESSION.
- Internal topics (``__consumer_offsets``, ``__share_group_state``, ``__transaction_state``) never
  match, as Kafka excludes them from regex resolution.
- Compiled patterns are cached (``CACHE_SIZE`` entries, least recently used evicted), so a group's
  pattern compiles once while its members heartbeat; invalid patterns are not cached.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import re2  # type: ignore[import-untyped]

__all__ = [
    "CACHE_SIZE",
    "INTERNAL_TOPICS",
    "MAX_PATTERN_LENGTH",
    "MAX_PROGRAM_MEMORY",
    "InvalidTopicRegex",
    "TopicRegex",
    "cache_info",
    "clear_cache",
    "compile_topic_regex",
    "matching_topics",
]

# A topic name is at most 249 characters; 4096 leaves room for long alternations of names while
# bounding what one heartbeat can make the coordinator parse (Kafka has no explicit bound; RE2/J's
# memory limit bounds it there).
MAX_PATTERN_LENGTH = 4096
# RE2's budget for one compiled pattern (program plus its lazily built DFA cache); RE2's default
# is 8 MiB. 1 MiB compiles every realistic topic pattern (an alternation of 800 names takes a few
# KiB) and rejects blow-ups such as ``\pL{1000}``. Matching never fails on it: when the DFA cache
# is full RE2 falls back to its (still linear) NFA.
MAX_PROGRAM_MEMORY = 1 << 20
# Distinct patterns kept compiled: one per regex-subscribed group is the common case.
CACHE_SIZE = 256

INTERNAL_TOPICS: frozenset[str] = frozenset(
    {"__consumer_offsets", "__share_group_state", "__transaction_state"}
)


class InvalidTopicRegex(ValueError):
    """The pattern is not an acceptable RE2 topic regex; the message says why and what to do."""


class TopicRegex:
    """A compiled, linear-time topic pattern. Build with ``compile_topic_regex``."""

    __slots__ = ("_compiled", "pattern")

    def __init__(self, pattern: str, compiled: Any) -> None:
        self.pattern = pattern
        self._compiled = compiled

    def matches(self, name: str) -> bool:
        """True when the whole ``name`` matches (Java ``Pattern.matcher(name).matches()``)."""
        return self._compiled.fullmatch(name) is not None

    def __repr__(self) -> str:
        return f"TopicRegex({self.pattern!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TopicRegex) and other.pattern == self.pattern

    def __hash__(self) -> int:
        return hash(self.pattern)


def _options() -> Any:
    options = re2.Options()
    options.max_mem = MAX_PROGRAM_MEMORY
    # RE2 would otherwise print each rejected pattern to stderr; we raise with the reason instead.
    options.log_errors = False
    return options


_OPTIONS = _options()
_cache: OrderedDict[str, TopicRegex] = OrderedDict()


def compile_topic_regex(pattern: str) -> TopicRegex:
    """Compile ``pattern`` (cached), RE2 syntax, matching whole topic names.

    Raises:
        InvalidTopicRegex: empty, longer than ``MAX_PATTERN_LENGTH``, not valid RE2 syntax
            (including backreferences and lookaround), or too large to compile within
            ``MAX_PROGRAM_MEMORY``.
    """
    cached = _cache.get(pattern)
    if cached is not None:
        _cache.move_to_end(pattern)
        return cached
    if not pattern:
        raise InvalidTopicRegex(
            "SubscribedTopicRegex is empty; send a pattern such as 'orders-.*', or subscribe by "
            "topic names instead."
        )
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise InvalidTopicRegex(
            f"SubscribedTopicRegex is {len(pattern)} characters long, over the limit of "
            f"{MAX_PATTERN_LENGTH}; use a shorter pattern, e.g. a common prefix such as "
            "'orders-.*'."
        )
    try:
        compiled = re2.compile(pattern, options=_OPTIONS)
    except re2.error as exc:
        raise InvalidTopicRegex(_describe(pattern, exc)) from None
    regex = TopicRegex(pattern, compiled)
    _cache[pattern] = regex
    if len(_cache) > CACHE_SIZE:
        _cache.popitem(last=False)
    return regex


def _describe(pattern: str, exc: Exception) -> str:
    detail = exc.args[0] if exc.args else str(exc)
    if isinstance(detail, bytes):
        detail = detail.decode("utf-8", "replace")
    shown = pattern if len(pattern) <= 200 else pattern[:200] + "..."
    if "too large" in str(detail):
        return (
            f"SubscribedTopicRegex {shown!r} is too large to compile (over "
            f"{MAX_PROGRAM_MEMORY} bytes of RE2 program); simplify it, e.g. avoid large counted "
            "repetitions of character classes."
        )
    return (
        f"SubscribedTopicRegex {shown!r} is not a valid RE2 regular expression ({detail}); "
        "RE2 has no backreferences or lookaround, see https://github.com/google/re2/wiki/Syntax."
    )


def matching_topics(regex: TopicRegex, names: Iterable[str]) -> frozenset[str]:
    """The names that ``regex`` matches in full, internal topics excluded (as Kafka)."""
    return frozenset(n for n in names if n not in INTERNAL_TOPICS and regex.matches(n))


def cache_info() -> tuple[int, int]:
    """(entries, capacity) of the compiled-pattern cache, for tests and metrics."""
    return len(_cache), CACHE_SIZE


def clear_cache() -> None:
    """Drop every cached pattern (tests)."""
    _cache.clear()
