"""Where new partitions go: spread by partition count, then by rack.

``place`` is pure. For each new partition it picks the replicas one by one among the live brokers
holding the fewest replicas, from a rack that partition does not use yet when there is one (ties
go to the broker after the previous partition's leader, so equal brokers take turns). The leader
is the replica that leads the fewest of the new partitions. The counts include what the new
partitions add, so a topic of many partitions fills brokers evenly: replica counts end within one
of each other when the brokers start equal, leader counts within two.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


class PlacementError(ValueError):
    """The partitions cannot be placed, e.g. fewer live brokers than the replication factor.
    ``str()`` is a message for the client and the operator."""


@dataclass(frozen=True, slots=True)
class Candidate:
    node_id: int
    rack: str | None


def place(count: int, replication: int, brokers: Sequence[Candidate],
          load: Mapping[int, int] | None = None) -> list[tuple[int, ...]]:
    """Replica lists (leader first) for ``count`` new partitions.

    Args:
        count: partitions to place.
        replication: replicas per partition.
        brokers: the live brokers to place on.
        load: replicas each broker already holds (missing brokers count 0).

    Raises:
        PlacementError: ``replication`` is below 1 or above the number of live brokers.
    """
    if replication < 1:
        raise PlacementError(f"replication factor must be at least 1, got {replication}")
    if replication > len(brokers):
        raise PlacementError(
            f"replication factor {replication} is larger than the {len(brokers)} live "
            f"broker(s); start more brokers or lower the replication factor")
    ordered = sorted(brokers, key=lambda b: b.node_id)
    counts = {b.node_id: (load or {}).get(b.node_id, 0) for b in ordered}
    leaders = {b.node_id: 0 for b in ordered}
    position = {b.node_id: i for i, b in enumerate(ordered)}
    result: list[tuple[int, ...]] = []
    last_leader = -1
    for _ in range(count):
        start = position.get(last_leader, -1) + 1

        def turn(b: Candidate, start: int = start) -> int:
            return (position[b.node_id] - start) % len(ordered)

        chosen: list[Candidate] = []
        for _r in range(replication):
            used_racks = {c.rack for c in chosen}
            left = [b for b in ordered if b not in chosen]
            fresh = [b for b in left if b.rack is None or b.rack not in used_racks]
            pool = fresh or left
            pick = min(pool, key=lambda b: (counts[b.node_id], turn(b)))
            chosen.append(pick)
            counts[pick.node_id] += 1
        # The leader: the replica leading the fewest new partitions so far.
        leader = min(chosen, key=lambda b: (leaders[b.node_id], turn(b)))
        leaders[leader.node_id] += 1
        chosen.remove(leader)
        chosen.insert(0, leader)
        last_leader = chosen[0].node_id
        result.append(tuple(c.node_id for c in chosen))
    return result
