"""The broker: the services handlers use, and their lifecycle.

``Broker`` owns the topic registry, the partition logs, producer-id allocation, background tasks
(flush scheduler, retention) and the set of live connections. Handlers reach everything through
``ctx.broker``. Every background task is created and cancelled here (no orphan tasks).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.broker_metrics import BrokerMetrics
from broker.clock import Clock, SystemClock
from broker.config import BrokerConfig, ConfigError, TOPIC_CONFIGS, parse_listener, parse_value
from broker.dispatch import Dispatcher, default_dispatcher
from broker.group_configs import GroupConfigs
from broker.group_service import open_share_groups
from broker.log_manager import LogManager
from broker.metrics import MetricsServer
from broker.producer_state import ProducerStates
from broker.producer_state_manager import ProducerStateManager
from broker.share.service import ShareService
from broker.share_state import open_share_coordinator
from broker.topics import Topic, TopicRegistry, atomic_write, topic_name_problem
from persister.api import Persister
from persister.coordinator_persister import CoordinatorPersister

if TYPE_CHECKING:
    from broker.connection import Connection

log = logging.getLogger("shoal.broker")

PRODUCER_ID_BLOCK = 1000


class TopicError(Exception):
    """A topic operation that cannot be done; carries the Kafka error code and a message."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


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
        self._next_pid = 0
        self._pid_limit = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._close_listeners: list[Callable[[int], None]] = []
        self._topic_listeners: list[Callable[[str], None]] = []
        self.persister: Persister | None = None
        self.metrics = BrokerMetrics(self)
        self.metrics_server: MetricsServer | None = None
        self.started = False

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.cluster_id = self._load_cluster_id()
        self.topics = TopicRegistry(self.data_dir)
        self.logs = LogManager(self.data_dir, self.config, self.clock)
        for topic in self.topics.all():
            self.logs.open_topic(topic)
        self.producers = ProducerStateManager(self.logs, self.config, self.clock)
        self._load_producer_ids()
        # Durable share state: the share coordinator over __share_group_state, reached by the
        # share-partition leaders through the persister (a test may inject another persister).
        self.share_coordinator = await open_share_coordinator(self)
        if self.persister is None:
            self.persister = CoordinatorPersister(self.share_coordinator)
        self.group_configs = GroupConfigs(self.data_dir, self.config)
        # Share groups over __consumer_offsets: created if missing, every partition loaded.
        self.share_groups = await open_share_groups(self)
        self.add_topic_listener(self.share_groups.topics_changed)
        self.shares = ShareService(self, self.persister)
        self._spawn(self._every("log.flush.scheduler.interval.ms", self.logs.flush_due))
        self._spawn(self._every("log.retention.check.interval.ms", self.logs.enforce_retention))
        self._spawn(self._every("producer.id.expiration.check.interval.ms",
                                self._expire_producer_ids))
        self.config.on_change(self._on_broker_config_change)
        await self._start_metrics_server()
        self.started = True

    async def stop(self) -> None:
        if self.metrics_server is not None:
            await self.metrics_server.stop()
            self.metrics_server = None
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except asyncio.CancelledError:
                pass
        self._tasks.clear()
        if self.started:
            await self.share_groups.stop()
            await self.shares.stop()
            await self.share_coordinator.close()
            await asyncio.to_thread(self.producers.close)
            await asyncio.to_thread(self.logs.close)
        self.started = False

    async def _start_metrics_server(self) -> None:
        """Serve /metrics when ``metrics.listen`` is set.

        Raises:
            OSError: the address cannot be bound.
        """
        listen = self.config.get("metrics.listen")
        if not listen:
            return
        host, port = parse_listener(listen)
        server = MetricsServer(self.metrics.render)
        await server.start(host, port)
        self.metrics_server = server
        log.info("Prometheus metrics at http://%s:%d/metrics", server.host, server.port)

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
        path = self.data_dir / "meta.properties"
        if path.exists():
            for line in path.read_text().splitlines():
                if line.startswith("cluster.id="):
                    return line.split("=", 1)[1].strip()
        cid = _kafka_style_id()
        atomic_write(path, f"version=1\ncluster.id={cid}\nnode.id={self.config.node_id}\n".encode())
        return cid

    # -- connections -------------------------------------------------------------------------

    def on_connection_closed(self, connection_id: int) -> None:
        for cb in self._close_listeners:
            cb(connection_id)

    def add_close_listener(self, cb: Callable[[int], None]) -> None:
        self._close_listeners.append(cb)

    def add_topic_listener(self, cb: Callable[[str], None]) -> None:
        """Call ``cb(topic name)`` after a topic is created, deleted or gets more partitions."""
        self._topic_listeners.append(cb)

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
        return partitions

    def create_topic(self, name: str, partitions: int, configs: dict[str, Any] | None = None) -> Topic:
        topic = self.topics.create(name, partitions, configs)
        self.logs.open_topic(topic)
        log.info("created topic %s (id %s) with %d partition(s)", name, topic.topic_id, partitions)
        self._topics_changed(name)
        return topic

    def auto_create(self, name: str) -> Topic | None:
        """Create a topic on first use if ``auto.create.topics.enable``; None if not allowed."""
        if not self.config.get("auto.create.topics.enable") or topic_name_problem(name):
            return None
        return self.create_topic(name, self.config.get("num.partitions"))

    def ensure_internal_topic(self, name: str, partitions: int) -> Topic:
        topic = self.topics.get(name)
        if topic is None:
            topic = self.create_topic(name, partitions)
        return topic

    def delete_topic(self, name: str) -> Topic:
        topic = self.topics.delete(name)
        self.logs.drop_topic(topic)
        self.producers.drop_topic(name, topic.partitions)
        log.info("deleted topic %s (id %s)", name, topic.topic_id)
        self._topics_changed(name)
        return topic

    def add_partitions(self, name: str, total: int) -> None:
        topic = self.topics.get(name)
        assert topic is not None
        old = topic.partitions
        self.topics.set_partitions(name, total)
        self.logs.open_topic(topic, first_partition=old)
        log.info("topic %s now has %d partitions (was %d)", name, total, old)
        self._topics_changed(name)

    def set_topic_configs(self, name: str, configs: dict[str, Any]) -> None:
        topic = self.topics.get(name)
        assert topic is not None
        self.topics.set_configs(name, configs)
        self.logs.reconfigure(topic)

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
        """Allocate a producer id, never reused across restarts (ids are reserved in blocks)."""
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
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
