"""AlterPartitionReassignments (45) v0-1: move partitions to new replica lists, or cancel a move.

Authorization as Kafka: ALTER on the CLUSTER, else the top-level error and every partition are
CLUSTER_AUTHORIZATION_FAILED. Per partition: UNKNOWN_TOPIC_OR_PARTITION; a target that is
empty, names a broker twice or an unregistered broker -> INVALID_REPLICA_ASSIGNMENT; v1 with
``allow_replication_factor_change`` false and another replica count ->
INVALID_REPLICATION_FACTOR; a null target cancels the running move (NO_REASSIGNMENT_IN_PROGRESS
when there is none).

In a cluster the partition's replicas become the target followed by the replicas leaving, with
``adding``/``removing`` recorded in etcd (``cluster/election.py``); the new replicas fetch from
the leader, the leader adds them to the ISR once caught up, and the controller then drops the
removed replicas (electing a new leader if the leader was one of them). The answer comes once
the move has started (ListPartitionReassignments shows it until it completes). A single broker
can only "move" a partition to itself (a no-op). At most ``MAX_PARTITIONS_PER_REQUEST``
partitions per request, else each is answered POLICY_VIOLATION.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import CLUSTER, Operation
from broker.cluster_admin import (
    MAX_PARTITIONS_PER_REQUEST,
    Outcome,
    Plan,
    apply_plan,
    local_topics,
    plan_in_slices,
    plan_reassignments,
)
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE, err_message
from broker.wire_limits import breathe
from cluster.election import ElectionError
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import AlterPartitionReassignmentsRequest

API_KEY = 45
VERSIONS = (0, 1)

Wanted = dict[str, list[tuple[int, tuple[int, ...] | None]]]


async def _wanted(req: AlterPartitionReassignmentsRequest) -> Wanted:
    out: Wanted = {}
    topics: tuple[Any, ...] = req.topics
    for i, t in enumerate(topics):
        await breathe(i)
        out.setdefault(t.name, []).extend(
            (int(p.partition_index), None if p.replicas is None else tuple(map(int, p.replicas)))
            for p in t.partitions)
    return out


def _all_answered(wanted: Wanted, outcome: Outcome) -> Plan:
    return Plan(outcomes={t: [(p, outcome) for p, _ in ps] for t, ps in wanted.items()})


async def handle(ctx: RequestContext, req: AlterPartitionReassignmentsRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    broker = ctx.broker
    wanted = await _wanted(req)
    allow_rf_change = bool(getattr(req, "allow_replication_factor_change", True))
    top: Outcome = (ErrorCode.none, None)
    if not ctx.authorized(Operation.ALTER, CLUSTER):
        top = (ErrorCode.cluster_authorization_failed,
               f"principal {ctx.principal} may not ALTER the cluster "
               "(AlterPartitionReassignments needs it)")
        plan = _all_answered(wanted, top)
    elif sum(map(len, wanted.values())) > MAX_PARTITIONS_PER_REQUEST:
        plan = _all_answered(wanted, (ErrorCode.policy_violation,
                                      f"at most {MAX_PARTITIONS_PER_REQUEST} partitions per "
                                      "AlterPartitionReassignments request; split it"))
    elif broker.member is None:
        counts = {t.name: t.partitions for t in broker.topics.all() if t.name in wanted}
        here = local_topics(broker.node_id, counts)
        plan = await plan_in_slices(
            lambda chunk: plan_reassignments(here, lambda n: n == broker.node_id, chunk,
                                             allow_rf_change), wanted)
    else:
        member = broker.member
        view = member.store.view

        def compute() -> Plan:
            return plan_reassignments(view.topics, lambda n: n in view.brokers, wanted,
                                      allow_rf_change)

        try:
            plan = await apply_plan(member, compute, "AlterPartitionReassignments")
        except ElectionError as e:
            plan = _all_answered(wanted, (e.error, e.message))
    responses = []
    done = 0  # the loop is served every slice of partitions, across topics (issue 25)
    for topic, outcomes in plan.outcomes.items():
        parts = []
        for p, (code, msg) in outcomes:
            done += 1
            await breathe(done)
            parts.append(make(m.ReassignablePartitionResponse, partition_index=p,
                              error_code=code, error_message=err_message(code, msg)))
        responses.append(make(m.ReassignableTopicResponse, name=topic, partitions=tuple(parts)))
    return make(m.AlterPartitionReassignmentsResponse, throttle_time=NO_THROTTLE,
                error_code=top[0], error_message=top[1], responses=tuple(responses))
