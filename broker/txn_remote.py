"""Transactions across cluster members: markers to partition leaders, verification to coordinators.

Only a cluster member (``broker.member``) builds these (``broker/coordinators.py``); a single
broker keeps its in-process calls. Requests go through ``InterBrokerRpc``
(``broker/inter_broker_rpc.py``); the decisions (backoff, grouping, request and answer shapes)
are ``broker/txn_wire.py``'s.

``ClusterMarkers`` is the transaction coordinator's marker writer (``DataMarkerWriter`` and the
``offset_markers`` callable of ``coordinator/txn/service.py``):

- a marker for a partition this broker leads is written in process, as on a single broker
  (``broker.txn_log.write_marker``, or the group coordinator's ``complete_transaction`` for a
  ``__consumer_offsets`` partition);
- the others are queued and, at the end of the event-loop turn, sent as one WriteTxnMarkers
  request per leading broker (the coordinator asks for all the markers of a transaction in one
  turn, so a transaction costs one request per broker, as Kafka's
  ``TransactionMarkerChannelManager``; markers of several transactions may share one);
- NOT_LEADER_OR_FOLLOWER, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, a partition without a
  live leader and connection loss are retried with backoff, finding the leader again each time,
  until ``marker_deadline_ms``, and so is a refusal of this broker itself (its login, or
  CLUSTER_AUTHORIZATION_FAILED: a configuration to fix, logged as such); then the call answers
  a retriable code (NOT_LEADER_OR_FOLLOWER or REQUEST_TIMED_OUT) and the coordinator tries
  again later (it never writes the Complete
  record before every marker is answered NONE: the receiving broker answers only once its
  marker is fsynced, ``broker/log/txn_log.py``).

``TxnCoordinatorLink`` asks the transaction coordinator of a transactional id (the leader of its
``__transaction_state`` partition) whether partitions are in the producer's transaction
(AddPartitionsToTxn v4+ ``verify_only``, KIP-890) or adds them (transaction version 2: Produce
v12 and TxnOffsetCommit v5): in process when this broker is that coordinator, else over the
wire, retrying NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS and connection loss with backoff up
to ``verify_deadline_ms``; then the last code is answered (a lost connection or a timed-out
request as NETWORK_EXCEPTION, as Kafka's ``AddPartitionsToTxnManager`` reports a disconnect), and
the caller translates it for its client (``broker.log.append.verification_error``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from broker.inter_broker_rpc import InterBrokerRpc
from broker.txn_wire import (
    ADD_PARTITIONS_TO_TXN,
    ADD_PARTITIONS_VERSIONS,
    WRITE_TXN_MARKERS,
    WRITE_TXN_MARKERS_VERSIONS,
    Backoff,
    MarkerEntry,
    add_partitions_request,
    add_partitions_results,
    group_by_node,
    marker_results,
    write_txn_markers_request,
)
from coordinator.txn.service import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

__all__ = ["BrokerLinks", "ClusterMarkers", "TxnCoordinatorLink"]

log = logging.getLogger("shoal.transactions.remote")

_REROUTE = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.not_coordinator,
                      ErrorCode.coordinator_load_in_progress, ErrorCode.leader_not_available,
                      ErrorCode.coordinator_not_available, ErrorCode.network_exception,
                      ErrorCode.request_timed_out})
# The peer refused the broker itself (its login, or it is not a super user): a configuration to
# fix, never a reason to complete the transaction without its marker, so retried like the above.
_REFUSED = frozenset({ErrorCode.cluster_authorization_failed,
                      ErrorCode.sasl_authentication_failed, ErrorCode.illegal_sasl_state,
                      ErrorCode.unsupported_sasl_mechanism, ErrorCode.unsupported_version})
_RETRY_MARKER = _REROUTE | _REFUSED


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class LocalMarkers(Protocol):
    def write_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                     coordinator_epoch: int, commit: bool) -> Awaitable[ErrorCode]: ...


OffsetMarkers = Callable[[int, int, int, int, bool], Awaitable[ErrorCode]]


class ClusterMarkers:
    """The transaction coordinator's marker writer on a cluster member (module doc)."""

    def __init__(self, rpc: InterBrokerRpc, local: LocalMarkers,
                 local_offsets: Callable[[], OffsetMarkers], *, marker_deadline_ms: int = 30_000,
                 backoff_ms: int = 50, backoff_max_ms: int = 1_000,
                 clock_ms: Callable[[], int] = _monotonic_ms) -> None:
        """``local_offsets()`` gives the group coordinator's ``complete_transaction`` (looked up
        per call: the group coordinator opens before the transaction coordinator)."""
        self._rpc = rpc
        self._local = local
        self._local_offsets = local_offsets
        self._deadline_ms = marker_deadline_ms
        self._backoff = (backoff_ms, backoff_max_ms)
        self._clock_ms = clock_ms
        self._queued: list[tuple[MarkerEntry, asyncio.Future[ErrorCode]]] = []
        self._flush_soon = False
        self._tasks: set[asyncio.Task[None]] = set()
        self.requests_by_node: dict[int, int] = {}  # WriteTxnMarkers sent (metrics, tests)

    async def write_marker(self, topic: str, partition: int, producer_id: int,
                           producer_epoch: int, coordinator_epoch: int, commit: bool) -> ErrorCode:
        """``DataMarkerWriter``: the marker for a data partition, wherever its leader is."""
        return await self._write(MarkerEntry(topic, partition, producer_id, producer_epoch,
                                             coordinator_epoch, commit))

    async def offset_marker(self, partition: int, producer_id: int, producer_epoch: int,
                            coordinator_epoch: int, commit: bool) -> ErrorCode:
        """``offset_markers``: the marker for a ``__consumer_offsets`` partition, at its
        group coordinator."""
        return await self._write(MarkerEntry(CONSUMER_OFFSETS_TOPIC, partition, producer_id,
                                             producer_epoch, coordinator_epoch, commit))

    async def _write(self, e: MarkerEntry) -> ErrorCode:
        backoff = Backoff(self._clock_ms(), self._deadline_ms, *self._backoff)
        while True:
            leader = self._rpc.leader(e.topic, e.partition)
            if leader == self._rpc.node_id:
                code = await self._write_here(e)
            elif leader is None:
                code = ErrorCode.not_leader_or_follower
            else:
                fut = asyncio.get_running_loop().create_future()
                self._queued.append((e, fut))
                self._schedule_flush()
                code = await fut
            if code not in _RETRY_MARKER:
                return code
            delay = backoff.next_delay(self._clock_ms())
            if delay is None:
                log.warning("%s marker of producer %d epoch %d on %s-%d not written after %d "
                            "attempt(s): %s; the transaction coordinator retries it%s",
                            "COMMIT" if e.commit else "ABORT", e.producer_id, e.producer_epoch,
                            e.topic, e.partition, backoff.attempts, code.name.upper(),
                            " (the leader refused this broker: check the inter-broker "
                            "listener's login and super.users)" if code in _REFUSED else "")
                return _retriable(code)
            await asyncio.sleep(delay / 1000)

    async def _write_here(self, e: MarkerEntry) -> ErrorCode:
        if e.topic == CONSUMER_OFFSETS_TOPIC:
            return await self._local_offsets()(e.partition, e.producer_id, e.producer_epoch,
                                               e.coordinator_epoch, e.commit)
        return await self._local.write_marker(e.topic, e.partition, e.producer_id,
                                              e.producer_epoch, e.coordinator_epoch, e.commit)

    def _schedule_flush(self) -> None:
        if not self._flush_soon:
            self._flush_soon = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_soon = False
        queued, self._queued = self._queued, []
        futures = {id(e): f for e, f in queued}
        by_node, orphans = group_by_node([e for e, _ in queued], self._rpc.leader)
        for e in orphans:
            _resolve(futures[id(e)], ErrorCode.not_leader_or_follower)
        for node, entries in by_node.items():
            task = asyncio.create_task(
                self._send(node, entries, [futures[id(e)] for e in entries]),
                name=f"shoal-txn-markers-{node}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, node: int, entries: list[MarkerEntry],
                    futures: list[asyncio.Future[ErrorCode]]) -> None:
        self.requests_by_node[node] = self.requests_by_node.get(node, 0) + 1
        try:
            response, code, message = await self._rpc.send(
                node, WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSIONS,
                lambda v: write_txn_markers_request(entries, v))
            if response is None:
                log.debug("WriteTxnMarkers for %d partition(s) to %s failed: %s", len(entries),
                         f"broker {node}", message)
                codes = [code] * len(entries)
            else:
                codes = marker_results(entries, response)
        except Exception:  # noqa: BLE001 - an answer that did not decode: a bug, retried
            log.exception("WriteTxnMarkers to broker %d failed", node)
            codes = [ErrorCode.network_exception] * len(entries)
        for fut, c in zip(futures, codes, strict=True):
            _resolve(fut, c)

    async def close(self) -> None:
        """Cancel the requests in flight (their callers get NETWORK_EXCEPTION, or are gone)."""
        for _e, fut in self._queued:
            _resolve(fut, ErrorCode.network_exception)
        self._queued.clear()
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _retriable(code: ErrorCode) -> ErrorCode:
    """``code`` as one the transaction coordinator retries (its RETRIABLE_MARKER_ERRORS)."""
    if code in (ErrorCode.not_leader_or_follower, ErrorCode.not_coordinator,
                ErrorCode.coordinator_load_in_progress, ErrorCode.request_timed_out):
        return code
    if code is ErrorCode.leader_not_available:
        return ErrorCode.not_leader_or_follower
    return ErrorCode.request_timed_out


def _resolve(fut: asyncio.Future[ErrorCode], code: ErrorCode) -> None:
    if not fut.done():
        fut.set_result(code)


class LocalTransactions(Protocol):
    """The local transaction coordinator (``coordinator.txn.service.TransactionService``)."""

    def partition_for(self, transactional_id: str) -> int: ...

    def verify_partition(self, transactional_id: str, producer_id: int, producer_epoch: int,
                         topic: str, partition: int) -> ErrorCode: ...

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Any, client_tv: int | None = None) -> ErrorCode: ...


_COORDINATOR_RETRY = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress,
                                ErrorCode.coordinator_not_available,
                                ErrorCode.network_exception})


class TxnCoordinatorLink:
    """Verification and implicit additions at the transaction coordinator (module doc)."""

    def __init__(self, rpc: InterBrokerRpc, local: Callable[[], LocalTransactions], *,
                 verify_deadline_ms: int = 3_000, backoff_ms: int = 50,
                 backoff_max_ms: int = 500, clock_ms: Callable[[], int] = _monotonic_ms) -> None:
        self._rpc = rpc
        self._local = local
        self._deadline_ms = verify_deadline_ms
        self._backoff = (backoff_ms, backoff_max_ms)
        self._clock_ms = clock_ms

    def _coordinator(self, transactional_id: str) -> int | None:
        p = self._local().partition_for(transactional_id)
        return self._rpc.leader(TRANSACTION_STATE_TOPIC, p)

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        """Per partition: NONE when it is in the producer's ongoing transaction, else the
        coordinator's code (``TransactionService.verify_partition``'s codes)."""
        return await self._ask(transactional_id, producer_id, producer_epoch, partitions, True)

    async def add(self, transactional_id: str, producer_id: int, producer_epoch: int,
                  partitions: Sequence[tuple[str, int]]) -> ErrorCode:
        """Add the partitions to the transaction of a transaction-version-2 producer; NONE or
        the coordinator's code (one for all of them)."""
        codes = await self._ask(transactional_id, producer_id, producer_epoch, partitions, False)
        return next((c for c in codes.values() if c != ErrorCode.none), ErrorCode.none)

    async def _ask(self, txn_id: str, pid: int, epoch: int, parts: Sequence[tuple[str, int]],
                   verify_only: bool) -> dict[tuple[str, int], ErrorCode]:
        parts = list(dict.fromkeys(parts))
        backoff = Backoff(self._clock_ms(), self._deadline_ms, *self._backoff)
        while True:
            node = self._coordinator(txn_id)
            if node == self._rpc.node_id:
                local = self._local()
                if verify_only:
                    codes = {tp: local.verify_partition(txn_id, pid, epoch, *tp) for tp in parts}
                else:
                    code = await local.add_partitions(txn_id, pid, epoch, parts, client_tv=2)
                    codes = dict.fromkeys(parts, code)
            elif node is None:
                codes = dict.fromkeys(parts, ErrorCode.coordinator_not_available)
            else:
                codes = await self._remote(node, txn_id, pid, epoch, parts, verify_only)
            if not any(c in _COORDINATOR_RETRY for c in codes.values()):
                return codes
            delay = backoff.next_delay(self._clock_ms())
            if delay is None:
                return codes
            await asyncio.sleep(delay / 1000)

    async def _remote(self, node: int, txn_id: str, pid: int, epoch: int,
                      parts: list[tuple[str, int]], verify_only: bool
                      ) -> dict[tuple[str, int], ErrorCode]:
        response, code, message = await self._rpc.send(
            node, ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_VERSIONS,
            lambda v: add_partitions_request(txn_id, pid, epoch, parts, verify_only, v),
            self._deadline_ms)
        if response is None:
            log.debug("AddPartitionsToTxn (%s) of transactional id %r to broker %d failed: %s",
                     "verify" if verify_only else "add", txn_id, node, message)
            if code is ErrorCode.request_timed_out:
                code = ErrorCode.network_exception
            return dict.fromkeys(parts, code)
        return add_partitions_results(parts, txn_id, response)


class BrokerLinks:
    """A cluster member's inter-broker clients other than the persister (``broker.links``):
    ``rpc`` (raw requests: dead letters, admin fan-out), ``markers`` and ``txn``."""

    def __init__(self, rpc: InterBrokerRpc, markers: ClusterMarkers,
                 txn: TxnCoordinatorLink) -> None:
        self.rpc = rpc
        self.markers = markers
        self.txn = txn

    async def close(self) -> None:
        await self.markers.close()
        await self.rpc.close()
