"""The sans-IO core of the network persister: per-destination batching, retries and deadlines.

Concept (Kafka ``PersisterStateManager``'s send thread): persister calls, one per share-partition
key, are routed to the broker leading the key's ``__share_group_state`` partition and sent as
share-state RPCs. While a request of one kind (Write, Read, ...) to a broker is in flight, further
calls of that kind for that broker wait; when it is answered they all leave together in the next
flush: one request per group (the RPC carries one group id), so with one group at most one
WriteShareGroupState per destination broker is in flight at any time. Each caller still gets
its own per-key result, and only when the response came back (the coordinator answers a write
once its records are durable).

The shell feeds events in and acts on what comes out; no clock, socket or event loop here:

- ``submit(op, params, now_ms)`` -> call id;
- ``sends(now_ms)`` -> ``Send``s to put on the wire now (and marks their (node, op) in flight);
- ``on_results(send_id, outcomes, now_ms)`` / ``on_failure(send_id, code, message, now_ms)``;
- ``on_timer(now_ms)`` when ``next_deadline()`` is reached (retries that are due);
- ``completed()`` -> ``Done``s to hand back to the callers.

Retries (issue 23 "Failures"; Kafka retries these in its persister handlers): a key answered
NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS or COORDINATOR_NOT_AVAILABLE, a lost connection
(NETWORK_EXCEPTION) or a request timeout (REQUEST_TIMED_OUT), and a key whose coordinator
cannot be resolved (no such partition, no live leader: COORDINATOR_NOT_AVAILABLE) are retried
after an exponential backoff (``backoff_ms`` doubling up to ``backoff_max_ms``, +-``jitter``),
routing the key afresh each time (the leader may have moved). Once ``deadline_ms`` has passed
since the call was submitted, it fails with the last error seen (Kafka's code). Any other error
is the caller's answer at once.

Invariants:
- calls for one key run one at a time, in submission order (a later write never overtakes an
  earlier one that is being retried), so the keys of one request are unique;
- at most one flush per (destination, op) is in flight, of at most ``max_keys_per_request``
  keys per group;
- every submitted call ends in exactly one ``Done``;
- a destination that does not answer holds back only the calls routed to it.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from coordinator.share.service import StateOp
from persister.api import SharePartitionKey

__all__ = ["MAX_KEYS_PER_REQUEST", "RETRIABLE", "Done", "Send", "StateBatcher"]

E = ErrorCode
# Keys in one request at most; more wait for the next flush. Bounds the frame (a write carries
# its state batches) and the coordinator's work per request.
MAX_KEYS_PER_REQUEST = 1000
RETRIABLE = frozenset({E.not_coordinator, E.coordinator_load_in_progress,
                       E.coordinator_not_available, E.network_exception, E.request_timed_out})


@dataclass(frozen=True, slots=True)
class Send:
    """One request to put on the wire: ``op`` for ``params`` (unique keys of ``group_id``) to
    broker ``node_id``, within ``timeout_ms``."""

    send_id: int
    node_id: int
    op: StateOp
    group_id: str
    call_ids: tuple[int, ...]
    params: tuple[Any, ...]
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class Done:
    """A call's end: ``result`` is the coordinator's per-key result, or None when the call
    failed here (deadline, non-retriable transport error); ``error`` is its code either way."""

    call_id: int
    op: StateOp
    error: ErrorCode
    message: str | None = None
    result: Any = None


@dataclass(slots=True)
class _Call:
    call_id: int
    op: StateOp
    params: Any
    deadline_ms: int
    attempt: int = 0
    error: ErrorCode = E.none
    message: str | None = None

    @property
    def key(self) -> SharePartitionKey:
        key: SharePartitionKey = self.params.key
        return key


@dataclass(slots=True)
class _Flush:
    open_sends: int = 0


@dataclass(slots=True)
class _Node:
    # op -> group -> call ids waiting for the next flush
    pending: dict[StateOp, dict[str, list[int]]] = field(default_factory=dict)
    flushing: dict[StateOp, _Flush] = field(default_factory=dict)


class StateBatcher:
    """See the module doc. ``route(key)`` answers the node id of the broker leading the key's
    state partition, or None when there is none now (retried as COORDINATOR_NOT_AVAILABLE)."""

    def __init__(self, route: Callable[[SharePartitionKey], int | None], *,
                 deadline_ms: int = 30_000, backoff_ms: int = 100, backoff_max_ms: int = 1_000,
                 request_timeout_ms: int = 30_000, jitter: float = 0.2,
                 max_keys_per_request: int = MAX_KEYS_PER_REQUEST,
                 rand: Callable[[], float] = random.random) -> None:
        """Raises:
            ValueError: a non-positive deadline, backoff, request timeout or request size, or
                jitter outside [0, 1).
        """
        if min(deadline_ms, backoff_ms, backoff_max_ms, request_timeout_ms,
               max_keys_per_request) <= 0:
            raise ValueError("deadline_ms, backoff_ms, backoff_max_ms, request_timeout_ms and "
                             "max_keys_per_request must be positive")
        if not 0 <= jitter < 1:
            raise ValueError("jitter must be in [0, 1)")
        self._route = route
        self.deadline_ms = deadline_ms
        self.backoff_ms = backoff_ms
        self.backoff_max_ms = max(backoff_ms, backoff_max_ms)
        self.request_timeout_ms = request_timeout_ms
        self.max_keys_per_request = max_keys_per_request
        self._jitter = jitter
        self._rand = rand
        self._next_id = 0
        self._calls: dict[int, _Call] = {}
        self._by_key: dict[SharePartitionKey, deque[int]] = {}
        self._nodes: dict[int, _Node] = {}
        self._sends: dict[int, Send] = {}
        self._retries: list[tuple[int, int]] = []  # heap of (due ms, call id)
        self._done: list[Done] = []

    # ------------------------------------------------------------------------------------------
    # Events in

    def submit(self, op: StateOp, params: Any, now_ms: int) -> int:
        """Queue one call (``params.key`` names its share-partition); returns its id."""
        self._next_id += 1
        call = _Call(self._next_id, op, params, now_ms + self.deadline_ms)
        self._calls[call.call_id] = call
        queue = self._by_key.setdefault(call.key, deque())
        queue.append(call.call_id)
        if len(queue) == 1:
            self._dispatch(call, now_ms)
        return call.call_id

    def on_results(self, send_id: int, outcomes: Sequence[tuple[ErrorCode, str | None, Any]],
                   now_ms: int) -> None:
        """The response to ``send_id``: one ``(error, message, result)`` per call, in order."""
        send = self._close_send(send_id)
        if send is None:
            return
        for call_id, (code, message, result) in zip(send.call_ids, outcomes, strict=True):
            call = self._calls[call_id]
            if code in RETRIABLE:
                self._retry(call, code, message, now_ms)
            else:
                self._finish(call, code, message, result, now_ms)

    def on_failure(self, send_id: int, code: ErrorCode, message: str, now_ms: int) -> None:
        """``send_id`` got no response: every call in it is retried (``code`` in ``RETRIABLE``)
        or fails with ``code``."""
        send = self._close_send(send_id)
        if send is None:
            return
        for call_id in send.call_ids:
            call = self._calls[call_id]
            if code in RETRIABLE:
                self._retry(call, code, message, now_ms)
            else:
                self._finish(call, code, message, None, now_ms)

    def on_timer(self, now_ms: int) -> None:
        """Route the calls whose backoff is over (a retry at its deadline fails it)."""
        while self._retries and self._retries[0][0] <= now_ms:
            _, call_id = heapq.heappop(self._retries)
            call = self._calls.get(call_id)
            if call is not None:
                self._dispatch(call, now_ms)

    # ------------------------------------------------------------------------------------------
    # Actions out

    def sends(self, now_ms: int) -> list[Send]:
        """The requests to send now: for every (destination, op) with waiting calls and no flush
        in flight, one request per group. Calls past their deadline fail instead."""
        out: list[Send] = []
        for node_id, node in list(self._nodes.items()):
            for op in list(node.pending):
                if op in node.flushing:
                    continue
                groups = node.pending.pop(op)
                flush = _Flush()
                for group_id, call_ids in groups.items():
                    live: list[_Call] = []
                    for i, call_id in enumerate(call_ids):
                        if len(live) == self.max_keys_per_request:
                            # The rest go in the next flush (bounded request size).
                            node.pending.setdefault(op, {})[group_id] = call_ids[i:]
                            break
                        call = self._calls[call_id]
                        if now_ms >= call.deadline_ms:
                            self._expire(call, now_ms)
                        else:
                            live.append(call)
                    if not live:
                        continue
                    budget = max(c.deadline_ms for c in live) - now_ms
                    self._next_id += 1
                    send = Send(self._next_id, node_id, op, group_id,
                                tuple(c.call_id for c in live), tuple(c.params for c in live),
                                min(self.request_timeout_ms, budget))
                    self._sends[send.send_id] = send
                    flush.open_sends += 1
                    out.append(send)
                if flush.open_sends:
                    node.flushing[op] = flush
        return out

    def completed(self) -> list[Done]:
        """The calls that ended since the last call (each reported once)."""
        done, self._done = self._done, []
        return done

    def next_deadline(self) -> int | None:
        """When ``on_timer`` is next due (ms), or None."""
        return self._retries[0][0] if self._retries else None

    # ------------------------------------------------------------------------------------------
    # Introspection (metrics, tests)

    def in_flight(self, node_id: int) -> frozenset[StateOp]:
        """The ops with a flush in flight to ``node_id``."""
        node = self._nodes.get(node_id)
        return frozenset(node.flushing) if node is not None else frozenset()

    @property
    def outstanding(self) -> int:
        """Calls not yet ended."""
        return len(self._calls)

    def abandon(self, code: ErrorCode, message: str) -> None:
        """End every outstanding call with ``code`` (the persister is closing)."""
        for call in list(self._calls.values()):
            self._done.append(Done(call.call_id, call.op, code, message))
        self._calls.clear()
        self._by_key.clear()
        self._nodes.clear()
        self._sends.clear()
        self._retries.clear()

    # ------------------------------------------------------------------------------------------

    def _dispatch(self, call: _Call, now_ms: int) -> None:
        if now_ms >= call.deadline_ms:
            self._expire(call, now_ms)
            return
        node_id = self._route(call.key)
        if node_id is None:
            self._retry(call, E.coordinator_not_available,
                        f"no live broker leads the share-state partition of "
                        f"{call.key.coordinator_key()}", now_ms)
            return
        node = self._nodes.setdefault(node_id, _Node())
        node.pending.setdefault(call.op, {}).setdefault(call.key.group_id, []).append(call.call_id)

    def _retry(self, call: _Call, code: ErrorCode, message: str | None, now_ms: int) -> None:
        call.attempt += 1
        call.error, call.message = code, message
        delay = min(self.backoff_max_ms, self.backoff_ms * 2 ** min(call.attempt - 1, 30))
        delay = int(delay * (1 + self._jitter * (2 * self._rand() - 1)))
        due = min(now_ms + max(delay, 1), call.deadline_ms)
        heapq.heappush(self._retries, (due, call.call_id))

    def _expire(self, call: _Call, now_ms: int) -> None:
        code = call.error if call.error != E.none else E.request_timed_out
        detail = f": {call.message}" if call.message else ""
        message = (f"{call.op.name} of share-partition {call.key.coordinator_key()} did not "
                   f"reach its share coordinator within {self.deadline_ms} ms "
                   f"({call.attempt} attempts; last error {code.name.upper()}{detail})")
        self._finish(call, code, message, None, now_ms)

    def _finish(self, call: _Call, code: ErrorCode, message: str | None, result: Any,
                now_ms: int) -> None:
        del self._calls[call.call_id]
        self._done.append(Done(call.call_id, call.op, code, message, result))
        queue = self._by_key[call.key]
        queue.popleft()
        if not queue:
            del self._by_key[call.key]
            return
        self._dispatch(self._calls[queue[0]], now_ms)

    def _close_send(self, send_id: int) -> Send | None:
        send = self._sends.pop(send_id, None)
        if send is None:
            return None  # abandoned
        node = self._nodes[send.node_id]
        flush = node.flushing[send.op]
        flush.open_sends -= 1
        if flush.open_sends == 0:
            del node.flushing[send.op]
        return send
