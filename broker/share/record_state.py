"""Delivery states of a share-partition record, the legal moves between them, and ack types.

KIP-932 gives every offset in a share-partition's in-flight window one delivery state. The
state machine is small and strict, and every change goes through :func:`check_transition`:

    AVAILABLE --acquire--> ACQUIRED --ACCEPT--------------> ACKNOWLEDGED   (terminal)
        |                     |------REJECT / GAP---------> ARCHIVED       (terminal)
        |                     |------RELEASE / lock expiry
        |                     |      / member released ---> AVAILABLE, or ARCHIVED at the
        |                     |                             delivery-count limit
        |                     `--REJECT / delivery limit, with a dead-letter topic (KIP-1191)
        |                                                 --> ARCHIVING --DLQ record durable--> ARCHIVED
        `--log start moved / compacted away / aborted txn--> ARCHIVED

Rules:
1. ACKNOWLEDGED and ARCHIVED are terminal: nothing leaves them. The share-partition start offset
   (SPSO) only ever moves over a prefix of terminal records.
2. A record is only handed to a consumer by AVAILABLE -> ACQUIRED, and that move is the only one
   that increments the delivery count (reference section 3, "Delivery count").
3. A state never "changes" to itself; a RENEW acknowledgement restarts the acquisition lock of an
   ACQUIRED record without a state change, so it is not a transition.
4. AVAILABLE -> ARCHIVED is legal: records below a moved log start offset, records missing from a
   compacted log and records of aborted transactions are archived without being delivered.
5. ARCHIVING (3) is the dead-letter flow of KIP-1191 (broker/share/dead_letter.py): a record
   rejected or exhausted in a group with ``errors.deadletterqueue.topic.name`` waits there until
   its dead-letter record is durable on the DLQ topic. It is persisted (as Kafka 4.4 does, state
   id 3 of the ShareSnapshot/ShareUpdate schema), so a restart finishes the copy; it is not
   terminal (the SPSO stops at it) but it is *done* for delivery: it is never delivered again and
   no longer holds its key (``is_done``). AVAILABLE (0), ACKNOWLEDGED (2), ARCHIVING (3) and
   ARCHIVED (4) are written to the share coordinator; ACQUIRED never is.

The ids are the wire/persisted ids of the ShareSnapshot/ShareUpdate schema.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "ACK_TARGET_STATE",
    "LEGAL_TRANSITIONS",
    "AckType",
    "IllegalTransitionError",
    "RecordState",
    "check_transition",
]


class RecordState(IntEnum):
    """Delivery state of one offset (ids as persisted on ``__share_group_state``)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVING = 3  # KIP-1191: waiting for its dead-letter record to be durable
    ARCHIVED = 4

    @property
    def is_terminal(self) -> bool:
        """True for states nothing can leave (the SPSO may move past these)."""
        return self in _TERMINAL

    @property
    def is_persisted(self) -> bool:
        """True for the states the share coordinator stores (0, 2, 3, 4)."""
        return self in _PERSISTED

    @property
    def is_done(self) -> bool:
        """Never delivered again: terminal, or ARCHIVING (its key is free, rule 5)."""
        return self in _DONE


_TERMINAL = frozenset({RecordState.ACKNOWLEDGED, RecordState.ARCHIVED})
_PERSISTED = frozenset({RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.ARCHIVING,
                        RecordState.ARCHIVED})
_DONE = frozenset({RecordState.ACKNOWLEDGED, RecordState.ARCHIVING, RecordState.ARCHIVED})

#: Every legal (from -> to) move. Anything else is a bug in the caller.
LEGAL_TRANSITIONS: dict[RecordState, frozenset[RecordState]] = {
    RecordState.AVAILABLE: frozenset({RecordState.ACQUIRED, RecordState.ARCHIVED}),
    RecordState.ACQUIRED: frozenset(
        {
            RecordState.AVAILABLE,
            RecordState.ACKNOWLEDGED,
            RecordState.ARCHIVING,
            RecordState.ARCHIVED,
        }
    ),
    RecordState.ARCHIVING: frozenset({RecordState.ARCHIVED}),
    RecordState.ACKNOWLEDGED: frozenset(),
    RecordState.ARCHIVED: frozenset(),
}


class IllegalTransitionError(RuntimeError):
    """A state change not in :data:`LEGAL_TRANSITIONS` was attempted (always a bug)."""


def check_transition(old: RecordState, new: RecordState) -> RecordState:
    """Return ``new`` if ``old -> new`` is legal.

    Raises:
        IllegalTransitionError: the move is not in the table (a programming error, never an
            expected protocol outcome; invalid client requests are rejected before any change).
    """
    if new not in LEGAL_TRANSITIONS[old]:
        raise IllegalTransitionError(f"illegal record state transition {old.name} -> {new.name}")
    return new


class AckType(IntEnum):
    """Acknowledgement types of ShareFetch/ShareAcknowledge (RENEW needs v2 and IsRenewAck)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


#: Where each acknowledgement moves an ACQUIRED record (reference section 3, "Acknowledgement").
#: RELEASE lands in ARCHIVED instead when the delivery count has reached the limit; RENEW has no
#: target because it only restarts the acquisition lock.
ACK_TARGET_STATE: dict[AckType, RecordState | None] = {
    AckType.GAP: RecordState.ARCHIVED,
    AckType.ACCEPT: RecordState.ACKNOWLEDGED,
    AckType.RELEASE: RecordState.AVAILABLE,
    AckType.REJECT: RecordState.ARCHIVED,
    AckType.RENEW: None,
}
