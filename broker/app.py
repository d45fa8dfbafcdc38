"""The broker: the services handlers use, and their lifecycle.

``Broker`` owns the topic registry, the partition logs, producer-id allocation, background tasks
(flush scheduler, retention) and the set of live connections. Handlers reach everything through
``ctx.broker``. Every background task is created and cancelled here (no orphan tasks).

Topic creation is atomic: the partition logs are opened first and the topic is registered in
``topics.json`` only once all are open; if any step fails, what was opened is deleted again, so a
restart never finds a half-created topic. New partitions must fit the open-file limit
(``broker/resources.py``).

Storage failure (``storage/log_dir.py``): when the log directory goes offline the broker calls
its fatal listeners (``run_broker`` stops the server) and ``exit_code`` becomes non-zero.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import uuid
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Authorizer, DefaultAuthorizer, DenialLog, parse_super_users
from broker.broker_metrics import BrokerMetrics
from broker.clock import Clock, SystemClock
from broker.config import (
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    parse_listener,
    parse_value,
    topic_config_value,
)
from broker.coordinators import close_coordinators, open_coordinators
from broker.dispatch import Dispatcher, default_dispatcher
from broker.group_configs import GroupConfigs
from broker.log.cleaner_driver import LogCleaner
from broker.log.manager import LogManager
from broker.log.producer_state import ProducerStates
from broker.log.producer_state_manager import ProducerStateManager
from broker.log.topics import (
    Topic,
    TopicError,
    TopicRegistry,
    atomic_write,
    topic_name_problem,
)
from broker.log.txn_log import TransactionalLog
from broker.metrics import MetricsServer
from broker.security.metrics_web import load_web_config
from broker.resources import partition_budget_problem
from broker.security.authorizer import AclAuthorizer
from broker.security.scram_store import CredentialStore, ScramArg, ScramStore
from broker.security.setup import AclSeam, build_authorizer
from broker.share.service import ShareService
from cluster.errors import ClusterStoreError
from cluster.metadata import ClusterMetadata, LocalMetadata
from coordinator.group.service import GroupCoordinatorService
from coordinator.host import PartitionLogLike
from coordinator.share.runtime_service import ShareCoordinatorService
from coordinator.txn.service import TransactionService
from persister.api import Persister
from storage.log_dir import LogDir, describe

if TYPE_CHECKING:
    from broker.cluster_member import ClusterMember
    from broker.connection import Connection
    from broker.txn_remote import BrokerLinks

log = logging.getLogger("shoal.broker")

PRODUCER_ID_BLOCK = 1000


class Broker:
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

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.config.get("cluster.etcd.endpoints"):
            # Imported here: cluster mode needs the etcd client (the ``cluster`` extra), which
            # the embedded single broker does without.
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
            from broker.cluster_security import attach_cluster_security
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
            await self.metrics_server.stop()
            self.metrics_server = None
        for t in [*self._tasks, *self._side_tasks]:
            t.cancel()
        for t in [*self._tasks, *self._side_tasks]:
            try:
                await t
            except asyncio.CancelledError:
                pass
        self._tasks.clear()
        if self.member is not None:
            await self.member.close()
        if self.started:
            await close_coordinators(self)
            await asyncio.to_thread(self.cleaner.stop)
            await asyncio.to_thread(self.producers.close)
            if self.logs.removals:  # deleted topics' directories still being removed
                await asyncio.gather(*self.logs.removals, return_exceptions=True)
            await asyncio.to_thread(self.logs.close)
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

    # -- topics ------------------------------------------------------------------------------

    def validate_topic_configs(self, configs: dict[str, str | None]) -> dict[str, Any]:
        """Parse topic configs.

        Raises:
            TopicError: unknown name or invalid value (INVALID_CONFIG).
        """
        out: dict[str, Any] = {}
        for name, raw in configs.items():
            d = TOPIC_CONFIGS.get(name)
            if d is None:
                raise TopicError(ErrorCode.invalid_config, f"unknown topic config {name!r}")
            try:
                out[name] = parse_value(d, raw)
            except ConfigError as exc:
                raise TopicError(ErrorCode.invalid_config, str(exc)) from None
        lo = topic_config_value("min.compaction.lag.ms", out, self.config)
        hi = topic_config_value("max.compaction.lag.ms", out, self.config)
        if lo is not None and hi is not None and int(lo) > int(hi):
            # Kafka's LogConfig.validate refuses the same conflict.
            raise TopicError(ErrorCode.invalid_config,
                             f"min.compaction.lag.ms={lo} must not be larger than "
                             f"max.compaction.lag.ms={hi}")
        return out

    def check_new_topic(self, name: str, partitions: int, replication: int) -> int:
        """Validate a topic creation; returns the partition count to use.

        Raises:
            TopicError: the name is illegal or taken, or the counts are invalid.
        """
        problem = topic_name_problem(name)
        if problem:
            raise TopicError(ErrorCode.invalid_topic_exception, problem)
        if self.topics.get(name) is not None:
            raise TopicError(ErrorCode.topic_already_exists, f"topic {name!r} already exists")
        if partitions == -1:
            partitions = self.config.get("num.partitions")
        if partitions < 1:
            raise TopicError(ErrorCode.invalid_partitions,
                             f"number of partitions must be at least 1, got {partitions}")
        if replication not in (-1, 1):
            raise TopicError(ErrorCode.invalid_replication_factor,
                             f"replication factor {replication} is impossible on a single "
                             "broker; use 1 or -1")
        self.check_partition_budget(partitions)
        return partitions

    def check_partition_budget(self, new_partitions: int) -> None:
        """Raises:
            TopicError: POLICY_VIOLATION, ``new_partitions`` more would not fit the open-file limit.
        """
        problem = partition_budget_problem(len(self.logs.items()), new_partitions)
        if problem:
            raise TopicError(ErrorCode.policy_violation, problem)

    def create_topic(self, name: str, partitions: int, configs: dict[str, Any] | None = None) -> Topic:
        """Open a new topic's logs, then register it (atomic: see the module doc).

        Raises:
            TopicError: a log could not be opened or the registry not written
                (KAFKA_STORAGE_ERROR or UNKNOWN_SERVER_ERROR, with the path and errno); nothing
                of the topic is left behind.
        """
        topic = Topic(name, uuid.uuid4(), partitions, dict(configs or {}))
        try:
            # A directory left by a creation that crashed before registering is stale.
            self.logs.open_topic(topic, fresh=True)
        except OSError as exc:
            raise _creation_failed(name, "opening its partition logs", exc) from exc
        try:
            self.topics.add(topic)
        except OSError as exc:
            self.logs.drop_topic(topic)
            raise _creation_failed(name, "writing topics.json", exc) from exc
        log.info("created topic %s (id %s) with %d partition(s)", name, topic.topic_id, partitions)
        self._topics_changed(name)
        return topic

    async def admin_create_topic(self, name: str, partitions: int,
                                 configs: dict[str, Any] | None = None) -> Topic:
        """CreateTopics: ``create_topic`` here, or through etcd in cluster mode (placed over the
        live brokers, answered once this broker has it).

        Raises:
            TopicError: as ``create_topic``, or ``ClusterMember.create_topic``.
        """
        if self.member is not None:
            return await self.member.create_topic(name, partitions, dict(configs or {}))
        return self.create_topic(name, partitions, configs)

    async def admin_delete_topic(self, name: str) -> None:
        """DeleteTopics: ``delete_topic`` here, or through etcd in cluster mode.

        Raises:
            TopicError: only in cluster mode (``ClusterMember.delete_topic``).
        """
        if self.member is not None:
            await self.member.delete_topic(name)
        else:
            self.delete_topic(name)

    async def admin_add_partitions(self, name: str, total: int) -> None:
        """CreatePartitions: ``add_partitions`` here, or through etcd in cluster mode.

        Raises:
            TopicError: as ``add_partitions`` or ``ClusterMember.add_partitions``.
        """
        if self.member is not None:
            await self.member.add_partitions(name, total)
        else:
            self.add_partitions(name, total)

    def auto_create(self, name: str) -> Topic | None:
        """Create a topic on first use if ``auto.create.topics.enable``; None if not allowed.

        Raises:
            TopicError: the topic does not fit the open-file limit or could not be created.
        """
        if not self.config.get("auto.create.topics.enable") or topic_name_problem(name):
            return None
        partitions = self.config.get("num.partitions")
        self.check_partition_budget(partitions)
        return self.create_topic(name, partitions)

    def ensure_internal_topic(self, name: str, partitions_config: str,
                              configs: dict[str, Any]) -> Topic:
        """A coordinator's internal topic, created with the count of ``partitions_config`` and
        ``configs`` if missing. An existing topic keeps its partition count (placement depends on
        it; a differing setting is logged) and gets whichever of ``configs`` it lacks."""
        partitions = self.config.get(partitions_config)
        topic = self.topics.get(name)
        if topic is None and self.member is not None:
            # A cluster creates it on first use (FindCoordinator), as Kafka does, so that its
            # partitions spread over the brokers live by then; until then nothing is loaded.
            self.member.internal_specs[name] = (partitions, dict(configs))
            return Topic(name, uuid.UUID(int=0), partitions, dict(configs))
        if topic is None:
            return self.create_topic(name, partitions, configs)
        missing = {k: v for k, v in configs.items() if k not in topic.configs}
        if missing and self.member is None:  # a cluster's internal topics come from etcd
            self.set_topic_configs(name, {**topic.configs, **missing})
        if topic.partitions != partitions:
            log.warning("%s has %d partitions; %s=%d is ignored (placement depends on the "
                        "existing count)", name, topic.partitions, partitions_config, partitions)
        return topic

    def log_for(self, topic: str, partition: int) -> PartitionLogLike:
        """The open log of ``topic``-``partition`` (``coordinator/host.py``).

        Raises:
            KeyError: no such topic partition.
        """
        lg = self.logs.get(topic, partition)
        if lg is None:
            raise KeyError(f"{topic}-{partition}")
        return lg

    def delete_topic(self, name: str) -> Topic:
        return self.delete_topics([name])[0]

    def forget_topic(self, topic: Topic) -> Topic:
        """A cluster member drops a topic etcd no longer has (or has under a new id): its
        registration, logs and state on this broker (``delete_topics``).

        Raises:
            OSError: as ``delete_topics``.
        """
        return self.delete_topics([topic.name])[0]

    def delete_topics(self, names: Sequence[str]) -> list[Topic]:
        """Delete registered topics: durable first (one ``topics.json`` write), then their logs.

        Raises:
            OSError: the log directory is offline or ``topics.json`` could not be written;
                nothing was deleted (answer KAFKA_STORAGE_ERROR).
        """
        self.logs.log_dir.check()
        topics = self.topics.delete_many(names)
        for topic in topics:
            self.logs.drop_topic(topic)
            self.producers.drop_topic(topic.name, topic.partitions)
            log.info("deleted topic %s (id %s)", topic.name, topic.topic_id)
            if self.started:
                # Loaded share-partitions and their lock timers go now; the group coordinator
                # (topic listener) moves the topic to Deleting and deletes its share state, and
                # the sweep below removes state no group lists.
                self.shares.partitions.forget_topic(topic.topic_id)
        if self.started and topics:
            self._side_task(self.delete_share_state_of_deleted_topics())
        for topic in topics:
            self._topics_changed(topic.name)
        return topics

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

    def add_partitions(self, name: str, total: int) -> None:
        topic = self.topics.get(name)
        assert topic is not None
        old = topic.partitions
        grown = Topic(topic.name, topic.topic_id, total, topic.configs)
        try:
            self.logs.open_topic(grown, first_partition=old, fresh=True)
        except OSError as exc:
            raise _creation_failed(name, f"opening partitions {old}-{total - 1}", exc) from exc
        try:
            self.topics.set_partitions(name, total)
        except OSError as exc:
            self.logs.drop_partitions(grown, old)
            raise _creation_failed(name, "writing topics.json", exc) from exc
        log.info("topic %s now has %d partitions (was %d)", name, total, old)
        self._topics_changed(name)

    def set_topic_configs(self, name: str, configs: dict[str, Any]) -> None:
        self.set_topics_configs({name: configs})

    def set_topics_configs(self, changes: Mapping[str, dict[str, Any]]) -> None:
        """Replace topics' configs (validated): durable first, one ``topics.json`` write, then
        visible, and the open logs take them at once (segment, retention, cleanup, flush).

        Raises:
            OSError: the log directory is offline or ``topics.json`` could not be written;
                no topic's configs changed (answer KAFKA_STORAGE_ERROR).
        """
        self.logs.log_dir.check()
        self.topics.set_configs_many(changes)
        for name in changes:
            topic = self.topics.get(name)
            assert topic is not None
            self.logs.reconfigure(topic)
        self.cleaner.wake()

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


def _creation_failed(name: str, step: str, exc: OSError) -> TopicError:
    """The CreateTopics/CreatePartitions answer for an I/O failure (nothing was kept)."""
    where = f" ({exc.filename})" if exc.filename else ""
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        code, todo = ErrorCode.policy_violation, "raise the open-file limit (ulimit -n)"
    else:
        code, todo = ErrorCode.kafka_storage_error, "check the data directory's disk"
    log.error("creating topic %s failed while %s%s: %s; rolled back, nothing was created",
              name, step, where, describe(exc))
    return TopicError(code, f"topic {name!r} was not created: {step} failed{where}: "
                      f"{describe(exc)}; {todo}")


def _kafka_style_id() -> str:
    """A cluster id in Kafka's format: a UUID in URL-safe base64 without padding."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
