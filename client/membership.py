"""Share-group membership: ShareGroupHeartbeat requests and what their answers mean (sans-IO).

Rules (reference section 5): the member id is made by the client once (a random UUID in Kafka's
22-character base64 form) and kept for the consumer's life. Epoch 0 joins (the subscription must
be sent), the broker answers with the member epoch, the heartbeat interval and an assignment;
later heartbeats send the current epoch and send the subscription only when it changed. Epoch -1
leaves. UNKNOWN_MEMBER_ID and FENCED_MEMBER_EPOCH mean "join again at epoch 0" (the assignment
is dropped). NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS mean
"find the coordinator again and retry". Any other error is fatal and is raised to the
application by the next ``getmany``.

There is no revocation step in share groups: a member simply gets its new assignment.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from client.errors import KafkaError, error_for
from protocol.codec import request_module

SHARE_GROUP_HEARTBEAT = 76
LEAVE_EPOCH = -1

REJOIN = frozenset({ErrorCode.unknown_member_id, ErrorCode.fenced_member_epoch})
COORDINATOR_MOVED = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                               ErrorCode.coordinator_load_in_progress})

__all__ = ["HeartbeatOutcome", "Membership", "new_member_id"]


def new_member_id() -> str:
    """A random member id, formatted as Kafka formats a ``Uuid`` (url-safe base64, no padding)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


@dataclass(frozen=True, slots=True)
class HeartbeatOutcome:
    """What the shell should do after a heartbeat answer."""

    assignment_changed: bool = False
    find_coordinator: bool = False
    error: KafkaError | None = None  # fatal: surface to the application


class Membership:
    def __init__(self, group_id: str, member_id: str | None = None,
                 rack_id: str | None = None) -> None:
        self.group_id = group_id
        self.member_id = member_id or new_member_id()
        self.rack_id = rack_id
        self.epoch = 0
        self.interval_ms = 5000
        self.subscription: tuple[str, ...] = ()
        self._subscription_sent = False
        # topic id -> partitions, as the coordinator last sent it
        self.assignment: dict[uuid.UUID, tuple[int, ...]] = {}
        self.leaving = False

    @property
    def joined(self) -> bool:
        return self.epoch > 0

    def subscribe(self, topics: tuple[str, ...]) -> None:
        if topics != self.subscription:
            self.subscription = topics
            self._subscription_sent = False
            self.leaving = False

    def request(self) -> Any:
        """The next heartbeat body (a join, a plain heartbeat, or a leave)."""
        m = request_module(SHARE_GROUP_HEARTBEAT, 1)
        epoch = LEAVE_EPOCH if self.leaving else self.epoch
        send_topics = epoch == 0 or not self._subscription_sent
        return m.ShareGroupHeartbeatRequest(
            group_id=self.group_id, member_id=self.member_id, member_epoch=epoch,
            rack_id=self.rack_id,
            subscribed_topic_names=self.subscription if send_topics and epoch != LEAVE_EPOCH
            else None)

    def on_response(self, req: Any, resp: Any) -> HeartbeatOutcome:
        """Apply a heartbeat answer to ``req``."""
        code = ErrorCode(resp.error_code)
        if code != ErrorCode.none:
            if code in REJOIN:
                changed = bool(self.assignment)
                self.epoch, self.assignment, self._subscription_sent = 0, {}, False
                return HeartbeatOutcome(assignment_changed=changed)
            if code in COORDINATOR_MOVED:
                return HeartbeatOutcome(find_coordinator=True)
            return HeartbeatOutcome(error=error_for(code, resp.error_message))
        if req.member_epoch == LEAVE_EPOCH:
            changed = bool(self.assignment)
            self.epoch, self.assignment = 0, {}
            return HeartbeatOutcome(assignment_changed=changed)
        if req.subscribed_topic_names is not None:
            self._subscription_sent = True
        self.epoch = int(resp.member_epoch)
        self.interval_ms = int(resp.heartbeat_interval.total_seconds() * 1000) or self.interval_ms
        if resp.assignment is None:
            return HeartbeatOutcome()
        new = {tp.topic_id: tuple(sorted(tp.partitions))
               for tp in resp.assignment.topic_partitions if tp.partitions}
        changed = new != self.assignment
        self.assignment = new
        return HeartbeatOutcome(assignment_changed=changed)
