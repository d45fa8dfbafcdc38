"""Consumer-protocol (KIP-848) ops of ``GroupCoordinatorShard`` (``coordinator/group/shard.py``
documents the whole): ConsumerGroupHeartbeat and ConsumerGroupDescribe through
``consumer.groups.ConsumerGroups``.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.group.classic import group as cl
from coordinator.group.classic import records as cr
from coordinator.group.consumer import heartbeat as ch
from coordinator.group.shard_base import ConsumerDescribeResult, ShardBase
from coordinator.group.share import records as r
from coordinator.group.topics_image import TopicsImage
from coordinator.runtime.result import CoordinatorResult


class ConsumerShardOps(ShardBase):
    """Consumer-protocol groups of one coordinator partition (see the module doc)."""

    def consumer_group_heartbeat(
        self, req: ch.ConsumerHeartbeatRequest, topics: TopicsImage, now_ms: int, *,
        topics_version: int = 0, allowed: ch.TopicFilter | None = None,
    ) -> CoordinatorResult[r.Record, ch.ConsumerHeartbeatResponse]:
        """ConsumerGroupHeartbeat (see ``consumer/heartbeat.py``). A share group's id, or a
        classic group's with members, gets GROUP_ID_NOT_FOUND; an empty classic group is
        replaced by the consumer group on a join (its GroupMetadata is tombstoned; committed
        offsets stay), as Kafka does."""
        if not self._loaded:
            return CoordinatorResult(response=ch.error_response(
                ErrorCode.coordinator_load_in_progress, "Loading."))
        gid = req.group_id
        records: list[r.Record] = []
        classic = self.classic.groups.get(gid)
        other = gid in self._groups
        if classic is not None and not self.consumer.has(gid):
            if classic.members or classic.state is not cl.ClassicState.EMPTY:
                other = True
            elif req.member_epoch == ch.JOIN_GROUP_MEMBER_EPOCH:
                key = cr.GroupMetadataKey(gid)
                if key in self.classic.store.values:
                    records.append(r.Record(key, None))  # type: ignore[arg-type]
        res = self.consumer.heartbeat(
            req, topics, now_ms, other_type=other, topics_version=topics_version,
            allowed=allowed if allowed is not None else (lambda names: names))
        if res.response.error_code != ErrorCode.none:
            return CoordinatorResult(response=res.response)
        if records:
            self.classic.groups.pop(gid, None)  # soft state of the replaced empty classic group
        if res.emptied:
            self.classic.offsets.arm_retention(gid, now_ms)
        return CoordinatorResult(records=(*records, *res.records), response=res.response)

    def describe_consumer(self, group_id: str) -> ConsumerDescribeResult:
        """ConsumerGroupDescribe of one id (committed view): GROUP_ID_NOT_FOUND for unknown ids
        and for share or classic groups ("is not a consumer group"), as Kafka."""
        if not self._loaded:
            return ConsumerDescribeResult(ErrorCode.coordinator_load_in_progress)
        group = self.consumer.committed_group(group_id)
        if group is None:
            other = self._store.committed_group(group_id) is not None or \
                self.classic.has(group_id)
            message = (f"Group {group_id} is not a consumer group." if other
                       else f"Group {group_id} not found.")
            return ConsumerDescribeResult(ErrorCode.group_id_not_found, error_message=message)
        return ConsumerDescribeResult(ErrorCode.none, group, assignor_name=ch.preferred_assignor(
            group, self._consumer_config(group_id)))
