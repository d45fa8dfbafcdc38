"""Exceptions raised (or reported in acknowledgement results) by the client; the client core's
error mapping (kio ``ErrorCode`` -> ``KafkaError`` subclass: ``error_for``, ``raise_for``,
``error_text``).

Two families:

- ``IllegalStateError``: the application used the consumer wrongly (getmany without a
  subscription, acknowledging a record that is not from the current batch, ...). Kafka's
  ``KafkaShareConsumer`` throws ``IllegalStateException`` in the same places.
- ``KafkaError``: the broker answered with a Kafka error code. There is one subclass per error
  code, named after it in CamelCase (``InvalidRecordStateError`` for INVALID_RECORD_STATE,
  ``UnknownTopicIdError`` for UNKNOWN_TOPIC_ID, ...), created on first use by ``error_for``.
  Each instance carries ``code`` (a kio ``ErrorCode``), ``name`` (the Kafka name, e.g.
  ``INVALID_RECORD_STATE``), the broker's message and, when the error is about one partition,
  ``topic_partition``.

Expected per-partition outcomes (an acknowledgement that failed) are *returned* as instances in
``commit_sync`` results and callbacks, not raised; request-level failures are raised.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from client.records import TopicPartition

__all__ = [
    "ConsumerClosedError",
    "IllegalStateError",
    "KafkaError",
    "ShareConsumerError",
    "error_class",
    "error_for",
    "error_text",
    "raise_for",
]


class ShareConsumerError(Exception):
    """Base of every exception this package raises."""


class IllegalStateError(ShareConsumerError):
    """The consumer was used in a way its state does not allow (Kafka IllegalStateException)."""


class ConsumerClosedError(IllegalStateError):
    """The consumer is closed (or was never started)."""


class KafkaError(ShareConsumerError):
    """A Kafka error code returned by a broker."""

    code: ErrorCode = ErrorCode.unknown_server_error

    def __init__(self, message: str | None = None,
                 topic_partition: TopicPartition | None = None) -> None:
        self.message = message
        self.topic_partition = topic_partition
        where = f" on {topic_partition.topic}-{topic_partition.partition}" if topic_partition else ""
        detail = f": {message}" if message else ""
        super().__init__(f"{self.name}{where}{detail}")

    @property
    def name(self) -> str:
        """The Kafka error name, e.g. ``INVALID_RECORD_STATE``."""
        return self.code.name.upper()

    @property
    def retriable(self) -> bool:
        return bool(getattr(self.code, "retriable", False))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, KafkaError) and other.code == self.code
                and other.topic_partition == self.topic_partition)

    def __hash__(self) -> int:
        return hash((self.code, self.topic_partition))


_CLASSES: dict[ErrorCode, type[KafkaError]] = {}


def _class_name(code: ErrorCode) -> str:
    return "".join(part.capitalize() for part in code.name.split("_")) + "Error"


def error_class(code: ErrorCode | int) -> type[KafkaError]:
    """The ``KafkaError`` subclass for an error code (one class per code, made once)."""
    code = ErrorCode(code)
    cls = _CLASSES.get(code)
    if cls is None:
        cls = type(_class_name(code), (KafkaError,), {"code": code, "__module__": __name__})
        _CLASSES[code] = cls
    return cls


def error_for(code: ErrorCode | int, message: str | None = None,
              topic_partition: TopicPartition | None = None) -> KafkaError | None:
    """An exception instance for a non-zero error code, or None for NONE."""
    code = ErrorCode(code)
    if code == ErrorCode.none:
        return None
    return error_class(code)(message, topic_partition)


def raise_for(code: ErrorCode | int, message: str | None = None) -> None:
    """Raise the ``KafkaError`` for a non-zero error code (nothing for NONE)."""
    err = error_for(code, message)
    if err is not None:
        raise err


def error_text(code: ErrorCode | int, message: str | None = None) -> str:
    """``NAME`` or ``NAME: message`` for an error code from a response (unknown codes as
    ``error N``)."""
    try:
        name = ErrorCode(int(code)).name.upper()
    except ValueError:
        name = f"error {int(code)}"
    return f"{name}: {message}" if message else name


# The classes applications most often catch, importable by name.
InvalidRecordStateError = error_class(ErrorCode.invalid_record_state)
UnknownTopicIdError = error_class(ErrorCode.unknown_topic_id)
UnknownTopicOrPartitionError = error_class(ErrorCode.unknown_topic_or_partition)
UnsupportedVersionError = error_class(ErrorCode.unsupported_version)
GroupMaxSizeReachedError = error_class(ErrorCode.group_max_size_reached)
GroupAuthorizationFailedError = error_class(ErrorCode.group_authorization_failed)
InvalidRequestError = error_class(ErrorCode.invalid_request)
ShareSessionNotFoundError = error_class(ErrorCode.share_session_not_found)
InvalidShareSessionEpochError = error_class(ErrorCode.invalid_share_session_epoch)
NotLeaderOrFollowerError = error_class(ErrorCode.not_leader_or_follower)

__all__ += [
    "GroupAuthorizationFailedError",
    "GroupMaxSizeReachedError",
    "InvalidRecordStateError",
    "InvalidRequestError",
    "InvalidShareSessionEpochError",
    "NotLeaderOrFollowerError",
    "ShareSessionNotFoundError",
    "UnknownTopicIdError",
    "UnknownTopicOrPartitionError",
    "UnsupportedVersionError",
]
