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
from dataclasses import dataclass

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


# ------------------------------------------------------------------ whole messages (migration)
#
# A classic member inside a consumer group (``classic_members.py``) and the conversions between
# the two group types (``migration.py``) read the whole subscription and write assignments, as
# Kafka's ``ConsumerProtocol``: a subscription has the topics and user data (v0), the owned
# partitions (v1+), the generation (v2+) and the rack (v3+); an assignment (every version) the
# assigned partitions, topic by topic, and the user data. Strings have int16 lengths, arrays and
# bytes int32 lengths (-1 = null).

_MAX_VERSION = 3  # the highest ConsumerProtocol version Kafka 4.x writes


class _Cursor:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise SubscriptionFormatError(
                f"consumer protocol message ends at byte {len(self.data)}, {n} more bytes "
                f"needed at {self.pos}")
        out = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return out

    def i16(self) -> int:
        v: int = _I16.unpack(self.take(2))[0]
        return v

    def i32(self) -> int:
        v: int = _I32.unpack(self.take(4))[0]
        return v

    def string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SubscriptionFormatError(f"string is not UTF-8: {exc}") from None

    def count(self) -> int:
        n = self.i32()
        if n > len(self.data) - self.pos:
            raise SubscriptionFormatError(f"array of {n} elements in a shorter message")
        return n

    def at_end(self) -> bool:
        return self.pos >= len(self.data)

    def partitions(self) -> dict[str, frozenset[int]]:
        out: dict[str, set[int]] = {}
        for _ in range(max(self.count(), 0)):
            topic = self.string()
            if topic is None:
                raise SubscriptionFormatError("null topic name")
            parts = out.setdefault(topic, set())
            for _ in range(max(self.count(), 0)):
                parts.add(self.i32())
        return {t: frozenset(p) for t, p in out.items()}


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    owned: dict[str, frozenset[int]]
    rack_id: str | None = None


def decode_subscription(metadata: bytes) -> Subscription:
    """A member's whole subscription (fields of versions it does not have are empty).

    Raises:
        SubscriptionFormatError: the bytes are not a consumer-protocol subscription.
    """
    cur = _Cursor(metadata)
    version = cur.i16()
    if version < 0:
        raise SubscriptionFormatError(f"negative subscription version {version}")
    topics = []
    for _ in range(max(cur.count(), 0)):
        name = cur.string()
        if name is None:
            raise SubscriptionFormatError("null topic name")
        topics.append(name)
    user_data = cur.i32()
    if user_data > 0:
        cur.take(user_data)
    owned: dict[str, frozenset[int]] = {}
    rack = None
    if version >= 1 and not cur.at_end():
        owned = cur.partitions()
        if version >= 2 and not cur.at_end():
            cur.i32()  # the generation the member last had
            if version >= 3 and not cur.at_end():
                rack = cur.string()
    return Subscription(version, tuple(topics), owned, rack)


def subscription_version(metadata: bytes) -> int:
    """The version a member writes its subscription with (0 if unreadable), which is the
    version its assignment is written with (as Kafka's ``ConsumerProtocol.deserializeVersion``)."""
    if len(metadata) < 2:
        return 0
    v: int = _I16.unpack(metadata[:2])[0]
    return min(max(v, 0), _MAX_VERSION)


def decode_assignment(data: bytes) -> dict[str, frozenset[int]]:
    """The assigned partitions by topic name of an assignment (empty bytes: none).

    Raises:
        SubscriptionFormatError: the bytes are not a consumer-protocol assignment.
    """
    if not data:
        return {}
    cur = _Cursor(data)
    cur.i16()
    return cur.partitions()


def encode_assignment(assigned: dict[str, frozenset[int]], version: int) -> bytes:
    """An assignment message at ``version`` (topics sorted, partitions ascending, no user data)."""
    out = bytearray(_I16.pack(min(max(version, 0), _MAX_VERSION)))
    topics = sorted(t for t, p in assigned.items() if p)
    out += _I32.pack(len(topics))
    for topic in topics:
        name = topic.encode("utf-8")
        out += _I16.pack(len(name))
        out += name
        parts = sorted(assigned[topic])
        out += _I32.pack(len(parts))
        for p in parts:
            out += _I32.pack(p)
    out += _I32.pack(-1)  # user data: null
    return bytes(out)
