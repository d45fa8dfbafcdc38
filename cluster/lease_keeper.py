"""Renewing a broker's etcd lease from a thread of its own (``LeaseKeeper``).

The lease is the broker's liveness in the cluster: etcd deletes its registration (and the
controller key, if it holds it) ``ttl`` seconds after the last renewal, and the controller then
moves its leaderships. A renewal must therefore not wait on the broker's event loop: a loop
busy for a few seconds (a large coordinator replay, a burst of requests on a loaded machine)
would let the lease lapse and move every partition of a broker that is working. So the
renewals run here, in a daemon thread with its own blocking gRPC channel, every ``interval_s``:

- each renewal is one ``LeaseKeepAlive`` exchange bounded by ``call_timeout_s``; a failed one
  (etcd slow or unreachable, a connection a network cut left dead) is retried after
  ``RETRY_S`` on a new channel, to the next endpoint in turn, until the lease lapses;
- a reply with TTL <= 0 means etcd already let the lease lapse: ``on_lost`` is called on the
  event loop (the store registers again) and the thread ends;
- the event loop proves it still turns by calling ``beat``; when it has not for
  ``stall_limit_s`` the broker is taken as hung and renewals stop, so its lease lapses and the
  other brokers take its partitions over. That only gives up this broker's own lease: who
  leads is still decided by etcd's lease expiry and the controller.

``stop`` ends the thread without calling ``on_lost`` (the store revokes the lease itself).
Health for metrics and logs: ``ok`` (the last renewal succeeded), ``renewed_at`` (monotonic).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from aetcd.rpc import rpc_pb2, rpc_pb2_grpc

log = logging.getLogger("shoal.cluster")

# Pause before retrying a failed renewal (on a fresh channel).
RETRY_S = 0.2
CHANNEL_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 100),
                   ("grpc.min_reconnect_backoff_ms", 100),
                   ("grpc.max_reconnect_backoff_ms", 1000)]


class LeaseKeeper:
    """See the module doc. ``start`` once; ``stop`` at shutdown (idempotent)."""

    def __init__(self, endpoints: Sequence[tuple[str, int]], first: int, lease_id: int,
                 ttl_s: int, interval_s: float, loop: asyncio.AbstractEventLoop,
                 on_lost: Callable[[], None], stall_limit_s: float,
                 call_timeout_s: float | None = None, node_id: int = -1) -> None:
        self.endpoints = list(endpoints)
        self.lease_id = lease_id
        self.ttl_s = ttl_s
        self.interval_s = interval_s
        self.stall_limit_s = stall_limit_s
        self.call_timeout_s = call_timeout_s or max(0.5, min(interval_s, ttl_s / 3))
        self.node_id = node_id
        self.ok = True
        self.renewed_at = time.monotonic()
        self._loop = loop
        self._on_lost = on_lost
        self._index = first
        self._channel: grpc.Channel | None = None
        self._stub: Any = None
        self._stop = threading.Event()
        self._beat = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"etcd-lease-{lease_id:x}")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def beat(self) -> None:
        """The event loop turned (called from it every ``interval_s``)."""
        self._beat = time.monotonic()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    # -- the thread --------------------------------------------------------------------------

    def _run(self) -> None:
        warned = stalled = False
        wait = self.interval_s
        try:
            while not self._stop.wait(wait):
                idle = time.monotonic() - self._beat
                if idle > self.stall_limit_s:
                    if not stalled:
                        log.error("node %d: the event loop has not turned for %.0f s; no longer "
                                  "renewing the etcd session, so it lapses within %d s and the "
                                  "other brokers take over this broker's partitions; restart "
                                  "this broker", self.node_id, idle, self.ttl_s)
                        stalled = True
                    self.ok = False
                    wait = self.interval_s
                    continue
                if stalled:
                    log.warning("node %d: the event loop turns again; renewing the etcd "
                                "session again", self.node_id)
                    stalled = False
                try:
                    ttl = self._renew()
                except Exception as e:  # noqa: BLE001 - any failure is a missed renewal
                    self.ok = False
                    if not warned:
                        log.warning("node %d: cannot renew the etcd session at %s (%s); it "
                                    "ends %d s after the last renewal unless etcd answers "
                                    "again; retrying", self.node_id, self._where(),
                                    _why(e), self.ttl_s)
                        warned = True
                    self._next_endpoint()
                    wait = RETRY_S
                    continue
                if self._stop.is_set():
                    return
                if ttl <= 0:
                    self.ok = False
                    self._loop.call_soon_threadsafe(self._on_lost)
                    return
                if warned:
                    log.warning("node %d: etcd session renewed again at %s", self.node_id,
                                self._where())
                warned = False
                self.ok, self.renewed_at = True, time.monotonic()
                wait = self.interval_s
        finally:
            self._close_channel()

    def _renew(self) -> int:
        """One LeaseKeepAlive exchange; the TTL etcd answers (<= 0: the lease is gone)."""
        if self._stub is None:
            host, port = self.endpoints[self._index]
            self._channel = grpc.insecure_channel(f"{host}:{port}", options=CHANNEL_OPTIONS)
            self._stub = rpc_pb2_grpc.LeaseStub(self._channel)
        call = self._stub.LeaseKeepAlive(iter([rpc_pb2.LeaseKeepAliveRequest(ID=self.lease_id)]),
                                         timeout=self.call_timeout_s)
        try:
            for reply in call:
                return int(reply.TTL)
        finally:
            call.cancel()
        raise ConnectionError("etcd closed the keepalive stream without a reply")

    def _next_endpoint(self) -> None:
        self._close_channel()
        self._index = (self._index + 1) % len(self.endpoints)

    def _close_channel(self) -> None:
        if self._channel is not None:
            try:
                self._channel.close()
            except Exception:  # noqa: BLE001 - closing a broken channel
                pass
        self._channel = self._stub = None

    def _where(self) -> str:
        host, port = self.endpoints[self._index]
        return f"{host}:{port}"


def _why(e: BaseException) -> str:
    if isinstance(e, grpc.RpcError):
        code = e.code() if hasattr(e, "code") else None
        return f"gRPC {code.name if code is not None else 'error'}"
    return type(e).__name__
