"""Consumer-protocol (KIP-848) operations of the group coordinator service:
ConsumerGroupHeartbeat and ConsumerGroupDescribe (``coordinator/group/consumer/`` holds the
state machine). Regex subscriptions are resolved against ``topics_version()``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from kio.schema.errors import ErrorCode

from coordinator.group.consumer import heartbeat as ch
from coordinator.group.consumer.assignor import consumer_assignors
from coordinator.group.service_base import GroupServiceBase
from coordinator.group.shard import ConsumerDescribeResult, GroupCoordinatorShard
from coordinator.runtime.loop import CoordinatorFailure

log = logging.getLogger("shoal.groups")


class ConsumerGroupOps(GroupServiceBase):
    """Consumer-protocol groups (see the module doc)."""

    def _consumer_settings(self, group_id: str) -> ch.ConsumerGroupSettings:
        get = self._broker_config.get
        session, heartbeat = self._configs.consumer_timeouts(group_id)
        return ch.ConsumerGroupSettings(
            session_timeout_ms=session, heartbeat_interval_ms=heartbeat,
            settling_heartbeat_interval_ms=get("group.consumer.settling.heartbeat.interval.ms"),
            max_size=get("group.consumer.max.size"),
            assignors=consumer_assignors(get("group.consumer.assignors")),
            migration_policy=get("group.consumer.migration.policy"),
            classic_max_size=get("group.max.size"))

    def _consumer_member_removed(self, group_id: str, member_id: str) -> None:
        if (group_id, member_id) in self._consumer_leaving:
            return  # logged by consumer_heartbeat
        log.warning("member %s of consumer group %s was removed: no heartbeat within its session "
                    "timeout, or it did not revoke partitions within its rebalance timeout",
                    member_id, group_id, extra={"event": "member_expired", "group": group_id,
                                                "member": member_id})

    async def consumer_heartbeat(self, req: ch.ConsumerHeartbeatRequest,
                                 allowed: ch.TopicFilter | None = None
                                 ) -> ch.ConsumerHeartbeatResponse:
        """ConsumerGroupHeartbeat; expected failures are error codes in the response.
        ``allowed`` narrows regex matches to the topics the principal may DESCRIBE."""
        leave = (req.group_id, req.member_id)
        if req.member_epoch < 0:
            self._consumer_leaving.add(leave)
        was_classic = self._is_classic(req.group_id)
        try:
            out = await self._write(req.group_id, lambda shard, now: shard.consumer_group_heartbeat(
                req, self.topics_image(), now, topics_version=self.topics_version(),
                allowed=allowed))
        finally:
            self._consumer_leaving.discard(leave)
        if isinstance(out, CoordinatorFailure):
            return ch.error_response(out.error, out.message)
        response: ch.ConsumerHeartbeatResponse = out
        if response.error_code == ErrorCode.none:
            if req.member_epoch == 0:
                log.info("member %s joined consumer group %s (client %s at %s)",
                         response.member_id, req.group_id, req.client_id, req.client_host,
                         extra={"event": "member_joined", "group": req.group_id,
                                "member": response.member_id})
            elif req.member_epoch < 0:
                log.info("member %s left consumer group %s", response.member_id, req.group_id,
                         extra={"event": "member_left", "group": req.group_id,
                                "member": response.member_id})
            self._log_migration(req.group_id, was_classic)
        return response

    def _is_classic(self, group_id: str) -> bool:
        shard = self.shard_for(group_id)
        return shard is not None and group_id in shard.classic.groups

    def _log_migration(self, group_id: str, was_classic: bool) -> None:
        """Say when a heartbeat converted the group (``consumer/migration.py``)."""
        now_classic = self._is_classic(group_id)
        if was_classic == now_classic:
            return
        policy = self._broker_config.get("group.consumer.migration.policy")
        if now_classic:
            log.info("consumer group %s was downgraded to a classic group: its last "
                     "consumer-protocol member left (group.consumer.migration.policy=%s)",
                     group_id, policy, extra={"event": "group_downgraded", "group": group_id})
        else:
            log.info("classic group %s was upgraded to a consumer group: a member joined with "
                     "the consumer protocol (group.consumer.migration.policy=%s)", group_id,
                     policy, extra={"event": "group_upgraded", "group": group_id})

    def describe_consumer(self, group_ids: Iterable[str]) -> list[ConsumerDescribeResult]:
        """ConsumerGroupDescribe: one result per id (GROUP_ID_NOT_FOUND for unknown, share and
        classic ids; COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR when not served)."""
        return self._describe_each(group_ids, GroupCoordinatorShard.describe_consumer,
                                   ConsumerDescribeResult)

    def consumer_exists(self, group_id: str) -> bool:
        shard = self.shard_for(group_id)
        return shard is not None and shard.consumer.committed_group(group_id) is not None
