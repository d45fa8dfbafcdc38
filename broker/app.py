"""The broker: the services handlers use, and their lifecycle.

``Broker`` owns the topic registry, the partition logs, producer-id allocation, background tasks
(flush scheduler, retention) and the set of live connections. Handlers reach everything through
``ctx.broker``. Every background task is created and cancelled here (no orphan tasks).

Topics are created, deleted, grown and reconfigured by the ``TopicAdmin`` part
(``broker/topic_admin.py``).

Storage failure (``storage/log_dir.py``): when the log directory goes offline the broker calls
its fatal listeners (``run_broker`` stops the server) and ``exit_code`` becomes non-zero.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any


from broker.authz import Authorizer, DefaultAuthorizer, DenialLog, parse_super_users
from broker.broker_metrics import BrokerMetrics
from broker.clock import Clock, SystemClock
from broker.cluster_security import attach_cluster_security
from broker.config import (
    BrokerConfig,
    parse_listener,
)
from broker.coordinators import close_coordinators, open_coordinators
from broker.dispatch import Dispatcher, default_dispatcher
from broker.group_configs import GroupConfigs
from broker.log.cleaner_driver import LogCleaner
from broker.log.manager import LogManager
from broker.log.producer_state import ProducerStates
from broker.log.producer_state_manager import ProducerStateManager
from broker.log.topics import (
    TopicRegistry,
    atomic_write,
)
from broker.log.txn_log import TransactionalLog
from broker.metrics import MetricsServer
from broker.security.metrics_web import load_web_config
from broker.security.authorizer import AclAuthorizer
from broker.security.scram_store import CredentialStore, ScramArg, ScramStore
from broker.security.setup import AclSeam, build_authorizer
from broker.topic_admin import TopicAdmin
from broker.share.service import ShareService
from broker.replication.manager import ReplicaManager
from cluster.errors import ClusterStoreError
from cluster.metadata import ClusterMetadata, LocalMetadata
from coordinator.group.service import GroupCoordinatorService
from coordinator.share.runtime_service import ShareCoordinatorService
from coordinator.txn.service import TransactionService
from persister.api import Persister
from storage.log_dir import LogDir

if TYPE_CHECKING:
    from broker.cluster_member import ClusterMember
    from broker.connection import Connection
    from broker.txn_remote import BrokerLinks

log = logging.getLogger("shoal.broker")

PRODUCER_ID_BLOCK = 1000


class Broker(TopicAdmin):
    def __init__(self, config: BrokerConfig, clock: Clock | None = None,
                 dispatcher: Dispatcher | None = None) -> None:
        self.config = config
        self.clock: Clock = clock or SystemClock()
        self.data_dir: Path = config.data_dir
        self.dispatcher = dispatcher or default_dispatcher()
        self.connections: set[Connection] = set()
        self.cluster_id = ""
        self.topics: TopicRegistry
        self.logs: LogManager
        self.producers: ProducerStateManager
        # The coordinators, opened in start() (broker/coordinators.py).
        self.share_coordinator: ShareCoordinatorService
        self.group_configs: GroupConfigs
        self.share_groups: GroupCoordinatorService
        self.transactions: TransactionService
        # Last stable offsets, aborted transactions and markers (broker/log/txn_log.py).
        self.txn_log: TransactionalLog
        self.cleaner: LogCleaner
        self._next_pid = 0
        self._pid_limit = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._side_tasks: set[asyncio.Task[None]] = set()
        self._close_listeners: list[Callable[[int], None]] = []
        self._topic_listeners: list[Callable[[str], None]] = []
        self.persister: Persister | None = None
        # Checked by handlers through RequestContext (broker/authz.py, broker/context.py);
        # start() replaces it with the ACL authorizer when authorizer.class.name is set.
        self.authorizer: Authorizer = DefaultAuthorizer(
            parse_super_users(config.get("super.users")))
        # Rate limit for the log lines of refused operations.
        self.denials = DenialLog()
        self.metrics = BrokerMetrics(self)
        self.metrics_server: MetricsServer | None = None
        self.started = False
        # What a shutdown is doing, for the line the shutdown deadline logs if it fires
        # (broker/shutdown_deadline.py).
        self.stop_step = "stopping"
        # Set when a storage failure ends the broker: why, and the process exit status.
        self.fatal: str | None = None
        self.exit_code = 0
        self._fatal_listeners: list[Callable[[], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        # ACL authorizer (broker/security/), None when authorizer.class.name is empty. When set,
        # it also answers the handlers' checks through ``self.authorizer``.
        self.acl_authorizer: AclAuthorizer | None = None
        # SCRAM credentials (durable; broker/security/scram_store.py), opened in start() after
        # adding those given with ``shoal broker --add-scram``.
        self.scram_credentials: CredentialStore
        self.scram_bootstrap: list[ScramArg] = []
        # Who leads what (cluster/metadata.py): this broker alone, or etcd's view in cluster
        # mode, where ``member`` links the broker to the cluster (broker/cluster_member.py).
        self.cluster: ClusterMetadata = LocalMetadata(
            config.node_id, {}, lambda t: (x.partitions if (x := self.topics.get(t)) else None))
        self.member: ClusterMember | None = None
        # A member's inter-broker clients for transactions, dead letters and admin fan-out
        # (broker/txn_remote.py), set by open_coordinators; None on a single broker.
        self.links: BrokerLinks | None = None
        # Replicated partitions led or followed here (broker/replication/); cluster mode only.
        self.replication: ReplicaManager | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.config.get("cluster.etcd.endpoints"):
            # Lazy: imported here, cluster mode needs the etcd client (the ``cluster`` extra),
            # which the embedded single broker does without.
            try:
                from broker.cluster_member import ClusterMember
            except ImportError as e:
                raise ClusterStoreError(
                    f"cluster mode needs the etcd client ({e}); install the cluster extra: "
                    "pip install -e '.[cluster]' (make cluster does)") from None

            self.member = ClusterMember(self)
            self.cluster = self.member.metadata
            local = self._stored_cluster_id()
            try:
                self.cluster_id = await self.member.join(local, _kafka_style_id())
            except BaseException:
                await self.member.close()  # no watch or lease renewal outlives a refusal
                raise
            if local is None:
                self._write_cluster_id(self.cluster_id)
        else:
            self.cluster_id = self._load_cluster_id()
        self.acl_authorizer = build_authorizer(self.config, self.data_dir)
        if self.acl_authorizer is not None:
            self.authorizer = AclSeam(self.acl_authorizer)
        if self.member is not None:
            # ACLs, SCRAM credentials (--add-scram too) and feature levels live in etcd.
            await attach_cluster_security(self)
        else:
            self.scram_credentials = store = ScramStore.open(self.data_dir)
            for arg in self.scram_bootstrap:
                store.upsert(arg.user, arg.mechanism, arg.credential())
                log.info("SCRAM credential of user %s (%s) set from --add-scram", arg.user,
                         arg.mechanism)
        self.topics = TopicRegistry(self.data_dir)
        self.logs = LogManager(self.data_dir, self.config, self.clock)
        self._loop = asyncio.get_running_loop()
        self.logs.log_dir.add_listener(self._on_log_dir_offline)
        await asyncio.to_thread(self.logs.remove_leftovers)  # of deletions a stop interrupted
        self.producers = ProducerStateManager(self.logs, self.config, self.clock)
        if self.member is None:
            for topic in self.topics.all():
                self.logs.open_topic(topic)
        else:
            self.member.start_syncing()
            self.replication = ReplicaManager(self)
            self.replication.start()
        self.txn_log = TransactionalLog(self)
        self._load_producer_ids()
        # The share, group and transaction coordinators over their internal topics, every
        # partition loaded (broker/coordinators.py); sets the persister unless injected.
        await open_coordinators(self)
        assert self.persister is not None
        self.shares = ShareService(self, self.persister)
        self.cleaner = LogCleaner(self.logs, self.config, self.clock)
        self.cleaner.stable_limit = self.txn_log.cleaner_limit
        if self.config.get("log.cleaner.enable"):
            self.cleaner.start()
        self._spawn(self._every("log.flush.scheduler.interval.ms", self.logs.flush_due))
        self._spawn(self._every("log.retention.check.interval.ms", self.logs.enforce_retention))
        self._spawn(self._every("group.share.partition.unload.idle.ms", self._unload_idle_shares))
        self._spawn(self._every("producer.id.expiration.check.interval.ms",
                                self._expire_producer_ids))
        self.config.on_change(self._on_broker_config_change)
        await self._start_metrics_server()
        if self.member is not None:
            self.member.start_following()
        self.started = True

    async def stop(self) -> None:
        if self.metrics_server is not None:
            self.stop_step = "closing the metrics endpoint"
            await self.metrics_server.stop()
            self.metrics_server = None
        self.stop_step = "stopping its background tasks"
        for t in [*self._tasks, *self._side_tasks]:
            t.cancel()
        for t in [*self._tasks, *self._side_tasks]:
            try:
                await t
            except asyncio.CancelledError:
                pass
        self._tasks.clear()
        if self.replication is not None:
            self.stop_step = "stopping replication"
            await self.replication.close()
        if self.member is not None:
            self.stop_step = "leaving the cluster (etcd)"
            await self.member.close()
        if self.started:
            self.stop_step = "closing the coordinators (their last state writes)"
            await close_coordinators(self)
            self.stop_step = "closing the logs (flushing them to disk)"
            await asyncio.to_thread(self.cleaner.stop)
            await asyncio.to_thread(self.producers.close)
            if self.logs.removals:  # deleted topics' directories still being removed
                await asyncio.gather(*self.logs.removals, return_exceptions=True)
            await asyncio.to_thread(self.logs.close)
        self.stop_step = "ending its event loop"
        self.started = False

    async def _start_metrics_server(self) -> None:
        """Serve /metrics when ``metrics.listen`` is set (``metrics.*`` configs).

        Raises:
            OSError: the address cannot be bound.
            WebConfigError: ``metrics.web.config.file`` cannot be used.
        """
        listen = self.config.get("metrics.listen")
        if not listen:
            return
        host, port = parse_listener(listen)
        web_file = self.config.get("metrics.web.config.file")
        web = load_web_config(web_file) if web_file else None
        server = MetricsServer(
            self.metrics.render, max_connections=self.config.get("metrics.max.connections"),
            cache_ms=self.config.get("metrics.render.cache.ms"), now_ms=self.clock.monotonic_ms,
            web=web, render_seconds=self.metrics.metrics_render_seconds,
            rejected=self.metrics.metrics_connections_rejected)
        await server.start(host, port)
        self.metrics_server = server
        log.info("Prometheus metrics at %s://%s:%d/metrics%s", server.scheme, server.host,
                 server.port, " (basic auth)" if server.auth is not None else "")

    def add_fatal_listener(self, cb: Callable[[], None]) -> None:
        """Call ``cb()`` on the event loop when the broker must stop (its log directory failed)."""
        self._fatal_listeners.append(cb)

    def _on_log_dir_offline(self, log_dir: LogDir) -> None:
        """The log directory went offline (any thread): stop the broker with a non-zero status.

        Kafka halts a broker whose every log directory is offline; Shoal has one. The failure
        sequence is in ``storage/log_dir.py``; from here the server stops accepting, lets
        in-flight requests finish (those touching the logs answer KAFKA_STORAGE_ERROR), closes
        the logs without writing to them and exits with status 1.
        """
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(self._begin_fatal_shutdown, log_dir.cause or "storage error")

    def _begin_fatal_shutdown(self, cause: str) -> None:
        if self.fatal is not None:
            return
        self.fatal = cause
        self.exit_code = 1
        log.critical("shutting down: log directory %s is offline (%s)", self.data_dir, cause)
        for cb in self._fatal_listeners:
            try:
                cb()
            except Exception:
                log.exception("fatal listener failed")

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        self._tasks.append(asyncio.get_running_loop().create_task(coro))

    async def _every(self, interval_config: str, fn: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        while True:
            await asyncio.sleep(self.config.get(interval_config) / 1000)
            try:
                await fn()
            except Exception:
                log.exception("background task %s failed; it will run again", fn.__name__)

    def _load_cluster_id(self) -> str:
        cid = self._stored_cluster_id()
        if cid is None:
            cid = _kafka_style_id()
            self._write_cluster_id(cid)
        return cid

    def _stored_cluster_id(self) -> str | None:
        path = self.data_dir / "meta.properties"
        if path.exists():
            for line in path.read_text().splitlines():
                if line.startswith("cluster.id="):
                    return line.split("=", 1)[1].strip()
        return None

    def _write_cluster_id(self, cid: str) -> None:
        atomic_write(self.data_dir / "meta.properties",
                     f"version=1\ncluster.id={cid}\nnode.id={self.config.node_id}\n".encode())

    # -- connections -------------------------------------------------------------------------

    def on_connection_closed(self, connection_id: int) -> None:
        for cb in self._close_listeners:
            cb(connection_id)

    def add_close_listener(self, cb: Callable[[int], None]) -> None:
        self._close_listeners.append(cb)

    def add_topic_listener(self, cb: Callable[[str], None]) -> None:
        """Call ``cb(topic name)`` after a topic is created, deleted or gets more partitions."""
        self._topic_listeners.append(cb)

    def topic_changed(self, name: str) -> None:
        """Tell the topic listeners that ``name`` was created, deleted or grew."""
        self._topics_changed(name)

    def _topics_changed(self, name: str) -> None:
        for cb in self._topic_listeners:
            try:
                cb(name)
            except Exception:
                log.exception("topic listener failed for topic %s", name)

    async def delete_share_state_of_deleted_topics(self) -> None:
        """Delete ``__share_group_state`` keys whose topic no longer exists (after DeleteTopics,
        and at start, in case the broker stopped before the deletion was done)."""
        n = await self.share_coordinator.delete_topics_state(
            lambda topic_id: self.topics.by_id(topic_id) is None)
        if n:
            log.info("deleted the share state of %d share-partition(s) of deleted topics", n)

    async def _unload_idle_shares(self) -> None:
        self.shares.partitions.unload_idle(
            self.clock.now_ms(), self.config.get("group.share.partition.unload.idle.ms"),
            self.share_groups.has_members)

    def _side_task(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` in a task the broker owns until it finishes (cancelled at stop)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    def cleaner_wake(self) -> None:
        """A topic's cleanup settings changed: let the log cleaner look again."""
        if self.started:
            self.cleaner.wake()

    def leads(self, topic: str, partition: int) -> bool:
        """Whether this broker leads ``topic``'s ``partition`` (``coordinator/host.py``)."""
        return self.cluster.is_leader(topic, partition)

    def _on_broker_config_change(self, name: str) -> None:
        if name.startswith("log."):
            for topic in self.topics.all():
                self.logs.reconfigure(topic)

    # -- producers ---------------------------------------------------------------------------

    def producer_states(self, topic: str, partition: int) -> ProducerStates:
        """A partition's idempotent-producer state (loaded from snapshot and log on first use)."""
        return self.producers.states(topic, partition)

    async def _expire_producer_ids(self) -> None:
        n = self.producers.expire()
        if n:
            log.info("forgot %d idle producer id(s) (producer.id.expiration.ms=%d)", n,
                     self.config.get("producer.id.expiration.ms"))

    def _load_producer_ids(self) -> None:
        path = self.data_dir / "producer-id-block"
        start = int(path.read_text().strip()) if path.exists() else 0
        self._next_pid = start
        self._pid_limit = start

    def next_producer_id(self) -> int:
        """Allocate a producer id, never reused across restarts (ids are reserved in blocks;
        in a cluster the blocks come from etcd, so no two brokers hand out the same id).

        Raises:
            ProducerIdsUnavailable: cluster mode only, the block ran out before etcd granted
                the next one (retriable).
        """
        if self.member is not None:
            return self.member.next_producer_id()
        if self._next_pid >= self._pid_limit:
            self._pid_limit = self._next_pid + PRODUCER_ID_BLOCK
            atomic_write(self.data_dir / "producer-id-block", str(self._pid_limit).encode())
        pid = self._next_pid
        self._next_pid += 1
        return pid

    # -- cluster -----------------------------------------------------------------------------

    @property
    def node_id(self) -> int:
        return self.config.node_id

    @property
    def advertised(self) -> tuple[str, int]:
        return self.advertised_override or self.config.advertised

    advertised_override: tuple[str, int] | None = None


def _kafka_style_id() -> str:
    """A cluster id in Kafka's format: a UUID in URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
