"""ListPartitionReassignments (46) v0: the partition moves in progress.

Authorization as Kafka: DESCRIBE on the CLUSTER, else CLUSTER_AUTHORIZATION_FAILED (top level,
no topics). A null topic list means every topic; listed topics that do not exist are left out,
and an empty partition list means every partition of the topic. Each entry gives the partition's
replicas (the target first, then the replicas leaving), the adding and the removing replicas
(``cluster/view.py``). A single broker never has a move in progress.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import CLUSTER, Operation
from broker.cluster_admin import reassignments
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from broker.wire_limits import breathe
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import ListPartitionReassignmentsRequest

API_KEY = 46
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: ListPartitionReassignmentsRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    broker = ctx.broker
    if not ctx.authorized(Operation.DESCRIBE, CLUSTER):
        return make(m.ListPartitionReassignmentsResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.cluster_authorization_failed,
                    error_message=f"principal {ctx.principal} may not DESCRIBE the cluster "
                    "(ListPartitionReassignments needs it)", topics=())
    if broker.member is None:
        return make(m.ListPartitionReassignmentsResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.none, error_message=None, topics=())
    wanted: dict[str, list[int]] | None = None
    if req.topics is not None:
        wanted = {}
        for t in req.topics:
            wanted.setdefault(t.name, []).extend(int(p) for p in t.partition_indexes)
    found = reassignments(broker.member.store.view.topics, wanted)
    topics = []
    for i, (name, parts) in enumerate(found.items()):
        await breathe(i)
        topics.append(make(m.OngoingTopicReassignment, name=name, partitions=tuple(
            make(m.OngoingPartitionReassignment, partition_index=p, replicas=a.replicas,
                 adding_replicas=a.adding, removing_replicas=a.removing) for p, a in parts)))
    return make(m.ListPartitionReassignmentsResponse, throttle_time=NO_THROTTLE,
                error_code=ErrorCode.none, error_message=None, topics=tuple(topics))
