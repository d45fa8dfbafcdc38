"""A broker as a member of a cluster whose metadata lives in etcd (``cluster.etcd.endpoints``).

Without ``cluster.etcd.endpoints`` none of this runs: the embedded single broker keeps its
topics in ``topics.json`` and leads everything (``cluster.metadata.LocalMetadata``).

With it, ``ClusterMember`` is the broker's link to the cluster (``cluster/etcd_store.py`` does
the etcd I/O, ``cluster/view.py`` holds the watched state):

- **Start** (``join``): connect to etcd (a clear error and exit status when none answers),
  agree on the cluster id (a data directory of another cluster is refused), load and watch
  the metadata, register this broker under a lease (a live duplicate ``node.id`` is refused)
  and campaign for controller in the background (``cluster/controller.py``).
- **Topics**: etcd is the source of truth. ``sync_topics`` makes the local registry
  (``broker/log/topics.py``, now a cache) and the open logs follow the view after every change:
  a topic in etcd is registered here and the partitions placed on this broker are opened; a
  topic gone from etcd is dropped here. The admin verbs (``create_topic``, ``delete_topic``,
  ``add_partitions``, ``set_topic_configs``) write etcd with compare-and-swap and answer once the
  watch has brought the change back, so the answer comes after etcd accepted it and the change
  is visible on this broker when the client hears of it.
- **Placement**: a new topic's partitions get ``replication.factor`` replicas each, spread by
  count and rack over the available brokers (``cluster/placement.py``; live and not shutting
  down), or a validated manual assignment, by the broker that receives the request; the
  compare-and-swap on the topic's key makes concurrent creations safe. Every replica starts in
  the ISR and the first leads. Internal topics take their ``*.replication.factor`` capped at
  the available brokers. The controller (``cluster/controller.py``) keeps leaders live and
  ISRs honest; ElectLeaders, reassignments and controlled shutdown are in
  ``broker/cluster_admin.py``.
- **Leadership**: the coordinators serve the internal partitions this broker leads.
  ``_follow_leadership`` loads a partition's coordinator state when this broker gains its
  leadership and unloads it when it loses it (requests for it then answer NOT_COORDINATOR).

Replication (issue 24) is ``broker/replication/``: every replica of a partition has its log
here, the ``ReplicaManager`` leads or follows it as the view says.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.config import format_value
from broker.group_configs import GroupConfigs
from broker.log.manager import partition_dir
from broker.log.topics import Topic, TopicError
from cluster.controller import ControllerSettings, run_controller
from cluster.election import assignment_problem
from cluster.errors import ProducerIdsUnavailable
from cluster.etcd_store import EtcdClusterStore, parse_endpoints
from cluster.metadata import EtcdMetadata
from cluster.placement import Candidate, PlacementError, place
from cluster.view import BrokerRegistration, Endpoint, PartitionAssignment, TopicRecord

if TYPE_CHECKING:
    from broker.app import Broker

log = logging.getLogger("shoal.cluster")

PID_BLOCK = 1000  # producer ids reserved in etcd at a time


# How long an admin verb waits for its own change to come back through the watch.
VISIBLE_TIMEOUT_S = 15.0
INTERNAL = ("__consumer_offsets", "__share_group_state", "__transaction_state")
# The replication factor config of each internal topic (capped at the available brokers when it
# is created, as Kafka does for a small cluster).
INTERNAL_REPLICATION = {
    INTERNAL[0]: "offsets.topic.replication.factor",
    INTERNAL[1]: "share.coordinator.state.topic.replication.factor",
    INTERNAL[2]: "transaction.state.log.replication.factor",
}


class ClusterMember:
    """See the module doc. One per broker in cluster mode, created by ``Broker.start``."""

    def __init__(self, broker: Broker) -> None:
        cfg = broker.config
        self.broker = broker
        self.node_id = broker.node_id
        self.store = EtcdClusterStore(
            parse_endpoints(cfg.get("cluster.etcd.endpoints")),
            prefix=cfg.get("cluster.etcd.prefix"),
            session_timeout_ms=cfg.get("broker.session.timeout.ms"),
            heartbeat_interval_ms=cfg.get("broker.heartbeat.interval.ms"))
        self.metadata = EtcdMetadata(self.node_id, self.store.view)
        self.store.add_listener(
            lambda kind: self.metadata.brokers_changed() if kind == "broker" else None)
        self._tasks: list[asyncio.Task[None]] = []
        self._follow_wake = asyncio.Event()
        # Internal topics not created yet: name -> (partitions, configs), filled in as the
        # coordinators open; ``request_internal_topic`` creates one on first use.
        self.internal_specs: dict[str, tuple[int, dict[str, Any]]] = {}
        self._creating: set[str] = set()
        self._swept: set[uuid.UUID] = set()  # topics whose unplaced directories were looked for
        self._group_configs: GroupConfigs | None = None
        # Producer ids: [next, limit) of the block reserved in etcd, and one reserved ahead.
        self._pid_next = self._pid_limit = 0
        self._pid_spare: tuple[int, int] | None = None
        self._pid_fetching = False
        self.ready = False  # coordinators open: leadership changes may load/unload

    # -- start and stop ------------------------------------------------------------------------

    async def join(self, local_cluster_id: str | None, new_cluster_id: str) -> str:
        """Connect, agree on the cluster id, load the metadata and register; returns the
        cluster id (``local_cluster_id`` if this data directory has one, else etcd's, else
        ``new_cluster_id``).

        Raises:
            ClusterStoreError: etcd is unreachable, or holds another cluster id
                (``ClusterIdMismatchError``), or a live broker has this node id
                (``DuplicateNodeIdError``).
        """
        store = self.store
        await store.connect()
        await store.start()
        cluster_id = await store.ensure_cluster_id(local_cluster_id or new_cluster_id,
                                                   adopt=local_cluster_id is None)
        await store.register(BrokerRegistration(
            node_id=self.node_id, endpoints=self._endpoints(),
            rack=self.broker.config.get("broker.rack") or None, incarnation=uuid.uuid4().hex))
        await store.wait_for(lambda: self.node_id in store.view.brokers, VISIBLE_TIMEOUT_S)
        cfg = self.broker.config
        settings = ControllerSettings(
            unclean_default=cfg.get("unclean.leader.election.enable"),
            auto_rebalance=cfg.get("auto.leader.rebalance.enable"),
            imbalance_check_interval_s=float(cfg.get("leader.imbalance.check.interval.seconds")),
            imbalance_percentage=cfg.get("leader.imbalance.per.broker.percentage"))
        self._spawn(run_controller(store, settings), "controller")
        await self._next_pid_block()
        return cluster_id

    def _endpoints(self) -> tuple[Endpoint, ...]:
        """This broker's advertised endpoint per listener. Cluster members register before
        they bind, so every listener needs a fixed port.

        Raises:
            TopicError: never; ValueError: a listener has port 0.
        """
        out = []
        for lst in self.broker.config.listeners:
            host = lst.advertised_host or lst.host
            port = lst.advertised_port or lst.port
            if port == 0:
                raise ValueError(f"listener {lst.name} has port 0; a cluster member registers "
                                 "its address before binding, so give it a fixed port")
            if host in ("", "0.0.0.0", "::"):
                host = "127.0.0.1"
            out.append(Endpoint(lst.name, host, port, lst.security_protocol.value))
        return tuple(out)

    def start_following(self) -> None:
        """Coordinators are open: from now on, leadership changes load and unload their
        partitions."""
        self.ready = True
        self._spawn(self._follow_leadership(), "leadership follower")
        self._follow_wake.set()

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self.store.close()

    def _spawn(self, coro: Any, what: str) -> None:
        self._tasks = [t for t in self._tasks if not t.done()]
        task = asyncio.get_running_loop().create_task(coro, name=what)
        task.add_done_callback(lambda t: _log_end(t, what))
        self._tasks.append(task)

    # -- producer ids --------------------------------------------------------------------------

    def next_producer_id(self) -> int:
        """A producer id no broker of the cluster handed out before: taken from a block reserved
        in etcd; the next block is fetched in the background once half of this one is used.

        Raises:
            ProducerIdsUnavailable: the block ran out before etcd gave the next one.
        """
        if self._pid_next >= self._pid_limit and self._pid_spare is not None:
            (self._pid_next, self._pid_limit), self._pid_spare = self._pid_spare, None
        if self._pid_next >= self._pid_limit:
            self._prefetch_pids()
            raise ProducerIdsUnavailable(
                "no producer id is free on this broker until etcd grants the next block; retry")
        pid = self._pid_next
        self._pid_next += 1
        if self._pid_limit - self._pid_next < PID_BLOCK // 2 and self._pid_spare is None:
            self._prefetch_pids()
        return pid

    def _prefetch_pids(self) -> None:
        if self._pid_fetching:
            return
        self._pid_fetching = True
        self._spawn(self._next_pid_block(), "producer id block")

    async def _next_pid_block(self) -> None:
        try:
            start = await self.store.allocate_block("producer_ids", PID_BLOCK)
        finally:
            self._pid_fetching = False
        if self._pid_next >= self._pid_limit:
            self._pid_next, self._pid_limit = start, start + PID_BLOCK
        else:  # the rest of the current block first
            self._pid_spare = (start, start + PID_BLOCK)

    # -- following the view --------------------------------------------------------------------

    def attach_group_configs(self, configs: GroupConfigs) -> None:
        """Group configs live in etcd: load them from the view, follow its changes, and send
        changes made through this broker there (``GroupConfigs.publish``)."""
        self._group_configs = configs
        for group_id in configs.group_ids():
            if group_id not in self.store.view.group_configs:
                configs.install_texts(group_id, None)  # a leftover of single-broker days
        for group_id, texts in self.store.view.group_configs.items():
            configs.install_texts(group_id, texts)
        configs.publish = self._publish_group_configs

    async def _publish_group_configs(self, changes: dict[str, dict[str, str] | None]) -> None:
        """Raises:
            OSError: etcd did not take the change (the handler answers it as a storage error,
                naming etcd); nothing changed.
        """
        view = self.store.view
        try:
            await asyncio.wait_for(self.store.put_group_configs(changes), VISIBLE_TIMEOUT_S)
            await self.store.wait_for(
                lambda: all(view.group_configs.get(g) == (c or None) for g, c in changes.items()),
                VISIBLE_TIMEOUT_S)
        except Exception as e:
            raise OSError(f"the cluster metadata store (etcd) did not take the group configs "
                          f"({type(e).__name__}); nothing changed, retry once etcd is "
                          "reachable") from None

    def _on_change(self, kind: str) -> None:
        if kind == "group_config" and self._group_configs is not None:
            for group_id in self.store.view.changed_groups:
                self._group_configs.install_texts(
                    group_id, self.store.view.group_configs.get(group_id))
        if kind == "topic":
            self.sync_topics()
        if kind in ("topic", "broker"):
            self._follow_wake.set()

    def start_syncing(self) -> None:
        """The broker's registry and logs exist: sync them now and after every change."""
        self.store.add_listener(self._on_change)
        self.sync_topics()

    def sync_topics(self) -> None:
        """Make the local registry and open logs match etcd's topics (see the module doc)."""
        b = self.broker
        view = self.store.view
        for name in sorted(view.topics):
            record = view.topics[name]
            try:
                self._sync_topic(record)
            except (OSError, TopicError) as e:
                log.error("cannot open topic %s placed on this broker: %s; its partitions here "
                          "answer errors until the data directory is fixed", name, e)
        for topic in list(b.topics.all()):
            if topic.name not in view.topics:
                b.forget_topic(topic)

    def _sync_topic(self, record: TopicRecord) -> None:
        b = self.broker
        topic_id = uuid.UUID(record.topic_id)
        local = b.topics.get(record.name)
        if local is not None and local.topic_id != topic_id:
            b.forget_topic(local)  # deleted and created again while this broker was away
            local = None
        mine = {i for i, p in enumerate(record.partitions) if self.node_id in p.replicas}
        configs = b.validate_topic_configs(dict(record.configs))
        if local is None:
            topic = Topic(record.name, topic_id, len(record.partitions), configs)
            b.logs.open_topic(topic, only=mine)
            self._drop_moved_replicas(topic, len(record.partitions), mine)
            b.topics.add(topic)
            log.info("topic %s (id %s): %d partition(s), %d on this broker", record.name,
                     topic_id, topic.partitions, len(mine))
            b.topic_changed(record.name)
            return
        b.logs.open_topic(local, only=mine)  # at start: what was here before
        self._drop_moved_replicas(local, len(record.partitions), mine)
        if len(record.partitions) > local.partitions:
            old = local.partitions
            grown = Topic(local.name, local.topic_id, len(record.partitions), local.configs)
            b.logs.open_topic(grown, first_partition=old, only=mine)
            b.topics.set_partitions(local.name, len(record.partitions))
            b.topic_changed(record.name)
        if configs != local.configs:
            b.topics.set_configs(local.name, configs)
            b.logs.reconfigure(local)
            b.cleaner_wake()

    def _drop_moved_replicas(self, topic: Topic, partitions: int, mine: set[int]) -> None:
        """Delete the replicas this broker holds of partitions no longer placed here (a
        completed reassignment or decommission), open or left on disk from before a restart.
        The replica manager stops fetching them on the same change."""
        b = self.broker
        # The directories are looked for once per topic (leftovers of a move finished while
        # this broker was down); after that only open logs can be moved replicas.
        on_disk = topic.topic_id not in self._swept
        self._swept.add(topic.topic_id)
        for p in range(partitions):
            if p in mine:
                continue
            if b.logs.get(topic.name, p) is None and not (
                    on_disk and partition_dir(b.data_dir, topic.name, p).exists()):
                continue
            log.info("%s-%d is no longer placed on this broker: deleting its replica here",
                     topic.name, p)
            b.logs.drop_replica(topic, p)

    async def _follow_leadership(self) -> None:
        """Load the coordinator partitions this broker leads, unload the others; again after
        every topic or broker change (serialised: one pass at a time)."""
        while True:
            await self._follow_wake.wait()
            self._follow_wake.clear()
            try:
                await self._follow_once()
            except Exception:
                log.exception("loading or unloading coordinator partitions failed; retrying "
                              "on the next metadata change")

    async def _follow_once(self) -> None:
        b = self.broker
        for topic, service, load in (
                (INTERNAL[1], b.share_coordinator, b.share_coordinator.load_all),
                (INTERNAL[0], b.share_groups, b.share_groups.load),
                (INTERNAL[2], b.transactions, b.transactions.load)):
            local = b.topics.get(topic)
            if local is None:
                continue
            runtime: Any = service.runtime
            loaded = set(runtime.partitions())
            led = {p for p in range(local.partitions) if self.metadata.is_leader(topic, p)}
            gained = sorted(led - loaded)
            for p in sorted(loaded - led):
                log.info("no longer leading %s-%d: unloading its coordinator state", topic, p)
                await runtime.unload(p)
            if gained:
                ms = await load(lambda p, t=topic: b.log_for(t, p), gained)  # type: ignore[operator]
                log.info("leading %s partition(s) %s: coordinator state loaded in %.0f ms",
                         topic, ",".join(map(str, gained)), ms)

    # -- admin verbs ---------------------------------------------------------------------------

    async def create_topic(self, name: str, partitions: int, configs: dict[str, Any],
                           replication: int = 1,
                           assignments: Sequence[tuple[int, ...]] | None = None) -> Topic:
        """Place (or take ``assignments``, validated by the caller) and create a topic in etcd;
        returns it once this broker has it. Every replica starts in the ISR, the first leads.

        Raises:
            TopicError: TOPIC_ALREADY_EXISTS, INVALID_REPLICATION_FACTOR (fewer available
                brokers than ``replication``), REQUEST_TIMED_OUT (etcd did not answer or the
                change did not come back).
        """
        replicas = list(assignments) if assignments else self._place(partitions, replication)
        record = TopicRecord(
            name=name, topic_id=str(uuid.uuid4()), configs=_config_texts(configs),
            partitions=tuple(PartitionAssignment(r, r[0], 0, r) for r in replicas))
        created = await self._etcd(self.store.create_topic(record), f"creating topic {name}")
        if not created:
            raise TopicError(ErrorCode.topic_already_exists, f"topic {name!r} already exists")
        await self._visible(lambda: (t := self.broker.topics.get(name)) is not None
                            and str(t.topic_id) == record.topic_id, f"topic {name}")
        topic = self.broker.topics.get(name)
        assert topic is not None
        return topic

    def _place(self, count: int, replication: int) -> list[tuple[int, ...]]:
        """Replica lists for ``count`` new partitions over the available brokers.

        Raises:
            TopicError: INVALID_REPLICATION_FACTOR (too few available brokers).
        """
        view = self.store.view
        brokers = [Candidate(r.node_id, r.rack) for r in view.active_brokers()]
        try:
            return place(count, replication, brokers, view.partition_counts())
        except PlacementError as e:
            raise TopicError(ErrorCode.invalid_replication_factor, str(e)) from None

    def assignment_problem(self, assignments: Sequence[Sequence[int]],
                           replication: int | None = None) -> str | None:
        """Why manual replica assignments cannot be used (a partition with no replica, a broker
        twice, an unregistered broker, differing replica counts), or None."""
        view = self.store.view
        for i, replicas in enumerate(assignments):
            problem = assignment_problem(replicas, lambda n: n in view.brokers)
            if problem:
                return f"partition {i}: {problem}"
            if replication is not None and len(replicas) != replication:
                return (f"partition {i} is assigned {len(replicas)} replica(s) but the topic's "
                        f"replication factor is {replication}; give {replication} per partition")
            replication = len(replicas)
        return None

    async def delete_topic(self, name: str) -> None:
        """Raises:
            TopicError: UNKNOWN_TOPIC_OR_PARTITION, REQUEST_TIMED_OUT.
        """
        await self._update(name, None, f"deleting topic {name}")

    async def add_partitions(self, name: str, total: int,
                             assignments: Sequence[tuple[int, ...]] | None = None) -> None:
        """New partitions with the replication factor of the topic's first partition, placed
        or on ``assignments`` (validated by the caller).

        Raises:
            TopicError: INVALID_REPLICATION_FACTOR, REQUEST_TIMED_OUT, UNKNOWN_TOPIC_OR_PARTITION.
        """

        def grow(record: TopicRecord) -> TopicRecord:
            rf = len(record.partitions[0].target) if record.partitions else 1
            more = (list(assignments) if assignments
                    else self._place(total - len(record.partitions), rf))
            return TopicRecord(record.name, record.topic_id, record.partitions + tuple(
                PartitionAssignment(r, r[0], 0, r) for r in more), record.configs)

        await self._update(name, grow, f"adding partitions to topic {name}")

    async def set_topic_configs(self, name: str, configs: dict[str, Any]) -> None:
        """Replace a topic's configs (already validated).

        Raises:
            TopicError: REQUEST_TIMED_OUT, UNKNOWN_TOPIC_OR_PARTITION.
        """
        texts = _config_texts(configs)
        await self._update(name, lambda r: TopicRecord(r.name, r.topic_id, r.partitions, texts),
                           f"changing the configs of topic {name}")

    def request_internal_topic(self, name: str) -> None:
        """Create internal topic ``name`` in the background if it does not exist yet (a
        FindCoordinator for it arrived; the client retries while it is being created)."""
        if name in self.store.view.topics or name in self._creating:
            return
        spec = self.internal_specs.get(name)
        if spec is None:
            return
        self._creating.add(name)

        async def create() -> None:
            view = self.store.view
            wanted = self.broker.config.get(INTERNAL_REPLICATION[name])
            replication = max(1, min(wanted, len(view.active_brokers())))
            try:
                await self.create_topic(name, spec[0], spec[1], replication)
            except TopicError as e:
                if e.error != ErrorCode.topic_already_exists:
                    log.warning("creating internal topic %s failed: %s; the next "
                                "FindCoordinator tries again", name, e.message)
            finally:
                self._creating.discard(name)

        self._spawn(create(), f"creating {name}")

    async def _update(self, name: str, change: Callable[[TopicRecord], TopicRecord] | None,
                      what: str) -> None:
        """Compare-and-swap ``change`` (None deletes) onto topic ``name``, retrying when another
        change got in first; returns once the watch brought it back."""
        view = self.store.view
        for _ in range(10):
            record = view.topics.get(name)
            if record is None:
                raise TopicError(ErrorCode.unknown_topic_or_partition,
                                 f"topic {name!r} does not exist")
            revision = view.topic_revisions.get(name, 0)

            def moved_on(rev: int = revision) -> bool:
                return view.topic_revisions.get(name, 0) != rev

            if change is None:
                ok = await self._etcd(self.store.delete_topic(name, revision), what)
                done = self._gone_here(name, record.topic_id)
            else:
                ok = await self._etcd(self.store.update_topic(change(record), revision), what)
                done = moved_on
            if ok:
                await self._visible(done, what)
                return
            await self.store.wait_for(moved_on, VISIBLE_TIMEOUT_S)
        raise TopicError(ErrorCode.request_timed_out,
                         f"{what}: other changes to the topic kept getting in first; retry")

    def _gone_here(self, name: str, topic_id: str) -> Callable[[], bool]:
        def gone() -> bool:
            t = self.broker.topics.get(name)
            return t is None or str(t.topic_id) != topic_id
        return gone

    async def _etcd(self, call: Any, what: str) -> Any:
        try:
            return await asyncio.wait_for(call, VISIBLE_TIMEOUT_S)
        except TopicError:
            raise
        except Exception as e:
            raise TopicError(ErrorCode.request_timed_out,
                             f"{what}: the cluster metadata store (etcd) did not accept the "
                             f"change ({type(e).__name__}); nothing changed, retry once etcd is "
                             "reachable") from None

    async def _visible(self, condition: Callable[[], bool], what: str) -> None:
        try:
            await self.store.wait_for(condition, VISIBLE_TIMEOUT_S)
        except TimeoutError:
            raise TopicError(ErrorCode.request_timed_out,
                             f"{what}: etcd accepted the change but it did not reach this "
                             f"broker within {VISIBLE_TIMEOUT_S:.0f} s") from None


def _config_texts(configs: dict[str, Any]) -> dict[str, str]:
    """Topic config values as text, as DescribeConfigs shows them (etcd holds text;
    ``validate_topic_configs`` parses them back)."""
    return {k: t for k, v in configs.items() if (t := format_value(v)) is not None}


def _log_end(task: asyncio.Task[None], what: str) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("cluster %s stopped: %r", what, task.exception())
