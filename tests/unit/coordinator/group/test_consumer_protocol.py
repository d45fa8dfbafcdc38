"""Reading a classic member's consumer-protocol subscription (``coordinator/group/
consumer_protocol.py``): the version-0 prefix of every version, malformed bytes refused with
SubscriptionFormatError only."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.group.consumer.protocol import (
    SubscriptionFormatError,
    group_subscription,
    subscribed_topics,
)


def subscription(topics: list[str], version: int = 0, user_data: bytes | None = None,
                 tail: bytes = b"") -> bytes:
    out = version.to_bytes(2, "big", signed=True) + len(topics).to_bytes(4, "big")
    for t in topics:
        raw = t.encode()
        out += len(raw).to_bytes(2, "big") + raw
    if user_data is None:
        out += (-1).to_bytes(4, "big", signed=True)
    else:
        out += len(user_data).to_bytes(4, "big") + user_data
    return out + tail


CASES = {
    "v0": (subscription(["a", "b"]), {"a", "b"}),
    "v3 with owned partitions, generation and rack after the prefix": (
        subscription(["orders"], 3, b"ud", b"\x00\x00\x00\x00" + b"\x00\x00\x00\x05\x00\x01r"),
        {"orders"}),
    "no topics": (subscription([]), set()),
    "unicode topic": (subscription(["t\u00e9"]), {"t\u00e9"}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_subscribed_topics(name: str) -> None:
    raw, topics = CASES[name]
    assert subscribed_topics(raw) == topics


BAD = {
    "empty": b"",
    "version only": b"\x00\x00",
    "negative count": b"\x00\x00\xff\xff\xff\xff",
    "count past the end": b"\x00\x00\x00\x00\x00\x05\x00\x01a",
    "no user data": subscription(["a"])[:-4],
    "user data past the end": subscription(["a"], user_data=b"x")[:-1],
    "null topic name": b"\x00\x00\x00\x00\x00\x01\xff\xff" + b"\xff\xff\xff\xff",
    "not utf-8": b"\x00\x00\x00\x00\x00\x01\x00\x01\xff\xff\xff\xff\xff",
}


@pytest.mark.parametrize("name", list(BAD))
def test_malformed_subscriptions_are_refused(name: str) -> None:
    with pytest.raises(SubscriptionFormatError):
        subscribed_topics(BAD[name])


def test_group_subscription() -> None:
    a, b = subscription(["a"]), subscription(["b", "c"], 1, b"")
    assert group_subscription("consumer", [a, b]) == {"a", "b", "c"}
    assert group_subscription("consumer", []) == frozenset()
    assert group_subscription("consumer", [a, b"\x00"]) is None  # unknown: not parsable
    assert group_subscription("connect", [a]) is None  # not the consumer protocol


@given(st.binary(max_size=200))
def test_any_bytes_give_topics_or_the_format_error(raw: bytes) -> None:
    try:
        assert isinstance(subscribed_topics(raw), frozenset)
    except SubscriptionFormatError:
        pass


@given(st.lists(st.text(min_size=1, max_size=20), max_size=10), st.integers(0, 3),
       st.one_of(st.none(), st.binary(max_size=20)))
def test_encoded_subscriptions_read_back(topics: list[str], version: int,
                                         user_data: bytes | None) -> None:
    assert subscribed_topics(subscription(topics, version, user_data)) == frozenset(topics)
