"""What a client sees of a cluster: one Metadata request, summarised.

``metadata(bootstrap, topics)`` asks one broker (Metadata v12, over the wire) and returns the
live brokers it lists, the controller it names and, per partition of ``topics``, the leader
(-1 when offline) and the partition's error code. Any broker can be asked; a broker that
cannot be reached gives None, so a caller can poll until the cluster says what it expects.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol import codec
from tests.integration.rawclient import RawClient


@dataclass(frozen=True)
class Seen:
    brokers: frozenset[int]
    controller: int
    leaders: dict[tuple[str, int], int]  # (topic, partition) -> leader id, -1 when offline
    errors: dict[tuple[str, int], int]   # (topic, partition) -> error code (0: none)


def metadata(bootstrap: str, topics: list[str], timeout: float = 3.0) -> Seen | None:
    """The cluster as the broker at ``bootstrap`` describes it, or None when it cannot say."""
    m = codec.request_module(3, 12)
    try:
        with RawClient(bootstrap, timeout=timeout) as c:
            resp = c.call(3, 12, m.MetadataRequest(
                topics=tuple(m.MetadataRequestTopic(topic_id=None, name=t) for t in topics),
                allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    except (OSError, EOFError, ConnectionError):
        return None
    leaders, errors = {}, {}
    for t in resp.topics:
        for p in t.partitions:
            leaders[(t.name, p.partition_index)] = int(p.leader_id)
            errors[(t.name, p.partition_index)] = int(p.error_code)
    return Seen(frozenset(int(b.node_id) for b in resp.brokers), int(resp.controller_id),
                leaders, errors)
