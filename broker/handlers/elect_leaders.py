"""ElectLeaders (43) v0-2: elect the preferred (0) or, for offline partitions, an unclean (1)
leader.

Authorization as Kafka's controller: ALTER on the CLUSTER, else every listed partition (and,
v1+, the top-level error) is CLUSTER_AUTHORIZATION_FAILED. An unknown election type is
INVALID_REQUEST. Per partition, as Kafka: UNKNOWN_TOPIC_OR_PARTITION; ELECTION_NOT_NEEDED when
the preferred replica leads already (PREFERRED) or a live leader exists (UNCLEAN);
PREFERRED_LEADER_NOT_AVAILABLE when the first replica is down, shutting down or out of the ISR;
ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica is live. A null partition list means every
partition of every topic, and then the partitions that needed no election are left out.

A cluster member computes the new leaders from the etcd view (``cluster/election.py``) and writes
them with compare-and-swap (``broker/cluster_admin.py``), answering once the change is visible
here; the new leaders' epochs are one higher. A single broker leads every partition as its
only replica, so every election there is not needed. At most ``MAX_PARTITIONS_PER_REQUEST``
partitions per request, else each is answered POLICY_VIOLATION.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import CLUSTER, Operation
from broker.cluster_admin import (
    MAX_PARTITIONS_PER_REQUEST,
    PREFERRED,
    UNCLEAN,
    Outcome,
    Plan,
    apply_plan,
    local_topics,
    plan_elections,
    plan_in_slices,
)
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE, err_message
from broker.wire_limits import breathe
from cluster.election import Brokers, ElectionError
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import ElectLeadersRequest

API_KEY = 43
VERSIONS = (0, 2)


async def _wanted(req: ElectLeadersRequest) -> dict[str, list[int]] | None:
    if req.topic_partitions is None:
        return None
    out: dict[str, list[int]] = {}
    wanted: tuple[Any, ...] = req.topic_partitions
    for i, t in enumerate(wanted):
        await breathe(i)
        out.setdefault(t.topic, []).extend(int(p) for p in t.partitions)
    return out


def _all_answered(wanted: dict[str, list[int]], outcome: Outcome) -> Plan:
    return Plan(outcomes={t: [(p, outcome) for p in ps] for t, ps in wanted.items()})


async def handle(ctx: RequestContext, req: ElectLeadersRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    broker = ctx.broker
    wanted = await _wanted(req)
    election_type = int(getattr(req, "election_type", PREFERRED))  # v0: preferred only
    top: Outcome = (ErrorCode.none, None)
    if not ctx.authorized(Operation.ALTER, CLUSTER):
        top = (ErrorCode.cluster_authorization_failed,
               f"principal {ctx.principal} may not ALTER the cluster (ElectLeaders needs it)")
    elif election_type not in (PREFERRED, UNCLEAN):
        top = (ErrorCode.invalid_request, f"unknown election type {election_type}; "
               "0 (preferred) and 1 (unclean) exist")
    if top[0] != ErrorCode.none:
        plan = _all_answered(wanted or {}, top)
    elif wanted is not None and sum(map(len, wanted.values())) > MAX_PARTITIONS_PER_REQUEST:
        plan = _all_answered(wanted, (ErrorCode.policy_violation,
                                      f"at most {MAX_PARTITIONS_PER_REQUEST} partitions per "
                                      "ElectLeaders request; split it"))
    elif broker.member is None:
        counts = {t.name: t.partitions for t in broker.topics.all()}
        here = local_topics(broker.node_id, counts)
        alone = Brokers(frozenset({broker.node_id}))
        if wanted is None:  # every partition: as many as the broker has, not the request
            plan = plan_elections(here, alone, election_type, None)
        else:
            plan = await plan_in_slices(
                lambda chunk: plan_elections(here, alone, election_type, chunk), wanted)
    else:
        member = broker.member
        view = member.store.view

        def compute() -> Plan:
            return plan_elections(view.topics, Brokers.of(view), election_type, wanted)

        try:
            plan = await apply_plan(member, compute, "ElectLeaders")
        except ElectionError as e:
            plan = _all_answered(wanted or {}, (e.error, e.message))
    results = []
    done = 0  # the loop is served every slice of partitions, across topics (issue 25)
    for topic, outcomes in plan.outcomes.items():
        parts = []
        for p, (code, msg) in outcomes:
            done += 1
            await breathe(done)
            parts.append(make(m.PartitionResult, partition_id=p, error_code=code,
                              error_message=err_message(code, msg)))
        results.append(make(m.ReplicaElectionResult, topic=topic, partition_result=tuple(parts)))
    return make(m.ElectLeadersResponse, throttle_time=NO_THROTTLE, error_code=top[0],
                replica_election_results=tuple(results))
