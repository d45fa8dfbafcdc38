"""Opening the share coordinator: ``__share_group_state``, its runtime and its service.

The broker is the share coordinator of every key (FindCoordinator SHARE answers with it), so at
start it creates ``__share_group_state`` if needed, opens a ``CoordinatorRuntime`` over the
topic's partition logs and loads every partition in parallel before answering requests.

Topic configs (Kafka ``ShareCoordinatorService.shareGroupStateTopicConfigs``): ``retention.ms`` and
``retention.bytes`` -1 (state must never expire by age or size; only pruning removes records) and
``segment.bytes`` from ``share.coordinator.state.topic.segment.bytes``, small by default so pruning
frees disk. An existing topic keeps what it has; missing settings are filled in.

The partition count in use is the topic's: placement hashes keys over it, so changing
``share.coordinator.state.topic.num.partitions`` after the topic exists has no effect (warned).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from coordinator.host import ConfigValues, CoordinatorHost, TopicView
from coordinator.runtime.loop import CoordinatorRuntime
from coordinator.share.runtime_service import (
    ShareCoordinatorService,
    ShareRecordSerde,
    ShareStateShard,
)

log = logging.getLogger("shoal.share.coordinator")

SHARE_STATE_TOPIC = "__share_group_state"


def _topic_configs(config: ConfigValues) -> dict[str, Any]:
    return {
        "retention.ms": -1,
        "retention.bytes": -1,
        "segment.bytes": config.get("share.coordinator.state.topic.segment.bytes"),
    }


def ensure_state_topic(host: CoordinatorHost) -> TopicView:
    """``__share_group_state``, created with the share coordinator's configs if missing."""
    return host.ensure_internal_topic(
        SHARE_STATE_TOPIC, "share.coordinator.state.topic.num.partitions",
        _topic_configs(host.config))


async def open_share_coordinator(host: CoordinatorHost) -> ShareCoordinatorService:
    """Create or open ``__share_group_state``, load every partition and return the service."""
    topic = ensure_state_topic(host)
    cfg = host.config

    def partition_exists(topic_id: uuid.UUID, partition: int) -> bool:
        t = host.topics.by_id(topic_id)
        return t is not None and 0 <= partition < t.partitions

    runtime: CoordinatorRuntime[ShareStateShard] = CoordinatorRuntime(
        ShareCoordinatorService.shard_factory(
            snapshot_update_records_per_snapshot=cfg.get(
                "share.coordinator.snapshot.update.records.per.snapshot"),
            partition_exists=partition_exists,
        ),
        ShareRecordSerde(),
        clock_ms=host.clock.now_ms,
        fsync=cfg.get("share.coordinator.append.fsync"),
        prune_interval_ms=cfg.get("share.coordinator.state.topic.prune.interval.ms"),
        name="share-coordinator",
    )
    service = ShareCoordinatorService(
        runtime,
        num_partitions=topic.partitions,
        clock_ms=host.clock.now_ms,
        cold_snapshot_interval_ms=cfg.get("share.coordinator.cold.partition.snapshot.interval.ms"),
    )

    load_ms = await service.load_all(
        lambda p: host.log_for(SHARE_STATE_TOPIC, p),
        [p for p in range(topic.partitions) if host.leads(SHARE_STATE_TOPIC, p)])
    records = sum(s.load.records for p in runtime.partitions()
                  if (s := runtime.stats(p)) is not None and s.load is not None)
    log.info("share coordinator loaded %d partition(s) of %s (%d records) in %.0f ms; fsync=%s",
             len(runtime.partitions()), SHARE_STATE_TOPIC, records, load_ms, runtime.fsync)
    return service
