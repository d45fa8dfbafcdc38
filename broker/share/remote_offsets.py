"""Log end offsets of partitions led by other cluster members, for share-group lag (KIP-1226).

DescribeShareGroupOffsets is answered by the group's coordinator; its start offsets come from
the share coordinator through the persister, but the lag needs each partition's log end offset,
which only the partition's leader knows. ``log_end_offsets`` asks the leaders with one ListOffsets
(LATEST, read_uncommitted: the high watermark, the log end at one replica) per leading broker,
in parallel, over the inter-broker client (``broker.links.rpc``). A partition whose leader is
offline, unreachable or answers an error is left out of the result (its lag is then unknown, -1,
rather than wrong); the caller logs nothing per partition.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from broker.inter_broker_rpc import InterBrokerRpc
from protocol.codec import request_module
from protocol.messages import make

__all__ = ["log_end_offsets"]

LIST_OFFSETS = 2
LIST_OFFSETS_VERSIONS = (1, 7)
LATEST = -1
CONSUMER_REPLICA = -1


def list_offsets_request(parts: Iterable[tuple[str, int]], version: int) -> Any:
    """ListOffsets for the latest offset of each partition (grouped by topic)."""
    m = request_module(LIST_OFFSETS, version)
    topics: dict[str, list[int]] = {}
    for t, p in parts:
        topics.setdefault(t, []).append(p)
    return make(m.ListOffsetsRequest, replica_id=CONSUMER_REPLICA, isolation_level=0,
                topics=tuple(make(m.ListOffsetsTopic, name=t, partitions=tuple(
                    make(m.ListOffsetsPartition, partition_index=p, current_leader_epoch=-1,
                         timestamp=LATEST, max_num_offsets=1) for p in ps))
                    for t, ps in topics.items()))


def end_offsets_of(response: Any) -> dict[tuple[str, int], int]:
    """The offsets a ListOffsets response answered without error."""
    out: dict[tuple[str, int], int] = {}
    for t in response.topics:
        for p in t.partitions:
            if ErrorCode(p.error_code) == ErrorCode.none:
                offset = getattr(p, "offset", None)
                if offset is None:  # v0's list of offsets
                    offsets = getattr(p, "old_style_offsets", ()) or ()
                    offset = offsets[0] if offsets else None
                if offset is not None and offset >= 0:
                    out[(t.name, int(p.partition_index))] = int(offset)
    return out


async def log_end_offsets(rpc: InterBrokerRpc, parts: Iterable[tuple[str, int]]
                          ) -> dict[tuple[str, int], int]:
    """Log end offsets of ``parts`` from their leaders (module doc)."""
    by_node: dict[int, list[tuple[str, int]]] = {}
    for t, p in parts:
        node = rpc.leader(t, p)
        if node is not None:
            by_node.setdefault(node, []).append((t, p))

    async def ask(node: int, wanted: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        response, _code, _message = await rpc.send(
            node, LIST_OFFSETS, LIST_OFFSETS_VERSIONS, lambda v: list_offsets_request(wanted, v))
        return {} if response is None else end_offsets_of(response)

    out: dict[tuple[str, int], int] = {}
    for found in await asyncio.gather(*(ask(n, ps) for n, ps in by_node.items())):
        out.update(found)
    return out
