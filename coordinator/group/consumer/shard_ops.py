"""Consumer-protocol (KIP-848) ops of ``GroupCoordinatorShard`` (``coordinator/group/shard.py``
documents the whole): ConsumerGroupHeartbeat and ConsumerGroupDescribe through
``consumer.groups.ConsumerGroups``, and the online migration between classic and consumer
groups (``consumer/migration.py``): a joining heartbeat upgrades a non-empty classic group, the
leave of the last consumer-protocol member downgrades a group of classic members.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.group.classic import group as cl
from coordinator.group.classic import records as cr
from coordinator.group.consumer import heartbeat as ch
from coordinator.group.consumer import migration as mg
from coordinator.group.consumer.group import ConsumerGroup, apply_record
from coordinator.group.consumer.protocol import SubscriptionFormatError
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
        """ConsumerGroupHeartbeat (see ``consumer/heartbeat.py``). A share group's id gets
        GROUP_ID_NOT_FOUND; so does a classic group's with members unless a join may upgrade it
        (``migration.py``); an empty classic group is replaced by the consumer group on a join
        (its GroupMetadata is tombstoned; committed offsets stay), as Kafka does. A leave of the
        last consumer-protocol member may downgrade the group to a classic one."""
        if not self._loaded:
            return CoordinatorResult(response=ch.error_response(
                ErrorCode.coordinator_load_in_progress, "Loading."))
        self._topics_seen = topics
        gid = req.group_id
        settings = self._consumer_config(gid)
        records: list[r.Record] = []
        classic = self.classic.groups.get(gid)
        other = gid in self._groups
        upgraded: ConsumerGroup | None = None
        if classic is not None and not self.consumer.has(gid):
            if classic.members or classic.state is not cl.ClassicState.EMPTY:
                if req.member_epoch != ch.JOIN_GROUP_MEMBER_EPOCH or other:
                    other = True
                else:
                    refusal = self._upgrade(classic, topics, now_ms, settings, records)
                    if refusal is not None:
                        return CoordinatorResult(response=ch.error_response(
                            ErrorCode.group_id_not_found,
                            f"Group {gid} is not a consumer group: cannot upgrade the classic "
                            f"group ({refusal})."))
                    for rec in records[1:]:
                        upgraded = apply_record(upgraded, rec)
            elif req.member_epoch == ch.JOIN_GROUP_MEMBER_EPOCH:
                key = cr.GroupMetadataKey(gid)
                if key in self.classic.store.values:
                    records.append(r.Record(key, None))
        elif req.member_epoch == ch.LEAVE_GROUP_MEMBER_EPOCH and not other:
            down = self._downgrade_on_leave(req, topics, now_ms, settings)
            if down is not None:
                return down
        res = self.consumer.heartbeat(
            req, topics, now_ms, other_type=other, topics_version=topics_version,
            allowed=allowed if allowed is not None else (lambda names: names),
            upgraded=upgraded)
        if res.response.error_code != ErrorCode.none:
            return CoordinatorResult(response=res.response)
        all_records = (*records, *res.records)
        if upgraded is not None:
            fx = cl.Effects(records=list(all_records))
            self.classic.evict(gid, fx)  # waiting classic members rejoin the consumer group
            self._queue(fx)
        elif records:
            self.classic.groups.pop(gid, None)  # soft state of the replaced empty classic group
        if res.emptied:
            self.classic.offsets.arm_retention(gid, now_ms, emptied=True)
        return CoordinatorResult(records=all_records, response=res.response)

    def _upgrade(self, classic: cl.ClassicGroup, topics: TopicsImage, now_ms: int,
                 settings: ch.ConsumerGroupSettings, records: list[r.Record]) -> str | None:
        """Append the records converting ``classic`` to a consumer group; or why it may not."""
        policy = mg.MigrationPolicy.parse(settings.migration_policy)
        refusal = mg.upgrade_refusal(classic, policy, settings.max_size)
        if refusal is not None:
            return refusal
        try:
            records.extend(mg.classic_to_consumer(classic, topics, now_ms))
        except SubscriptionFormatError as exc:
            return f"a member's embedded consumer protocol is malformed: {exc}"
        return None

    def _downgrade_on_leave(self, req: ch.ConsumerHeartbeatRequest, topics: TopicsImage,
                            now_ms: int, settings: ch.ConsumerGroupSettings
                            ) -> CoordinatorResult[r.Record, ch.ConsumerHeartbeatResponse] | None:
        """The leave of the last consumer-protocol member of a group of classic members: the
        group becomes a classic group (None: not such a leave; the heartbeat handles it)."""
        group = self.consumer.group(req.group_id)
        if group is None or ch.validate(req, settings) is not None:
            return None
        if req.instance_id is None:
            member = group.members.get(req.member_id)
        else:
            member = group.static_member(req.instance_id)
        if member is None or member.member_id != req.member_id:
            return None
        fx = cl.Effects()
        if not self.downgrade(group, (member.member_id,), topics, now_ms, fx):
            return None
        self._queue(fx)
        return CoordinatorResult(records=tuple(fx.records), response=ch.ConsumerHeartbeatResponse(
            member_id=member.member_id, member_epoch=req.member_epoch))

    def downgrade(self, group: ConsumerGroup, leaving: tuple[str, ...],
                  topics: TopicsImage | None, now_ms: int, fx: cl.Effects) -> bool:
        """Convert ``group`` to a classic group if ``leaving`` leave only classic members and the
        policy allows it: its records' tombstones and the classic GroupMetadata go to
        ``fx.records``, and the classic group starts rebalancing. False: nothing done."""
        settings = self._consumer_config(group.group_id)
        policy = mg.MigrationPolicy.parse(settings.migration_policy)
        if mg.downgrade_refusal(group, leaving, policy, settings.classic_max_size) is not None:
            return False
        image = topics if topics is not None else self._topics_seen
        fx.records.extend(mg.consumer_group_tombstones(group))
        for mid in group.members:
            if mid not in leaving:
                self._migrated.add((group.group_id, mid))
            for kind in ("consumer-session", "consumer-rebalance", "consumer-join",
                         "consumer-sync"):
                self._cancel((kind, group.group_id, mid))
        self.classic.adopt(mg.consumer_to_classic(group, leaving, image, now_ms), now_ms, fx)
        return True

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
