"""Cluster metadata in etcd (v3 API, through the asyncio client ``aetcd``).

etcd gives the consensus; this module only uses its primitives:

- **Leases for liveness.** A broker registers ``brokers/<node.id>`` under a lease of
  ``broker.session.timeout.ms`` and renews it every ``broker.heartbeat.interval.ms`` from a
  thread of its own (``cluster/lease_keeper.py``: a busy event loop does not delay renewals). A
  broker that stops renewing (killed, partitioned away, its loop hung for LOOP_STALL_LIMIT_S)
  leaves the view when etcd expires the lease; one that shuts down revokes it and leaves at
  once.
- **Compare-and-swap for every change.** Creating a key compares its create revision with 0;
  changing one compares its mod revision with the one the change was computed from. A lost race
  is an answer (``False``), never a silent overwrite.
- **One watch to spread changes.** ``start()`` reads the whole prefix, then watches it from the
  next revision, so the ``ClusterView`` sees every change exactly once and in order.
- **Election by lease.** The controller is whoever created ``controller`` under its lease; the
  others wait for that key's deletion and try again.

Errors are ``ClusterStoreError`` with a message for the operator: which etcd endpoint, which
node id, what to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from typing import Any

import aetcd

from cluster.errors import (
    ClusterIdMismatchError,
    ClusterStoreError,
    DuplicateNodeIdError,
    TooManyChangesError,
)
from cluster.cancellation import raise_if_cancelling
from cluster.lease_keeper import LeaseKeeper
from cluster.view import (
    BrokerRegistration,
    ClusterView,
    ControllerRecord,
    Keys,
    MetadataFormatError,
    ScramRecord,
    TopicRecord,
    acl_id,
    acl_to_json,
)
from protocol.acl_types import AclBinding

log = logging.getLogger("shoal.cluster")

# Seconds each etcd call may take before it counts as failed.
RPC_TIMEOUT_S = 5
# After a network cut the broker must find etcd again within seconds of the cut healing:
# - keepalive pings (every 6 s, while the watch stream is open: etcd's default enforcement
#   allows one per 5 s, with a stream) find a connection the cut left dead in 9 s; without
#   them its calls time out one by one until the kernel gives the connection up, minutes on;
# - gRPC backs off reconnecting up to 120 s by default; retry at most every 2 s instead.
GRPC_OPTIONS = {"grpc.keepalive_time_ms": 6000, "grpc.keepalive_timeout_ms": 3000,
                "grpc.keepalive_permit_without_calls": 0,
                "grpc.initial_reconnect_backoff_ms": 200, "grpc.min_reconnect_backoff_ms": 200,
                "grpc.max_reconnect_backoff_ms": 2000}
# The longest ``close`` waits for the watch and renewal tasks, and for the client to close.
CLOSE_TIMEOUT_S = 5
# An event loop that has not turned for this long is hung: the lease keeper stops renewing so
# the other brokers take over (``cluster/lease_keeper.py``). Loop stalls shorter than this keep
# the session, however short the session timeout.
LOOP_STALL_LIMIT_S = 30.0


def parse_endpoints(spec: str) -> list[tuple[str, int]]:
    """``etcd://host:port[,host:port...]`` (the scheme is optional) as (host, port) pairs.

    Raises:
        ValueError: an entry is not host:port with a port in 1-65535.
    """
    body = spec.removeprefix("etcd://")
    out: list[tuple[str, int]] = []
    for item in filter(None, (s.strip() for s in body.split(","))):
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"etcd endpoint {item!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError(f"no etcd endpoint in {spec!r}")
    return out


# etcd refuses a transaction of more than --max-txn-ops (128 by default) operations per level,
# so a large change is one transaction of nested ones of at most TXN_CHUNK operations each;
# MAX_TXN_OPS bounds the whole (a request needing more is refused before it reaches etcd).
TXN_CHUNK = 100
MAX_TXN_OPS = 2000



class EtcdClusterStore:
    """One broker's connection to the cluster metadata in etcd.

    Use: ``connect()``, ``ensure_cluster_id()``, ``register()``, ``start()`` (the watch), then
    ``campaign()`` in a task if the broker may be controller; ``close()`` at shutdown.
    Listeners added with ``add_listener`` are called with the kind of change after the view
    applied it.
    """

    def __init__(self, endpoints: Sequence[tuple[str, int]], prefix: str = "/shoal",
                 session_timeout_ms: int = 6000, heartbeat_interval_ms: int = 2000) -> None:
        self.endpoints = list(endpoints)
        self.keys = Keys(prefix)
        self.view = ClusterView(self.keys)
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.client: aetcd.Client | None = None
        self.endpoint: tuple[str, int] | None = None
        self.registration: BrokerRegistration | None = None
        self._lease: aetcd.Lease | None = None
        self._keeper: LeaseKeeper | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._listeners: list[Callable[[str], None]] = []
        self._view_changed = asyncio.Event()
        # Health, for metrics and logs: the watch is following etcd; the last lease renewal
        # succeeded.
        self.watch_ok = False

    # -- connection --------------------------------------------------------------------------

    async def connect(self) -> None:
        """Connect to the first etcd endpoint that answers.

        Raises:
            ClusterStoreError: none answered within RPC_TIMEOUT_S each.
        """
        problems = []
        for host, port in self.endpoints:
            client = aetcd.Client(host=host, port=port, timeout=RPC_TIMEOUT_S,
                                  options=GRPC_OPTIONS)
            try:
                await asyncio.wait_for(client.connect(), RPC_TIMEOUT_S)
                await asyncio.wait_for(client.get(self.keys.cluster_id), RPC_TIMEOUT_S)
            except (aetcd.ClientError, asyncio.TimeoutError, OSError) as e:
                problems.append(f"{host}:{port}: {type(e).__name__}")
                with contextlib.suppress(Exception):
                    await client.close()
                continue
            self.client, self.endpoint = client, (host, port)
            return
        raise ClusterStoreError(
            "cannot reach etcd at " + ", ".join(problems)
            + "; start etcd (make cluster does) or fix --cluster / cluster.etcd.endpoints")

    def _etcd(self) -> aetcd.Client:
        if self.client is None:
            raise ClusterStoreError("not connected to etcd; call connect() first")
        return self.client

    async def close(self) -> None:
        """Stop the watch and the lease renewal and revoke the lease, so this broker leaves the
        view (and gives up the controller role) at once instead of after its session timeout."""
        if self._keeper is not None:
            self._keeper.stop()
            self._keeper = None
        for t in self._tasks:
            t.cancel()
        if self._tasks:  # bounded: a stuck etcd call must not hold up a shutdown
            await asyncio.wait(self._tasks, timeout=CLOSE_TIMEOUT_S)
        self._tasks.clear()
        if self.client is not None:
            if self._lease is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.client.revoke_lease(self._lease.id), 2)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.client.close(), CLOSE_TIMEOUT_S)
        self.client = None
        self._lease = None

    # -- cluster id ----------------------------------------------------------------------------

    async def ensure_cluster_id(self, local: str, adopt: bool = False) -> str:
        """The cluster's id: ``local`` is written if etcd has none yet. With ``adopt`` (a data
        directory that has no id yet) whatever etcd holds is the answer, so brokers starting
        together on an empty etcd all end up with the id of the one that wrote first.

        Raises:
            ClusterIdMismatchError: etcd holds another id than ``local`` (and not ``adopt``).
        """
        etcd = self._etcd()
        key = self.keys.cluster_id
        await etcd.transaction(
            compare=[etcd.transactions.create(key) == 0],
            success=[etcd.transactions.put(key, local.encode())], failure=[])
        got = await etcd.get(key)
        stored = got.value.decode() if got is not None else local
        if stored != local and not adopt:
            raise ClusterIdMismatchError(
                f"this broker's data directory belongs to cluster {local}, but etcd "
                f"({self._where()}) holds cluster {stored}; point --cluster at the right etcd "
                f"or start this broker with an empty data directory")
        return stored

    # -- registration and liveness -------------------------------------------------------------

    async def register(self, registration: BrokerRegistration) -> None:
        """Register this broker under a new lease and keep renewing it.

        A registration with the same node id but another incarnation may be this broker's own
        from before a ``kill -9``: it is waited out for one session timeout (its lease lapses);
        one that outlives that belongs to a live broker.

        Raises:
            DuplicateNodeIdError: a live broker holds this node id.
        """
        etcd = self._etcd()
        ttl = max(2, math.ceil(self.session_timeout_ms / 1000))
        self._lease = await etcd.lease(ttl)
        key = self.keys.broker(registration.node_id)
        deadline = asyncio.get_running_loop().time() + ttl + 2
        while True:
            ok, _ = await etcd.transaction(
                compare=[etcd.transactions.create(key) == 0],
                success=[etcd.transactions.put(key, registration.to_json(), lease=self._lease)],
                failure=[])
            if ok:
                break
            if asyncio.get_running_loop().time() >= deadline:
                await etcd.revoke_lease(self._lease.id)
                self._lease = None
                raise DuplicateNodeIdError(
                    f"node id {registration.node_id} is already registered by a live broker in "
                    f"etcd ({self._where()}); give this broker another node.id")
            await asyncio.sleep(0.25)
            await etcd.refresh_lease(self._lease.id)  # ours must outlive the wait
        self.registration = registration
        self._view_changed.set()  # waiters may read the registration beside the view
        self._start_keeper(ttl)
        log.info("registered as node %d in etcd %s (session timeout %d s)",
                 registration.node_id, self._where(), ttl)

    async def update_registration(self, registration: BrokerRegistration) -> None:
        """Rewrite this broker's registration (same node id, same lease), e.g. to mark it
        shutting down; later re-registrations after a lost session use the new one.

        Raises:
            ClusterStoreError: not registered.
        """
        etcd = self._etcd()
        if self._lease is None or self.registration is None:
            raise ClusterStoreError("register before updating the registration")
        await etcd.put(self.keys.broker(registration.node_id), registration.to_json(),
                       lease=self._lease)
        self.registration = registration
        self._view_changed.set()

    def _start_keeper(self, ttl: int) -> None:
        """Renew the lease from a thread of its own (``LeaseKeeper``), with a task that tells
        it the event loop still turns."""
        assert self._lease is not None and self.registration is not None
        loop = asyncio.get_running_loop()
        interval = self.heartbeat_interval_ms / 1000
        first = self.endpoints.index(self.endpoint) if self.endpoint in self.endpoints else 0
        if self._keeper is not None:
            self._keeper.stop()
        keeper = self._keeper = LeaseKeeper(
            self.endpoints, first, self._lease.id, ttl, interval, loop,
            lambda: self._lease_expired(keeper), LOOP_STALL_LIMIT_S,
            node_id=self.registration.node_id)
        keeper.start()
        if not any(t.get_name() == "etcd loop beat" for t in self._tasks if not t.done()):
            self._spawn(self._beat(interval), "etcd loop beat")

    @property
    def session_ok(self) -> bool:
        """The last renewal of this broker's etcd session succeeded."""
        return self._keeper is not None and self._keeper.ok

    async def _beat(self, interval: float) -> None:
        while True:
            if self._keeper is not None:
                self._keeper.beat()
            await asyncio.sleep(interval)

    def _lease_expired(self, keeper: LeaseKeeper) -> None:
        """(On the loop) etcd let ``keeper``'s lease lapse: register again, with a new lease
        (unless that keeper was replaced or stopped meanwhile)."""
        if keeper is not self._keeper or keeper.stopped:
            return
        registration, self.registration = self.registration, None
        self._view_changed.set()
        self._keeper = None
        if registration is None or self.client is None:
            return
        log.warning("node %d: this broker's etcd session expired (its registration and any "
                    "leaderships moved); registering again", registration.node_id)
        self._spawn(self._register_again(registration), "registering again")

    async def _register_again(self, registration: BrokerRegistration) -> None:
        while True:
            try:
                await asyncio.wait_for(self.register(registration), 3 * RPC_TIMEOUT_S)
                return
            except (aetcd.ClientError, asyncio.TimeoutError, OSError) as e:
                raise_if_cancelling()
                log.warning("node %d: registering again in etcd %s failed (%s); retrying in "
                            "1 s", registration.node_id, self._where(), type(e).__name__)
                await asyncio.sleep(1)

    # -- controller election -------------------------------------------------------------------

    async def campaign(self) -> ControllerRecord:
        """Wait until this broker is the controller, and return its record.

        Call after ``register`` and ``start``. The role lasts as long as the lease: when this
        broker's session ends, etcd deletes the key and another broker's campaign wins.
        """
        etcd = self._etcd()
        if self.registration is None or self._lease is None:
            raise ClusterStoreError("register before campaigning for controller")
        node_id = self.registration.node_id
        body = json.dumps({"node_id": node_id}).encode()
        while True:
            ok, replies = await etcd.transaction(
                compare=[etcd.transactions.create(self.keys.controller) == 0],
                success=[etcd.transactions.put(self.keys.controller, body, lease=self._lease)],
                failure=[])
            if ok:
                revision = replies[0].response_put.header.revision
                log.info("node %d is the controller (epoch %d)", node_id, revision)
                return ControllerRecord(node_id, revision)
            await self._wait_view(lambda: self.view.controller is None)

    # -- id blocks ------------------------------------------------------------------------------

    async def allocate_block(self, name: str, size: int) -> int:
        """Reserve ``size`` consecutive ids of counter ``name`` for this broker; returns the
        first. Compare-and-swap on the counter's revision, so no two brokers get overlapping
        blocks (producer ids: Kafka's controller hands out blocks the same way)."""
        etcd = self._etcd()
        key = f"{self.keys.prefix}/counters/{name}".encode()
        while True:
            got = await etcd.get(key)
            if got is None:
                start = 0
                compare = [etcd.transactions.create(key) == 0]
            else:
                start = int(got.value.decode())
                compare = [etcd.transactions.mod(key) == got.mod_revision]
            ok, _ = await etcd.transaction(
                compare=compare, success=[etcd.transactions.put(key, str(start + size).encode())],
                failure=[])
            if ok:
                return start

    # -- group configs ---------------------------------------------------------------------------

    async def put_group_configs(self, changes: dict[str, dict[str, str] | None]) -> None:
        """Write the overrides of several groups in one transaction (None or empty: the group
        has none any more); all or nothing."""
        etcd = self._etcd()
        ops = []
        for group_id, configs in changes.items():
            key = self.keys.group_config(group_id)
            ops.append(etcd.transactions.put(key, _json_bytes(configs)) if configs
                       else etcd.transactions.delete(key))
        await etcd.transaction(compare=[], success=ops, failure=[])

    # -- ACLs, SCRAM credentials, features ------------------------------------------------------

    async def put_acls(self, added: Iterable[AclBinding],
                       removed: Iterable[AclBinding]) -> tuple[int, bool]:
        """Add and remove ACL bindings in one transaction (all or nothing); returns the
        transaction's revision and whether it changed anything (see ``write``)."""
        k = self.keys
        return await self.write([(k.acl(acl_id(b)), acl_to_json(b)) for b in added],
                                [k.acl(acl_id(b)) for b in removed])

    async def put_scram(self, upserts: Iterable[tuple[str, str, ScramRecord]],
                        deletes: Iterable[tuple[str, str]]) -> tuple[int, bool]:
        """Set and delete SCRAM credentials ((user, mechanism[, record])) in one transaction."""
        k = self.keys
        return await self.write(
            [(k.scram_credential(u, m), r.to_json()) for u, m, r in upserts],
            [k.scram_credential(u, m) for u, m in deletes])

    async def ensure_features(self, levels: dict[str, int]) -> dict[str, int]:
        """The cluster's finalized feature levels: ``levels`` if none are stored yet (the first
        broker of a cluster sets them), else what is stored."""
        etcd = self._etcd()
        key = self.keys.features
        await etcd.transaction(
            compare=[etcd.transactions.create(key) == 0],
            success=[etcd.transactions.put(key, _json_bytes(levels))], failure=[])
        got = await etcd.get(key)
        if got is None:
            return dict(levels)
        try:
            return {str(n): int(v) for n, v in json.loads(got.value).items()}
        except (ValueError, TypeError, AttributeError) as e:
            raise ClusterStoreError(f"the feature levels in etcd ({self._where()}) are not "
                                    f"readable ({e}); fix or delete {key.decode()} with "
                                    "etcdctl") from None

    async def write(self, puts: Sequence[tuple[bytes, bytes]],
                    deletes: Sequence[bytes]) -> tuple[int, bool]:
        """Put and delete keys in one transaction: all or nothing. Returns the store revision
        it ran at (its events carry that revision) and whether any key changed (deleting keys
        that are gone changes nothing).

        Raises:
            TooManyChangesError: more than MAX_TXN_OPS operations.
        """
        etcd = self._etcd()
        t = etcd.transactions
        ops = [t.put(key, value) for key, value in puts] + [t.delete(key) for key in deletes]
        if len(ops) > MAX_TXN_OPS:
            raise TooManyChangesError(f"{len(ops)} changes in one request; at most "
                                      f"{MAX_TXN_OPS}")
        if not ops:
            return self.view.revision, False
        if len(ops) > TXN_CHUNK:
            ops = [aetcd.transactions.Txn(compare=[], success=ops[i:i + TXN_CHUNK], failure=[])
                   for i in range(0, len(ops), TXN_CHUNK)]
        _, replies = await etcd.transaction(compare=[], success=ops, failure=[])
        revision, changed = 0, bool(puts)
        for reply in _flatten(replies):
            kind = reply.WhichOneof("response")
            body = getattr(reply, kind)
            revision = max(revision, int(body.header.revision))
            if kind == "response_delete_range" and body.deleted:
                changed = True
        return revision, changed

    # -- topics (compare-and-swap) -------------------------------------------------------------

    async def create_topic(self, record: TopicRecord) -> bool:
        """Write a new topic; ``False`` if a topic of that name exists."""
        etcd = self._etcd()
        key = self.keys.topic(record.name)
        ok, _ = await etcd.transaction(
            compare=[etcd.transactions.create(key) == 0],
            success=[etcd.transactions.put(key, record.to_json())], failure=[])
        return bool(ok)

    async def update_topic(self, record: TopicRecord, expected_revision: int) -> bool:
        """Replace a topic if it is unchanged since ``expected_revision``; ``False`` if not."""
        etcd = self._etcd()
        key = self.keys.topic(record.name)
        ok, _ = await etcd.transaction(
            compare=[etcd.transactions.mod(key) == expected_revision],
            success=[etcd.transactions.put(key, record.to_json())], failure=[])
        return bool(ok)

    async def delete_topic(self, name: str, expected_revision: int) -> bool:
        """Delete a topic if it is unchanged since ``expected_revision``; ``False`` if not."""
        etcd = self._etcd()
        key = self.keys.topic(name)
        ok, _ = await etcd.transaction(
            compare=[etcd.transactions.mod(key) == expected_revision],
            success=[etcd.transactions.delete(key)], failure=[])
        return bool(ok)

    # -- the view ------------------------------------------------------------------------------

    def add_listener(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(kind)`` after each change the view applies (see ``ClusterView``)."""
        self._listeners.append(listener)

    async def start(self) -> None:
        """Load the whole prefix into the view, then keep it current with one watch.

        The watch outlives etcd outages: when its stream breaks, the view stays as it was (the
        broker keeps serving from it) and the store reloads the prefix and watches again, with
        backoff, until etcd answers; what changed meanwhile, deletions included, reaches the
        listeners as ordinary events.
        """
        revision = await self._load_snapshot()
        self._spawn(self._follow(revision), "metadata watch")

    async def _load_snapshot(self) -> int:
        """Apply the prefix's current contents (and the deletion of anything the view holds
        that is gone); returns the snapshot's revision."""
        etcd = self._etcd()
        snapshot = await asyncio.wait_for(etcd.get_prefix(self.keys.root), RPC_TIMEOUT_S)
        present = {kv.key for kv in snapshot}
        view = self.view
        gone = [key for key in view.present_keys() if key not in present]
        for key in gone:
            self._notify(view.apply_delete(key, snapshot.header.revision))
        for kv in snapshot:
            self._apply_put(kv.key, kv.value, kv.mod_revision, kv.create_revision)
        self.view.revision = max(self.view.revision, snapshot.header.revision)
        return int(snapshot.header.revision)

    async def _follow(self, revision: int) -> None:
        etcd = self._etcd()
        backoff = 0.2
        broken_since: float | None = None
        loop = asyncio.get_running_loop()
        while True:
            try:
                if broken_since is not None:
                    revision = await self._load_snapshot()
                    log.warning("etcd %s is reachable again after %.1f s; cluster metadata "
                                "reloaded", self._where(), loop.time() - broken_since)
                    broken_since, backoff = None, 0.2
                watch = await etcd.watch_prefix(self.keys.root, start_revision=revision + 1)
                self.watch_ok = True
                try:
                    async for event in watch:
                        kv = event.kv
                        revision = max(revision, kv.mod_revision)
                        if event.kind == aetcd.EventKind.PUT:
                            self._apply_put(kv.key, kv.value, kv.mod_revision, kv.create_revision)
                        else:
                            self._notify(self.view.apply_delete(kv.key, kv.mod_revision))
                finally:
                    with contextlib.suppress(Exception):
                        await watch.cancel()
                raise_if_cancelling()
                raise ConnectionError("the watch stream ended")
            except asyncio.CancelledError:
                raise
            except Exception as e:
                raise_if_cancelling()
                self.watch_ok = False
                if broken_since is None:
                    broken_since = loop.time()
                    log.warning("lost the cluster metadata watch on etcd %s (%s); serving from "
                                "the last known metadata and retrying; metadata changes are "
                                "refused until etcd is back", self._where(), type(e).__name__)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    def _apply_put(self, key: bytes, value: bytes, mod: int, create: int) -> None:
        try:
            kind = self.view.apply_put(key, value, mod, create)
        except MetadataFormatError as e:
            log.error("ignoring unreadable cluster metadata in etcd %s: %s; fix or delete "
                      "that key with etcdctl", self._where(), e)
            return
        self._notify(kind)

    def _notify(self, kind: str | None) -> None:
        if kind is None:
            return
        self._view_changed.set()
        for listener in self._listeners:
            try:
                listener(kind)
            except Exception:
                log.exception("cluster metadata listener failed on a %s change", kind)

    async def _wait_view(self, condition: Callable[[], bool]) -> None:
        while not condition():
            self._view_changed.clear()
            await self._view_changed.wait()

    async def wait_for(self, condition: Callable[[], bool], timeout_s: float) -> None:
        """Wait until ``condition()`` holds on the view. It is checked again after every change
        of the view and of this broker's own ``registration``, so it may read both.

        Raises:
            TimeoutError: it did not within ``timeout_s``.
        """
        await asyncio.wait_for(self._wait_view(condition), timeout_s)

    # -- helpers -------------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None], what: str) -> None:
        self._tasks = [t for t in self._tasks if not t.done()]
        task = asyncio.get_running_loop().create_task(coro, name=what)
        task.add_done_callback(lambda t: _log_end(t, what))
        self._tasks.append(task)

    def _where(self) -> str:
        return f"{self.endpoint[0]}:{self.endpoint[1]}" if self.endpoint else "?"


def _log_end(task: asyncio.Task[None], what: str) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("cluster %s stopped: %r", what, task.exception())


def _flatten(replies: Iterable[Any]) -> Iterator[Any]:
    """The put and delete replies of a transaction, nested transactions opened."""
    for reply in replies:
        if reply.WhichOneof("response") == "response_txn":
            yield from _flatten(reply.response_txn.responses)
        else:
            yield reply


def _json_bytes(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
