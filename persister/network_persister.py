"""``NetworkPersister``: share state kept with a share coordinator on another broker, over the wire.

Concept (Kafka ``DefaultStatePersister`` + ``PersisterStateManager``): a share-partition leader
calls the persister once per share-partition key; each call goes, as an Initialize/Read/Write/
Delete/ReadSummary ShareGroupState request (API keys 83-87), to the broker leading the key's
``__share_group_state`` partition (``coordinator.share.service.partition_for_key``; partition
count from ``num_partitions``, leader and its endpoint on the inter-broker listener from the
``ClusterMetadata``). The requests travel over a ``Transport`` (``client.pool.ConnectionPool``:
one connection per broker, authenticated as a ``super.users`` principal, since the RPCs are
authorized as CLUSTER_ACTION).

Batching, retries and deadlines are ``persister/network_batcher.py``'s (sans-IO); this module is
its asyncio shell: it submits calls, puts each ``Send`` on the wire in a task it owns, feeds the
answers back and arms one timer for the next retry. Calls made in the same event-loop turn share
a flush; later ones wait for the flush in flight to the same broker. Each destination broker has
its own sends, so a broker that is down delays only the calls routed to it.

Parameters and the broker configs that feed them (``broker.inter_broker.network_persister_for``):

- ``deadline_ms``: how long a call may keep retrying before it fails with Kafka's code (the
  last error: NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
  NETWORK_EXCEPTION or REQUEST_TIMED_OUT). Fed by ``request.timeout.ms`` (Kafka's inter-broker
  request timeout, default 30000).
- ``request_timeout_ms``: one request's bound (never past the latest deadline of its calls);
  also ``request.timeout.ms``.
- ``backoff_ms`` / ``backoff_max_ms``: the exponential backoff between attempts, fed by
  ``retry.backoff.ms`` / ``retry.backoff.max.ms`` (Kafka's client defaults 100 / 1000; Kafka's
  persister hard-codes 1 s / 30 s, too slow to notice a coordinator that came back).
- the connect bound is the transport's (``socket.connection.setup.timeout.ms``).

Counters for metrics (``stats()``): requests sent, errors (per-key error codes and failed
requests, by code), latency sum/count, per (API key, destination node); the most requests
ever in flight at once per (API key, destination); calls failed without an answer.

Invariants: expected outcomes (fencing, unknown key, a coordinator unreachable past the
deadline) come back as error codes, never as exceptions; one call, one key, one reply, given
once the response arrived (a write is answered after the coordinator made it durable).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from client.errors import KafkaError
from cluster.metadata import ClusterMetadata
from coordinator.share.opener import SHARE_STATE_TOPIC
from coordinator.share.service import StateOp, error_reply, partition_for_key
from persister.api import (
    DeleteParams,
    InitializeParams,
    ReadParams,
    ReadResult,
    SharePartitionKey,
    SummaryResult,
    WriteParams,
    WriteResult,
)
from persister.network_batcher import Send, StateBatcher
from persister.network_codec import VERSIONS, build_request, parse_response

__all__ = ["NetworkPersister", "Transport"]

log = logging.getLogger("shoal.persister.network")


class Transport(Protocol):
    """How requests reach another broker (``client.pool.ConnectionPool`` has this shape)."""

    async def request(self, node_id: int, host: str, port: int, api_key: int, lo: int, hi: int,
                      build: Callable[[int], Any],
                      timeout: float | None = None) -> tuple[int, Any]: ...

    async def close(self) -> None: ...


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class NetworkPersister:
    """``persister.api.Persister`` over share-state RPCs (see the module doc)."""

    def __init__(self, metadata: ClusterMetadata, transport: Transport, *, listener: str,
                 num_partitions: int | Callable[[], int],
                 deadline_ms: int = 30_000, request_timeout_ms: int = 30_000,
                 backoff_ms: int = 100, backoff_max_ms: int = 1_000,
                 clock_ms: Callable[[], int] = _monotonic_ms,
                 state_topic: str = SHARE_STATE_TOPIC) -> None:
        """Raises:
            ValueError: a non-positive deadline, timeout or backoff.
        """
        self._metadata = metadata
        self._transport = transport
        self.listener = listener
        self._num_partitions = num_partitions
        self._topic = state_topic
        self._clock_ms = clock_ms
        self._core = StateBatcher(self._route, deadline_ms=deadline_ms, backoff_ms=backoff_ms,
                                  backoff_max_ms=backoff_max_ms,
                                  request_timeout_ms=request_timeout_ms)
        self._futures: dict[int, asyncio.Future[Any]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due: int | None = None
        self._pump_soon = False
        self._closed = False
        # Metrics (see stats()).
        self.requests: Counter[tuple[int, int]] = Counter()
        self.errors: Counter[tuple[int, int, str]] = Counter()
        self.latency_sum_s: defaultdict[tuple[int, int], float] = defaultdict(float)
        self.latency_count: Counter[tuple[int, int]] = Counter()
        self.max_in_flight: Counter[tuple[int, int]] = Counter()
        self.failed_calls: Counter[tuple[int, str]] = Counter()
        self._in_flight: Counter[tuple[int, int]] = Counter()

    # ------------------------------------------------------------------------------------------
    # Persister

    async def initialize(self, params: InitializeParams) -> WriteResult:
        result: WriteResult = await self._call(StateOp.INITIALIZE, params)
        return result

    async def read(self, params: ReadParams) -> ReadResult:
        result: ReadResult = await self._call(StateOp.READ, params)
        return result

    async def write(self, params: WriteParams) -> WriteResult:
        result: WriteResult = await self._call(StateOp.WRITE, params)
        return result

    async def delete(self, params: DeleteParams) -> WriteResult:
        result: WriteResult = await self._call(StateOp.DELETE, params)
        return result

    async def read_summary(self, params: ReadParams) -> SummaryResult:
        result: SummaryResult = await self._call(StateOp.READ_SUMMARY, params)
        return result

    # ------------------------------------------------------------------------------------------

    def stats(self) -> dict[str, dict[Any, Any]]:
        """A copy of the counters: ``requests``/``latency_sum_s``/``latency_count``/
        ``max_in_flight`` keyed by (API key, node id), ``errors`` (error codes in responses and
        requests without one) by (API key, node id, code name), ``failed_calls`` (calls that
        ended without a coordinator's answer: deadline, refused connection) by (API key, code
        name)."""
        return {"requests": dict(self.requests), "errors": dict(self.errors),
                "latency_sum_s": dict(self.latency_sum_s),
                "latency_count": dict(self.latency_count),
                "max_in_flight": dict(self.max_in_flight),
                "failed_calls": dict(self.failed_calls)}

    async def close(self) -> None:
        """Stop: outstanding calls end with COORDINATOR_NOT_AVAILABLE, the sends are cancelled
        and the transport is closed (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._core.abandon(ErrorCode.coordinator_not_available,
                           "the broker is shutting down; the share-state call was not sent")
        self._deliver()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._transport.close()

    async def _call(self, op: StateOp, params: Any) -> Any:
        if self._closed:
            return error_reply(op, ErrorCode.coordinator_not_available,
                               "the share-state persister is closed")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        call_id = self._core.submit(op, params, self._clock_ms())
        self._futures[call_id] = fut
        self._schedule_pump()
        return await fut

    def _route(self, key: SharePartitionKey) -> int | None:
        n = self._num_partitions if isinstance(self._num_partitions, int) else self._num_partitions()
        info = self._metadata.partition(self._topic, partition_for_key(key, n))
        if info is None or info.leader < 0:
            return None
        if self._metadata.node(info.leader, self.listener) is None:
            return None
        return info.leader

    def _schedule_pump(self) -> None:
        # Calls made in the same loop turn share one flush (no delay beyond that).
        if not self._pump_soon:
            self._pump_soon = True
            asyncio.get_running_loop().call_soon(self._pump)

    def _pump(self) -> None:
        self._pump_soon = False
        if self._closed:
            return
        now = self._clock_ms()
        self._core.on_timer(now)
        for send in self._core.sends(now):
            task = asyncio.create_task(self._send(send),
                                       name=f"shoal-persister-{send.op.name}-{send.node_id}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._deliver()
        self._arm(now)

    def _arm(self, now: int) -> None:
        due = self._core.next_deadline()
        if due == self._timer_due and self._timer is not None:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_due = due
        if due is not None:
            self._timer = asyncio.get_running_loop().call_later(max(0, due - now) / 1000,
                                                                self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_due = None
        self._pump()

    def _deliver(self) -> None:
        for done in self._core.completed():
            fut = self._futures.pop(done.call_id, None)
            if done.result is None:
                self.failed_calls[(done.op.value, done.error.name.upper())] += 1
            if fut is None or fut.done():
                continue  # the caller stopped waiting
            result = done.result if done.result is not None else error_reply(
                done.op, done.error, done.message)
            if done.result is None:
                log.warning("share-state %s failed: %s", done.op.name, done.message)
            fut.set_result(result)

    async def _send(self, send: Send) -> None:
        key = (send.op.value, send.node_id)
        self._in_flight[key] += 1
        self.max_in_flight[key] = max(self.max_in_flight[key], self._in_flight[key])
        started = time.perf_counter()
        code, message, outcomes = await self._exchange(send)
        self._in_flight[key] -= 1
        now = self._clock_ms()
        if outcomes is None:
            self.errors[(send.op.value, send.node_id, code.name.upper())] += 1
            self._core.on_failure(send.send_id, code, message, now)
        else:
            self.latency_sum_s[key] += time.perf_counter() - started
            self.latency_count[key] += 1
            for c, _m, _r in outcomes:
                if c != ErrorCode.none:
                    self.errors[(send.op.value, send.node_id, c.name.upper())] += 1
            self._core.on_results(send.send_id, outcomes, now)
        if not self._closed:
            self._pump()

    async def _exchange(self, send: Send) -> tuple[ErrorCode, str, Any]:
        """Send one request; (code, message, None) when it got no answer, else the outcomes."""
        where = f"broker {send.node_id}"
        node = self._metadata.node(send.node_id, self.listener)
        if node is None:
            return (ErrorCode.coordinator_not_available,
                    f"{where} has no endpoint on listener {self.listener} (not live?)", None)
        where = f"broker {send.node_id} ({node.host}:{node.port})"
        lo, hi = VERSIONS[send.op]
        op, group, params = send.op, send.group_id, send.params
        self.requests[(send.op.value, send.node_id)] += 1
        try:
            _version, response = await self._transport.request(
                node.node_id, node.host, node.port, op.value, lo, hi,
                lambda v: build_request(op, group, params, v), send.timeout_ms / 1000)
            return ErrorCode.none, "", parse_response(op, response, params)
        except TimeoutError:
            return (ErrorCode.request_timed_out,
                    f"{where} did not answer {op.name} within {send.timeout_ms} ms", None)
        except KafkaError as e:  # SASL refused, no common version: not retried
            return e.code, f"{where}: {e}", None
        except (ConnectionError, OSError) as e:
            return ErrorCode.network_exception, f"{where} is unreachable: {e}", None
        except Exception as e:  # noqa: BLE001 - a response that did not decode, a bug
            log.exception("share-state %s to %s failed", op.name, where)
            return ErrorCode.unknown_server_error, f"{where}: {e}", None

