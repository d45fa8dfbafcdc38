"""ListConfigResources (74) v0-1: the resources that have configs (KIP-1142; what
``kafka-configs --describe --entity-type groups`` without ``--entity-name`` lists first).

v0 is Kafka's former ListClientMetricsResources (KIP-714): client-metrics subscriptions only, of
which Shoal has none, so its list is empty. v1 takes ``ResourceTypes`` (empty: every type Kafka
supports) and lists, per type asked:

- GROUP (32): the groups with configs of their own (``broker/group_configs.py``);
- TOPIC (2): every topic, internal ones included, as Kafka's metadata cache lists them;
- BROKER (4) and BROKER_LOGGER (8): the live brokers' node ids (this node when not clustered);
- CLIENT_METRICS (16): none (Shoal has no client-metrics subscriptions).

A type outside these five answers UNSUPPORTED_VERSION with an empty list, as Kafka does.

Authorization (``broker/authz.py``), as Kafka: DESCRIBE_CONFIGS on the CLUSTER, else
CLUSTER_AUTHORIZATION_FAILED and an empty list.

Bounds: the type list holds at most the request size's worth of one-byte ids; each distinct type
is listed once. The listing is as long as the broker's topics and groups with configs (the latter
bounded by ``group.config.max.groups``); a response over ``YIELD_EVERY`` names is encoded off
the event loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from kio.schema.errors import ErrorCode

from broker.authz import CLUSTER, Operation
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from broker.handlers.describe_configs import ResourceType
from broker.wire_limits import YIELD_EVERY, EncodeOffLoop
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import ListConfigResourcesRequest, ListConfigResourcesRequestV1

API_KEY = 74
VERSIONS = (0, 1)

# Kafka's ListConfigResourcesRequest.supportedResourceTypes(), in the order listed here.
SUPPORTED = (ResourceType.GROUP, ResourceType.CLIENT_METRICS, ResourceType.BROKER_LOGGER,
             ResourceType.BROKER, ResourceType.TOPIC)


def _response(m: Any, error: ErrorCode, resources: tuple[Any, ...] = ()) -> Any:
    return m.ListConfigResourcesResponse(throttle_time=NO_THROTTLE, error_code=error,
                                         config_resources=resources)


def _node_ids(ctx: RequestContext) -> list[str]:
    cluster = ctx.broker.cluster
    if cluster.clustered and ctx.listener is not None:
        return [str(n.node_id) for n in cluster.live_nodes(ctx.listener.name)]
    return [str(ctx.broker.node_id)]


def _names(ctx: RequestContext, kind: ResourceType) -> list[str]:
    broker = ctx.broker
    if kind == ResourceType.GROUP:
        return broker.group_configs.group_ids()
    if kind == ResourceType.TOPIC:
        return sorted(t.name for t in broker.topics.all())
    if kind in (ResourceType.BROKER, ResourceType.BROKER_LOGGER):
        return _node_ids(ctx)
    return []  # CLIENT_METRICS


def handle(ctx: RequestContext, req: ListConfigResourcesRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if not ctx.authorized(Operation.DESCRIBE_CONFIGS, CLUSTER):
        return _response(m, ErrorCode.cluster_authorization_failed)
    if ctx.api_version == 0:
        return _response(m, ErrorCode.none)
    asked = set(int(t) for t in cast("ListConfigResourcesRequestV1", req).resource_types)
    supported = {int(t) for t in SUPPORTED}
    if asked - supported:
        return _response(m, ErrorCode.unsupported_version)
    out: list[Any] = []
    for kind in SUPPORTED:
        if asked and int(kind) not in asked:
            continue
        out.extend(make(m.ConfigResource, resource_name=n, resource_type=int(kind))
                   for n in _names(ctx, kind))
    resp = _response(m, ErrorCode.none, tuple(out))
    return EncodeOffLoop(resp) if len(out) > YIELD_EVERY else resp
