"""The transaction RPCs between brokers as pure data: retry schedule, grouping, requests, answers.

Sans-IO (no asyncio, no clock; ``now_ms`` is an argument). The asyncio shell is
``broker/txn_remote.py``; the pieces here are what it decides with:

- ``Backoff``: exponential backoff between attempts of one call, bounded by a deadline
  (``next_delay(now_ms)`` is None once the next attempt would start past it);
- ``MarkerEntry`` and ``group_by_node``: the markers of a flush, grouped by the broker leading each
  partition (Kafka's ``TransactionMarkerChannelManager`` drains one queue per broker into one
  WriteTxnMarkers request); partitions without a live leader are set aside;
- ``write_txn_markers_request`` / ``marker_results``: one WriteTxnMarkers request (API key 27,
  v1-2) for the entries bound to one broker, and its answer per entry (an entry the response does
  not mention gets UNKNOWN_SERVER_ERROR, never an exception);
- ``add_partitions_request`` / ``add_partitions_results``: one AddPartitionsToTxn v4+ (API key
  24, the inter-broker batch form) for one transaction, ``verify_only`` or adding (transaction
  version 2), and its answer per partition (a top-level error, e.g.
  CLUSTER_AUTHORIZATION_FAILED, answers every partition).

Invariants: every entry or partition given gets exactly one code back; codes are Kafka's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from protocol.codec import request_module
from protocol.messages import make

__all__ = ["ADD_PARTITIONS_VERSIONS", "WRITE_TXN_MARKERS_VERSIONS", "Backoff", "MarkerEntry",
           "add_partitions_request", "add_partitions_results", "group_by_node",
           "marker_results", "write_txn_markers_request"]

WRITE_TXN_MARKERS = 27
ADD_PARTITIONS_TO_TXN = 24
WRITE_TXN_MARKERS_VERSIONS = (1, 2)
#: v4 is the inter-broker batch form (KIP-890 verification); v5 knows TRANSACTION_ABORTABLE and
#: adds partitions for transaction-version-2 producers.
ADD_PARTITIONS_VERSIONS = (4, 5)


class Backoff:
    """Delays between the attempts of one call: ``first_ms``, doubled each time up to
    ``max_ms``, none past ``deadline_ms`` (absolute, in the caller's clock)."""

    def __init__(self, now_ms: int, budget_ms: int, first_ms: int = 50,
                 max_ms: int = 1_000) -> None:
        """Raises:
            ValueError: a negative budget or non-positive backoff.
        """
        if budget_ms < 0 or first_ms <= 0 or max_ms < first_ms:
            raise ValueError("budget must be >= 0 and 0 < first_ms <= max_ms")
        self.deadline_ms = now_ms + budget_ms
        self._next = first_ms
        self._max = max_ms
        self.attempts = 1  # the first attempt is made without asking

    def next_delay(self, now_ms: int) -> int | None:
        """How long to wait before the next attempt, or None: the deadline has passed (or would
        pass while waiting; the last wait is cut to end at the deadline, which gets one last
        attempt)."""
        if now_ms >= self.deadline_ms:
            return None
        delay = min(self._next, self.deadline_ms - now_ms)
        self._next = min(self._next * 2, self._max)
        self.attempts += 1
        return delay


@dataclass(frozen=True, slots=True)
class MarkerEntry:
    """One marker for one partition (a data partition or a ``__consumer_offsets`` one)."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool


def group_by_node(entries: Iterable[MarkerEntry], leader_of: Callable[[str, int], int | None]
                  ) -> tuple[dict[int, list[MarkerEntry]], list[MarkerEntry]]:
    """(entries per leading broker, in the order given; entries whose partition has no live
    leader)."""
    by_node: dict[int, list[MarkerEntry]] = {}
    orphans: list[MarkerEntry] = []
    for e in entries:
        node = leader_of(e.topic, e.partition)
        if node is None:
            orphans.append(e)
        else:
            by_node.setdefault(node, []).append(e)
    return by_node, orphans


def write_txn_markers_request(entries: Sequence[MarkerEntry], version: int) -> Any:
    """One WriteTxnMarkers request: one marker per (producer, epoch, result, coordinator epoch),
    its partitions under their topics in the order first seen."""
    m = request_module(WRITE_TXN_MARKERS, version)
    markers: dict[tuple[int, int, bool, int], dict[str, list[int]]] = {}
    for e in entries:
        key = (e.producer_id, e.producer_epoch, e.commit, e.coordinator_epoch)
        parts = markers.setdefault(key, {}).setdefault(e.topic, [])
        if e.partition not in parts:
            parts.append(e.partition)
    return make(m.WriteTxnMarkersRequest, markers=tuple(
        make(m.WritableTxnMarker, producer_id=pid, producer_epoch=epoch, transaction_result=commit,
             coordinator_epoch=coordinator_epoch, topics=tuple(
                 make(m.WritableTxnMarkerTopic, name=t, partition_indexes=tuple(ps))
                 for t, ps in topics.items()))
        for (pid, epoch, commit, coordinator_epoch), topics in markers.items()))


def marker_results(entries: Sequence[MarkerEntry], response: Any) -> list[ErrorCode]:
    """The code of each entry (in order) from a WriteTxnMarkers response."""
    codes: dict[tuple[int, str, int], ErrorCode] = {}
    for marker in response.markers:
        for t in marker.topics:
            for p in t.partitions:
                codes[(int(marker.producer_id), t.name, int(p.partition_index))] = \
                    ErrorCode(p.error_code)
    return [codes.get((e.producer_id, e.topic, e.partition), ErrorCode.unknown_server_error)
            for e in entries]


def add_partitions_request(transactional_id: str, producer_id: int, producer_epoch: int,
                           partitions: Sequence[tuple[str, int]], verify_only: bool,
                           version: int) -> Any:
    """One AddPartitionsToTxn v4+ request carrying one transaction."""
    m = request_module(ADD_PARTITIONS_TO_TXN, version)
    topics: dict[str, list[int]] = {}
    for t, p in partitions:
        ps = topics.setdefault(t, [])
        if p not in ps:
            ps.append(p)
    txn = make(m.AddPartitionsToTxnTransaction, transactional_id=transactional_id,
               producer_id=producer_id, producer_epoch=producer_epoch, verify_only=verify_only,
               topics=tuple(make(m.AddPartitionsToTxnTopic, name=t, partitions=tuple(ps))
                            for t, ps in topics.items()))
    return make(m.AddPartitionsToTxnRequest, transactions=(txn,))


def add_partitions_results(partitions: Sequence[tuple[str, int]], transactional_id: str,
                           response: Any) -> dict[tuple[str, int], ErrorCode]:
    """The code of each partition from an AddPartitionsToTxn v4+ response (its top-level error
    for every partition when set)."""
    top = ErrorCode(response.error_code)
    if top != ErrorCode.none:
        return {tp: top for tp in partitions}
    codes: dict[tuple[str, int], ErrorCode] = {}
    for txn in response.results_by_transaction:
        if txn.transactional_id != transactional_id:
            continue
        for t in txn.topic_results:
            for p in t.results_by_partition:
                codes[(t.name, int(p.partition_index))] = ErrorCode(p.partition_error_code)
    return {tp: codes.get(tp, ErrorCode.unknown_server_error) for tp in partitions}
