"""Routing answers shared by the handlers: which brokers to list, and who leads a partition.

A single broker lists itself and leads everything. A cluster member (``broker.member``) lists
the live members on the listener the request came in on, and answers NOT_LEADER_OR_FOLLOWER
for a partition another broker leads (with that leader's endpoint where the response carries
it, KIP-951), or LEADER_NOT_AVAILABLE while the partition's only broker is down.
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
    """The live brokers for a Metadata/DescribeCluster answer: this one alone, or every live
    cluster member on the request's listener."""
    broker = ctx.broker
    id_field = "node_id" if entry_type == "MetadataResponseBroker" else "broker_id"
    cls = getattr(m, entry_type)
    if not broker.cluster.clustered:
        host, port = ctx.advertised
        return (make(cls, **{id_field: broker.node_id}, host=host, port=port, rack=None,
                     **extra),)
    return tuple(make(cls, **{id_field: n.node_id}, host=n.host, port=n.port, rack=n.rack,
                      **extra)
                 for n in broker.cluster.live_nodes(listener_name(ctx)))


def leader_problem(ctx: RequestContext, topic: str, partition: int) -> ErrorCode | None:
    """None when this broker leads ``topic``-``partition`` (or it does not exist: the handler
    answers that itself); NOT_LEADER_OR_FOLLOWER when another live broker leads it;
    LEADER_NOT_AVAILABLE when no broker does."""
    cluster = ctx.broker.cluster
    if not cluster.clustered:
        return None
    info = cluster.partition(topic, partition)
    if info is None or info.leader == cluster.node_id:
        return None
    return ErrorCode.leader_not_available if info.leader == NO_LEADER \
        else ErrorCode.not_leader_or_follower


def current_leader(ctx: RequestContext, topic: str, partition: int) -> tuple[int, int, Node | None]:
    """(leader id, leader epoch, its endpoint on the request's listener) for KIP-951's
    CurrentLeader / NodeEndpoints fields; (-1, -1, None) when unknown."""
    cluster = ctx.broker.cluster
    info = cluster.partition(topic, partition)
    if info is None or info.leader == NO_LEADER:
        return -1, -1, None
    return info.leader, info.leader_epoch, cluster.node(info.leader, listener_name(ctx))
