"""Routing answers shared by the handlers: which brokers to list, and who leads a partition.

A single broker lists itself and leads everything. A cluster member (``broker.member``) lists
the live members on the listener the request came in on, and answers NOT_LEADER_OR_FOLLOWER
for a partition another broker leads (with that leader's endpoint where the response carries
it, KIP-951) and for one no broker leads now (offline): Kafka's data-plane answer, on which
every client refreshes its metadata. LEADER_NOT_AVAILABLE is Metadata's word for offline; in a
Fetch or ShareFetch answer both Kafka clients raise it to the application.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.context import RequestContext
from cluster.metadata import NO_LEADER, Node
from protocol.messages import make


def listener_name(ctx: RequestContext) -> str:
    """The listener a request came in on (the first configured one for hand-built contexts):
    a client is told the brokers' addresses on that listener."""
    if ctx.listener is not None:
        return ctx.listener.name
    return ctx.broker.config.listeners[0].name


def broker_entries(ctx: RequestContext, m: Any, entry_type: str, **extra: Any) -> tuple[Any, ...]:
    """The brokers for a Metadata/DescribeCluster answer: this one alone, or every live
    cluster member on the request's listener (for Metadata, also one that left seconds ago:
    ``ClusterMetadata.metadata_nodes``)."""
    broker = ctx.broker
    id_field = "node_id" if entry_type == "MetadataResponseBroker" else "broker_id"
    cls = getattr(m, entry_type)
    if not broker.cluster.clustered:
        host, port = ctx.advertised
        return (make(cls, **{id_field: broker.node_id}, host=host, port=port, rack=None,
                     **extra),)
    # Metadata also lists, for a few seconds, a broker that just left (cluster/metadata.py:
    # clients move its partitions before they drop it); DescribeCluster only the live ones.
    nodes = (broker.cluster.metadata_nodes if entry_type == "MetadataResponseBroker"
             else broker.cluster.live_nodes)(listener_name(ctx))
    return tuple(make(cls, **{id_field: n.node_id}, host=n.host, port=n.port, rack=n.rack,
                      **extra)
                 for n in nodes)


def leader_problem(ctx: RequestContext, topic: str, partition: int) -> ErrorCode | None:
    """None when this broker leads ``topic``-``partition`` (or it does not exist: the handler
    answers that itself); else NOT_LEADER_OR_FOLLOWER, whether another broker leads it or
    none does (module doc)."""
    cluster = ctx.broker.cluster
    if not cluster.clustered:
        return None
    info = cluster.partition(topic, partition)
    if info is None or info.leader == cluster.node_id:
        return None
    return ErrorCode.not_leader_or_follower


def current_leader(ctx: RequestContext, topic: str, partition: int) -> tuple[int, int, Node | None]:
    """(leader id, leader epoch, its endpoint on the request's listener) for KIP-951's
    CurrentLeader / NodeEndpoints fields; (-1, -1, None) when unknown."""
    cluster = ctx.broker.cluster
    info = cluster.partition(topic, partition)
    if info is None or info.leader == NO_LEADER:
        return -1, -1, None
    return info.leader, info.leader_epoch, cluster.node(info.leader, listener_name(ctx))


class LeaderNotes:
    """KIP-951's CurrentLeader per partition and NodeEndpoints for a ShareFetch or
    ShareAcknowledge response (``m``: its response module): this broker (epoch 0) on a single
    broker; in a cluster each partition's leader and epoch, and the endpoint of every leader a
    NOT_LEADER_OR_FOLLOWER partition should move to, so the consumer moves without a Metadata
    round trip."""

    def __init__(self, ctx: RequestContext, m: Any) -> None:
        self._ctx, self._m = ctx, m
        self._nodes: dict[int, Node] = {}
        self._local: Any = None  # this broker, epoch 0: one (immutable) value per response

    def leader(self, topic_id: Any, partition: int, error: Any = ErrorCode.none) -> Any:
        broker = self._ctx.broker
        cluster = broker.cluster
        if not cluster.clustered:
            local = self._local
            if local is None:
                local = self._local = self._m.LeaderIdAndEpoch(leader_id=broker.node_id,
                                                               leader_epoch=0)
            return local
        topic = broker.topics.by_id(topic_id)
        if topic is None:
            return self._m.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1)
        if error != ErrorCode.not_leader_or_follower:
            # The endpoint only goes out for a partition that moved: skip its lookup.
            info = cluster.partition(topic.name, partition)
            if info is None or info.leader == NO_LEADER:
                return self._m.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1)
            return self._m.LeaderIdAndEpoch(leader_id=info.leader, leader_epoch=info.leader_epoch)
        leader, epoch, node = current_leader(self._ctx, topic.name, partition)
        if node is not None:
            self._nodes[leader] = node
        return self._m.LeaderIdAndEpoch(leader_id=leader, leader_epoch=epoch)

    def endpoints(self) -> tuple[Any, ...]:
        return tuple(make(self._m.NodeEndpoint, node_id=n.node_id, host=n.host, port=n.port,
                          rack=n.rack) for n in self._nodes.values())


def moved_leader(ctx: RequestContext, m: Any, topic: str, partition: int,
                 endpoints: dict[int, Node]) -> dict[str, Any]:
    """KIP-951 for Produce (v10+) and Fetch (v16+) partitions answered NOT_LEADER_OR_FOLLOWER:
    the ``current_leader`` field (when the response version has it) naming the partition's
    leader and epoch; that leader's endpoint is added to ``endpoints`` for NodeEndpoints."""
    if not hasattr(m, "LeaderIdAndEpoch"):
        return {}
    leader, epoch, node = current_leader(ctx, topic, partition)
    if node is not None:
        endpoints[leader] = node
    return {"current_leader": m.LeaderIdAndEpoch(leader_id=leader, leader_epoch=epoch)}


def endpoint_entries(m: Any, endpoints: dict[int, Node]) -> tuple[Any, ...]:
    """NodeEndpoints of a Produce/Fetch response (empty where the version has none)."""
    if not endpoints or not hasattr(m, "NodeEndpoint"):
        return ()
    return tuple(make(m.NodeEndpoint, node_id=n.node_id, host=n.host, port=n.port, rack=n.rack)
                 for n in endpoints.values())
