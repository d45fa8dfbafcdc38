"""The broker's topic administration: checks, creation, deletion, growth and configs.

``TopicAdmin`` is a part of ``Broker`` (``broker/app.py`` mixes it in), kept apart so that the
broker's lifecycle and its topic verbs each read on their own. It uses the broker's
``config``, ``topics`` (the registry, ``broker/log/topics.py``), ``logs``, ``producers``,
``member`` (cluster mode), ``shares``, ``cleaner`` and its topic listeners.

- The ``create_topic``/``delete_topics``/``add_partitions``/``set_topics_configs`` verbs act on
  this broker: durable first (``topics.json``), then visible.
- The ``admin_*`` verbs are what the request handlers call: the same here, or through etcd on a
  cluster member (``broker/cluster_member.py``), answered once the change is back.

Topic creation is atomic: the partition logs are opened first and the topic is registered in
``topics.json`` only once all are open; if any step fails, what was opened is deleted again, so a
restart never finds a half-created topic. New partitions must fit the open-file limit
(``broker/resources.py``).
"""

from __future__ import annotations

import errno
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from broker.config import TOPIC_CONFIGS, ConfigError, parse_value, topic_config_value
from broker.log.topics import INTERNAL_TOPICS, Topic, TopicError, topic_name_problem
from broker.resources import partition_budget_problem
from coordinator.host import PartitionLogLike
from storage.log_dir import describe

log = logging.getLogger("shoal.broker")


class TopicAdmin:
    """See the module doc. Mixed into ``Broker``; ``self`` is the broker."""


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
        self.replication_for(replication)
        self.check_partition_budget(partitions)
        return partitions

    def replication_for(self, replication: int) -> int:
        """The replication factor a creation asks for; -1 means ``default.replication.factor``.

        Raises:
            TopicError: INVALID_REPLICATION_FACTOR: below 1, above 1 on a single broker, or
                more than the cluster's available brokers (live, not shutting down).
        """
        default = replication == -1
        if default:
            replication = self.config.get("default.replication.factor")
        if replication < 1:
            raise TopicError(ErrorCode.invalid_replication_factor,
                             f"replication factor must be at least 1, or -1 for "
                             f"default.replication.factor; got {replication}")
        source = " (default.replication.factor)" if default else ""
        if self.member is None:
            if replication != 1:
                raise TopicError(ErrorCode.invalid_replication_factor,
                                 f"replication factor {replication}{source} is impossible on a "
                                 "single broker; use 1, or run a cluster (--cluster)")
            return replication
        available = len(self.member.store.view.active_brokers())
        if replication > available:
            raise TopicError(ErrorCode.invalid_replication_factor,
                             f"replication factor {replication}{source} is larger than the "
                             f"{available} available broker(s); start more brokers or lower "
                             "the replication factor")
        return replication

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
                                 configs: dict[str, Any] | None = None, replication: int = -1,
                                 assignments: Sequence[tuple[int, ...]] | None = None) -> Topic:
        """CreateTopics: ``create_topic`` here, or through etcd in cluster mode (placed over the
        live brokers, or on ``assignments`` (validated), answered once this broker has it).

        Raises:
            TopicError: as ``create_topic``, ``replication_for`` or
                ``ClusterMember.create_topic``.
        """
        if self.member is not None:
            rf = len(assignments[0]) if assignments else self.replication_for(replication)
            return await self.member.create_topic(name, partitions, dict(configs or {}), rf,
                                                  assignments)
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

    async def admin_add_partitions(self, name: str, total: int,
                                   assignments: Sequence[tuple[int, ...]] | None = None) -> None:
        """CreatePartitions: ``add_partitions`` here, or through etcd in cluster mode (the new
        partitions on ``assignments`` when given, validated by the caller).

        Raises:
            TopicError: as ``add_partitions`` or ``ClusterMember.add_partitions``.
        """
        if self.member is not None:
            await self.member.add_partitions(name, total, assignments)
        else:
            self.add_partitions(name, total)

    def auto_create(self, name: str) -> Topic | None:
        """Create a topic on first use if ``auto.create.topics.enable``; None if not allowed.

        Raises:
            TopicError: the topic does not fit the open-file limit or could not be created.
        """
        if (not self.config.get("auto.create.topics.enable") or topic_name_problem(name)
                or name in INTERNAL_TOPICS):  # their coordinators create them, with their configs
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
