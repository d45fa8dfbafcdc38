"""DescribeCluster (60) v0-2: cluster id, controller and brokers (KIP-700, KIP-919).

One broker: it is the whole cluster and reports itself as the controller. Only the broker
endpoint type (1) is served; asking a broker for controllers (2) is MISMATCHED_ENDPOINT_TYPE and
any other type UNSUPPORTED_ENDPOINT_TYPE, as KIP-919 specifies. There is no authorizer, so when
the client asks for the cluster's authorized operations it gets every cluster operation.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from protocol.codec import response_module
from protocol.messages import make

API_KEY = 60
VERSIONS = (0, 2)

BROKERS_ENDPOINT, CONTROLLERS_ENDPOINT = 1, 2

# AclOperation ids that apply to the CLUSTER resource: CREATE 4, ALTER 7, DESCRIBE 8,
# CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12.
ALL_CLUSTER_OPERATIONS = sum(1 << op for op in (4, 7, 8, 9, 10, 11, 12))
OPERATIONS_NOT_REQUESTED = -2147483648


def handle(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    m = response_module(API_KEY, ctx.api_version)
    endpoint_type = getattr(req, "endpoint_type", BROKERS_ENDPOINT)
    ops = (ALL_CLUSTER_OPERATIONS if req.include_cluster_authorized_operations
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
        host, port = ctx.advertised
        brokers = (make(m.DescribeClusterBroker, broker_id=broker.node_id, host=host, port=port,
                        rack=None, is_fenced=False),)
    return make(m.DescribeClusterResponse, throttle_time=NO_THROTTLE, error_code=error,
                error_message=message, endpoint_type=endpoint_type, cluster_id=broker.cluster_id,
                controller_id=broker.node_id, brokers=brokers,
                cluster_authorized_operations=ops)
