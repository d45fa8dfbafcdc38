"""The client side of one share session (one per broker the member fetches from), sans-IO.

Epoch rules (reference section 4): the first ShareFetch has epoch 0 and lists every partition;
it must not carry acknowledgements. Each successful ShareFetch or ShareAcknowledge moves the
epoch on by one (wrapping from 2^31-1 to 1); later requests list only partitions to add
(``topics``) and to drop (``forgotten_topics_data``). Epoch -1 acknowledges and closes the
session, and the broker releases what the member still holds there.

If the broker answers SHARE_SESSION_NOT_FOUND or INVALID_SHARE_SESSION_EPOCH the session is
``reset`` and the next fetch opens a new one at epoch 0. Any other top-level error leaves the
epoch where it was (the broker did not move it either).

This module builds the request bodies for one version (1 or 2) from plain data; it never does I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from client.acks import WireBatch
from protocol.codec import request_module

SHARE_FETCH = 78
SHARE_ACKNOWLEDGE = 79
MAX_EPOCH = 2**31 - 1
CLOSE_EPOCH = -1
# Top-level errors after which the session is ``reset`` (the broker no longer has it at our epoch).
SESSION_LOST = frozenset({ErrorCode.share_session_not_found,
                          ErrorCode.invalid_share_session_epoch})

TopicIdPartition = tuple[uuid.UUID, int]
WireAcks = Mapping[TopicIdPartition, list[WireBatch]]

__all__ = ["FetchParams", "ShareSession", "TopicIdPartition", "next_epoch"]


def next_epoch(epoch: int) -> int:
    """The epoch after a successful request at ``epoch``."""
    return 1 if epoch >= MAX_EPOCH else epoch + 1


@dataclass(frozen=True, slots=True)
class FetchParams:
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    max_records: int
    batch_size: int
    acquire_mode: int  # 0 batch_optimized, 1 record_limit (v2 only)


class ShareSession:
    """Epoch and partition set of a member's share session on one broker."""

    def __init__(self, node_id: int, group_id: str, member_id: str, version: int) -> None:
        self.node_id, self.group_id, self.member_id, self.version = (
            node_id, group_id, member_id, version)
        self.epoch = 0
        self.partitions: set[TopicIdPartition] = set()

    @property
    def is_open(self) -> bool:
        return self.epoch > 0

    def reset(self) -> None:
        """Forget the session; the next fetch opens a new one at epoch 0."""
        self.epoch = 0
        self.partitions = set()

    def advance(self, added: Iterable[TopicIdPartition] = (),
                forgotten: Iterable[TopicIdPartition] = ()) -> None:
        """Apply a successful request: partition changes take effect, the epoch moves on."""
        if self.epoch == 0:
            self.partitions = set()
        self.partitions |= set(added)
        self.partitions -= set(forgotten)
        self.epoch = next_epoch(self.epoch)

    def diff(self, wanted: set[TopicIdPartition]
             ) -> tuple[set[TopicIdPartition], set[TopicIdPartition]]:
        """(to add, to forget) to make the session cover ``wanted``."""
        if self.epoch == 0:
            return set(wanted), set()
        return wanted - self.partitions, self.partitions - wanted

    def fetch_request(self, added: set[TopicIdPartition], forgotten: set[TopicIdPartition],
                      acks: WireAcks, params: FetchParams, *, renew: bool = False,
                      epoch: int | None = None) -> Any:
        """A ShareFetch body. With ``renew`` (v2) it only carries acknowledgements."""
        m = request_module(SHARE_FETCH, self.version)
        by_topic: dict[uuid.UUID, dict[int, Any]] = {}
        for tid, p in added:
            by_topic.setdefault(tid, {})[p] = ()
        for (tid, p), batches in acks.items():
            by_topic.setdefault(tid, {})[p] = tuple(
                m.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=t)
                for f, last, t in batches)
        topics = tuple(
            m.FetchTopic(topic_id=tid, partitions=tuple(
                m.FetchPartition(partition_index=p, acknowledgement_batches=b)
                for p, b in sorted(parts.items())))
            for tid, parts in by_topic.items())
        forgot: dict[uuid.UUID, list[int]] = {}
        for tid, p in forgotten:
            forgot.setdefault(tid, []).append(p)
        fields: dict[str, Any] = {
            "group_id": self.group_id, "member_id": self.member_id,
            "share_session_epoch": self.epoch if epoch is None else epoch,
            "max_wait": timedelta(milliseconds=0 if renew else params.max_wait_ms),
            "min_bytes": 0 if renew else params.min_bytes,
            "max_bytes": 0 if renew else params.max_bytes,
            "max_records": 0 if renew else params.max_records,
            "batch_size": 0 if renew else params.batch_size,
            "topics": topics,
            "forgotten_topics_data": tuple(
                m.ForgottenTopic(topic_id=tid, partitions=tuple(sorted(ps)))
                for tid, ps in forgot.items())}
        if self.version >= 2:
            fields["share_acquire_mode"] = params.acquire_mode
            fields["is_renew_ack"] = renew
        return m.ShareFetchRequest(**fields)

    def acknowledge_request(self, acks: WireAcks, *, renew: bool = False,
                            epoch: int | None = None) -> Any:
        """A ShareAcknowledge body (``epoch`` -1 closes the session)."""
        m = request_module(SHARE_ACKNOWLEDGE, self.version)
        by_topic: dict[uuid.UUID, list[Any]] = {}
        for (tid, p), batches in sorted(acks.items()):
            by_topic.setdefault(tid, []).append(m.AcknowledgePartition(
                partition_index=p, acknowledgement_batches=tuple(
                    m.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=t)
                    for f, last, t in batches)))
        fields: dict[str, Any] = {
            "group_id": self.group_id, "member_id": self.member_id,
            "share_session_epoch": self.epoch if epoch is None else epoch,
            "topics": tuple(m.AcknowledgeTopic(topic_id=tid, partitions=tuple(ps))
                         for tid, ps in by_topic.items())}
        if self.version >= 2:
            fields["is_renew_ack"] = renew
        return m.ShareAcknowledgeRequest(**fields)
