"""DescribeCluster (60) v0-2: cluster id, controller and brokers (KIP-700, KIP-919).

One broker: it is the whole cluster and reports itself as the controller. Only the broker
endpoint type (1) is served; asking a broker for controllers (2) is MISMATCHED_ENDPOINT_TYPE and
any other type UNSUPPORTED_ENDPOINT_TYPE, as KIP-919 specifies. The RPC itself needs no
permission; the cluster's AuthorizedOperations, when asked for, are the bitfield of the CLUSTER
operations the principal may perform if it may DESCRIBE the cluster, else 0 (as Kafka). With
authorization off that is every cluster operation but CLUSTER_ACTION (``super.users`` only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import CLUSTER, OPERATIONS_NOT_REQUESTED, Operation
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from broker.handlers._routing import broker_entries
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import DescribeClusterRequest

API_KEY = 60
VERSIONS = (0, 2)

BROKERS_ENDPOINT, CONTROLLERS_ENDPOINT = 1, 2



def cluster_operations(ctx: RequestContext) -> int:
    """The cluster's AuthorizedOperations for ``ctx``'s principal (0 without CLUSTER DESCRIBE)."""
    if not ctx.authorized(Operation.DESCRIBE, CLUSTER, audit=False):
        return 0
    return ctx.authorized_operations(CLUSTER)


def handle(ctx: RequestContext, req: DescribeClusterRequest) -> Any:
    broker = ctx.broker
    m = response_module(API_KEY, ctx.api_version)
    endpoint_type = getattr(req, "endpoint_type", BROKERS_ENDPOINT)
    ops = (cluster_operations(ctx) if req.include_cluster_authorized_operations
           else OPERATIONS_NOT_REQUESTED)
    error, message = ErrorCode.none, None
    brokers: tuple[Any, ...] = ()
    if endpoint_type == CONTROLLERS_ENDPOINT:
        error, message = (ErrorCode.mismatched_endpoint_type,
                          "this is a broker; it cannot describe controller endpoints")
    elif endpoint_type != BROKERS_ENDPOINT:
        error, message = (ErrorCode.unsupported_endpoint_type,
                          f"unknown endpoint type {endpoint_type}")
    else:
        brokers = broker_entries(ctx, m, "DescribeClusterBroker", is_fenced=False)
    return make(m.DescribeClusterResponse, throttle_time=NO_THROTTLE, error_code=error,
                error_message=message, endpoint_type=endpoint_type, cluster_id=broker.cluster_id,
                controller_id=broker.cluster.controller_id(), brokers=brokers,
                cluster_authorized_operations=ops)
