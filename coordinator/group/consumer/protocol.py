"""The topics of a classic member's subscription (Kafka's ``ConsumerProtocolSubscription``).

A classic group's member metadata is opaque to the broker except for groups of protocol type
``consumer``, whose metadata every client writes in the consumer protocol's format: an int16
version, then (version 0 and, as a prefix, every later version) the subscribed topics as an
array of strings and the user data as nullable bytes. Kafka reads that prefix to know which
topics a group subscribes to (``ClassicGroup.computeSubscribedTopics``), for OffsetDelete and
offset expiry; so does Shoal. Pure, no I/O.
"""

from __future__ import annotations

import struct

CONSUMER_PROTOCOL_TYPE = "consumer"

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class SubscriptionFormatError(ValueError):
    """The metadata is not a consumer-protocol subscription (Kafka's SchemaException)."""


def subscribed_topics(metadata: bytes) -> frozenset[str]:
    """The topic names of one member's subscription metadata (the version-0 prefix).

    Raises:
        SubscriptionFormatError: the bytes end early or a length is out of range.
    """
    view = memoryview(metadata)
    pos = 0

    def take(n: int) -> memoryview:
        nonlocal pos
        if n < 0 or pos + n > len(view):
            raise SubscriptionFormatError(
                f"consumer protocol subscription ends at byte {len(view)}, "
                f"{n} more bytes needed at {pos}")
        out = view[pos:pos + n]
        pos += n
        return out

    take(_I16.size)  # the version: any version's first fields are version 0's
    (count,) = _I32.unpack(take(_I32.size))
    if count < 0:
        raise SubscriptionFormatError(f"negative topic count {count}")
    topics = set()
    for _ in range(count):
        (size,) = _I16.unpack(take(_I16.size))
        try:
            topics.add(bytes(take(size)).decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise SubscriptionFormatError(f"topic name is not UTF-8: {exc}") from None
    (user_data,) = _I32.unpack(take(_I32.size))
    if user_data >= 0:
        take(user_data)
    return frozenset(topics)


def group_subscription(protocol_type: str | None, members_metadata: list[bytes]
                       ) -> frozenset[str] | None:
    """The union of the members' subscribed topics, or None when unknown: the group is not of
    the consumer protocol type or a member's metadata does not parse (as Kafka, which then
    treats a ``consumer`` group as subscribed to every topic)."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE:
        return None
    topics: set[str] = set()
    try:
        for meta in members_metadata:
            topics |= subscribed_topics(meta)
    except SubscriptionFormatError:
        return None
    return frozenset(topics)
