"""``GroupCoordinatorService``: groups over ``__consumer_offsets``, through the coordinator runtime.

It also serves classic consumer groups and committed offsets (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit/Fetch/Delete) on the same shards (``coordinator/group/classic/group.py``,
``coordinator/group/offsets.py``), and
consumer-protocol (KIP-848) groups (ConsumerGroupHeartbeat/Describe,
``coordinator/group/consumer/groups.py``); their regex subscriptions are resolved against
``topics_version()``, a fingerprint of the topic names and ids.
A classic request whose answer comes later (a JoinGroup waiting for the rebalance, a follower's
SyncGroup waiting for the leader) registers a waiter id and a future before its op runs; the
shard delivers the answer through ``_deliver`` (after the records it depends on are committed).

Concept (STYLE.md 1.3-1.6, after Kafka's ``GroupCoordinatorService``): one
``GroupCoordinatorShard`` per ``__consumer_offsets`` partition, driven by a ``CoordinatorRuntime``
(``coordinator/runtime/loop.py``) that runs each partition's ops one at a time, appends their
ShareGroup* records (``coordinator/group/serde.py``), fsyncs with group commit, and releases the
responses after commit; a failed append or fsync reverts the shard (and the op answers
COORDINATOR_NOT_AVAILABLE). A group lives on partition ``abs(hashCode(groupId)) % partitions``
(``coordinator/group/placement.py``), so ops of different groups on different partitions run in
parallel and ops of one group are serial. There is no lock here.

Lifecycle: ``open_group_coordinator`` creates ``__consumer_offsets`` if needed and loads every
partition in parallel before the broker listens; the runtime replays each log and calls
``on_loaded``, which re-arms session timers (members get a fresh session timeout) and retries
Initializing share-partitions. A partition that is (re)loading answers
COORDINATOR_LOAD_IN_PROGRESS (heartbeat, describe, ListGroups), one this broker does not hold
NOT_COORDINATOR. Timers (session expiry, initialisation retry) are armed and run by the runtime.

Write ops (heartbeat, topic change, share-state initialisation answers, delete):
1. the shard op runs with ``now_ms`` and the current ``TopicsImage``; the runtime appends and
   replays its records and answers after commit;
2. then, for each ``initializations(result)`` entry, an owned task sends InitializeShareGroupState
   (StartOffset -1, StateEpoch = the group epoch) per share-partition through the persister, and
   runs ``mark_initialized`` / ``mark_initialization_failed`` as write ops (reference section 5,
   two-phase flow: Initializing is durable before the request goes out, Initialized before the
   partition is assigned). Initialized partitions are never initialized again while the group
   exists, so consumption progress survives restarts;
3. member listeners hear about a member removed by a leave or session expiry once the removal is
   durable (the shard reports it from ``commit``).

Shoal extension, ``group.share.initialize.wait.ms`` (default 500, 0 = Kafka): a heartbeat
answered while its group has initializations in flight waits for them (bounded) and reconciles
the member once more before answering, so a joining member gets its partitions in the join
answer. Kafka answers at once with an empty assignment, and the partitions arrive one heartbeat
interval (5 s by default) later.

Transactions (issue 15; Kafka ``GroupCoordinatorService.commitTransactionalOffsets`` and
``completeTransaction``): ``txn_commit_offsets`` runs the shard's TxnOffsetCommit op as a
transactional write of the producer (``CoordinatorRuntime.write_transactional``), so its offsets
stay pending until ``complete_transaction`` writes the producer's COMMIT or ABORT marker into the
partition (called by the transaction coordinator at EndTxn for the partitions AddOffsetsToTxn
added).

Reads (describe, list, membership and assignment lookups) use the shards' committed view.

Topic metadata: the broker calls ``topics_changed`` from create/delete/add-partitions; the cached
``TopicsImage`` is dropped and ``on_topics_changed`` runs on every partition, so groups subscribed
to a new or grown topic get it (after its share state is initialized) on their next heartbeat.

Log size: the runtime prunes a partition's log below the shard's ``last_redundant_offset`` (the
oldest latest-record of a live key); Kafka compacts ``__consumer_offsets`` instead.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from coordinator.group import offsets as off
from coordinator.group.classic import group as cl
from coordinator.group.classic.ops import ClassicGroupOps
from coordinator.group.consumer.ops import ConsumerGroupOps
from coordinator.group.offset_ops import OffsetOps
from coordinator.group.service_base import (
    CONSUMER_OFFSETS_TOPIC,
    GroupConfigSource,
    MemberListener,
    ShardOp,
    ShareGroupTimeouts,
)
from coordinator.group.shard import GROUP_TYPE as SHARE_GROUP_TYPE
from coordinator.group.shard import GroupCoordinatorShard, ListedGroup
from coordinator.group.share.ops import ShareGroupOps
from coordinator.host import CoordinatorHost, TopicView
from coordinator.runtime.loop import PartitionStatus
from persister.api import Persister

log = logging.getLogger("shoal.groups")

# segment.bytes of __consumer_offsets when we create it (Kafka: offsets.topic.segment.bytes,
# 100 MiB). Pruning deletes whole segments, so this bounds the redundant bytes kept.
OFFSETS_SEGMENT_BYTES = 1 << 20

__all__ = ["CONSUMER_OFFSETS_TOPIC", "ConsumerGroupView", "GroupConfigSource",
           "GroupCoordinatorService", "MemberListener", "ShardOp", "ShareGroupTimeouts",
           "ensure_offsets_topic", "open_group_coordinator"]


@dataclass(frozen=True, slots=True)
class ConsumerGroupView:
    """A consumer group as the metrics see it (``GroupCoordinatorService.consumer_groups``).
    ``members`` is None for a group type whose members this service cannot count yet."""

    group_id: str
    group_type: str
    state: str
    members: int | None
    offsets: tuple[off.FetchedOffset, ...]


class GroupCoordinatorService(ShareGroupOps, ConsumerGroupOps, ClassicGroupOps, OffsetOps):
    """The group coordinator of this broker: share, consumer-protocol and classic groups and
    their committed offsets (see the module doc)."""

    def _new_shard(self, _partition: int) -> GroupCoordinatorShard:
        return GroupCoordinatorShard(
            group_config=self._settings,
            # No classic/consumer groups exist yet, so no group id belongs to another type.
            is_non_share_group=lambda _group_id: False,
            initialize_retry_interval_ms=self._broker_config.get(
                "group.share.initialize.retry.interval.ms"),
            loading=True,
            on_member_removed=self._member_removed,
            classic_config=self._classic_settings,
            deliver=self._deliver,
            consumer_config=self._consumer_settings,
            on_consumer_member_removed=self._consumer_member_removed,
        )

    def list_groups(self, states_filter: Iterable[str] | None = None) -> list[ListedGroup]:
        """Committed share groups of every served partition, sorted by id, optionally filtered
        by state name (case-insensitive)."""
        # Lowered once here, not once per partition (a filter of tens of thousands of names).
        wanted = {s.lower() for s in states_filter} if states_filter else None
        out: list[ListedGroup] = []
        for p in self.runtime.partitions():
            shard = self.runtime.shard(p)
            if self.runtime.status(p) is PartitionStatus.ACTIVE and shard is not None:
                out.extend(g for g in shard.list_groups()
                           if wanted is None or g.state.lower() in wanted)
        out.sort(key=lambda g: g.group_id)
        return out

    def consumer_groups(self) -> list[ConsumerGroupView]:
        """Every non-share group of the served partitions (classic, and consumer-type groups
        where the shard lists them) with its member count and committed offsets, sorted by id.
        Read-only, committed view; for the metrics collector."""
        out: list[ConsumerGroupView] = []
        for p in self.runtime.partitions():
            shard = self.runtime.shard(p)
            if self.runtime.status(p) is not PartitionStatus.ACTIVE or shard is None:
                continue
            offsets = shard.classic.offsets.committed_offsets()
            for g in shard.list_groups():
                if g.group_type == SHARE_GROUP_TYPE:
                    continue
                members: int | None = None
                if g.group_type == cl.GROUP_TYPE:
                    described = shard.describe_classic(g.group_id)
                    members = len(described.members) if described is not None else 0
                elif g.group_type == "consumer":
                    # KIP-848 groups live in ``shard.consumer`` (their offsets, like classic
                    # groups', in the classic offsets store read above).
                    group = shard.consumer.committed_group(g.group_id)
                    members = len(group.members) if group is not None else None
                out.append(ConsumerGroupView(g.group_id, g.group_type, g.state, members,
                                             tuple(offsets.get(g.group_id, ()))))
        out.sort(key=lambda v: v.group_id)
        return out


# ---------------------------------------------------------------------------------------------
# Opening: __consumer_offsets, the runtime and the service


def _topic_configs() -> dict[str, Any]:
    # Group records must never expire by age or size; only pruning removes them.
    return {"retention.ms": -1, "retention.bytes": -1, "segment.bytes": OFFSETS_SEGMENT_BYTES}


def ensure_offsets_topic(host: CoordinatorHost) -> TopicView:
    """``__consumer_offsets`` with ``offsets.topic.num.partitions`` partitions and the group
    coordinator's configs."""
    return host.ensure_internal_topic(CONSUMER_OFFSETS_TOPIC, "offsets.topic.num.partitions",
                                      _topic_configs())


async def open_group_coordinator(host: CoordinatorHost, *, persister: Persister,
                            group_configs: GroupConfigSource) -> GroupCoordinatorService:
    """Create or open ``__consumer_offsets``, load every partition and return the service.
    ``persister`` holds the share groups' durable share state; ``group_configs`` the per-group
    configs."""
    topic = ensure_offsets_topic(host)
    service = GroupCoordinatorService(
        clock=host.clock, broker_config=host.config, group_configs=group_configs,
        persister=persister, topics=host.topics.all, num_partitions=topic.partitions)

    load_ms = await service.load(
        lambda p: host.log_for(CONSUMER_OFFSETS_TOPIC, p),
        [p for p in range(topic.partitions) if host.leads(CONSUMER_OFFSETS_TOPIC, p)])
    if any(g.deleting for p in service.runtime.partitions()
           if (shard := service.runtime.shard(p)) is not None for g in shard.groups.values()):
        service.topics_changed()  # finish deleting the share state of deleted topics
    runtime = service.runtime
    records = sum(s.load.records for p in runtime.partitions()
                  if (s := runtime.stats(p)) is not None and s.load is not None)
    shards = [shard for p in runtime.partitions() if (shard := runtime.shard(p)) is not None]
    groups = sum(len(shard.groups) for shard in shards)
    consumer = sum(len(shard.consumer.store.groups) for shard in shards)
    log.info("group coordinator loaded %d partition(s) of %s (%d records, %d share groups, %d "
             "consumer groups) in %.0f ms", len(runtime.partitions()), CONSUMER_OFFSETS_TOPIC, records,
             groups, consumer, load_ms)
    return service
