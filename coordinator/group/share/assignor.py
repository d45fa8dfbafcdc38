"""The simple share-group assignor (pure); it reads topics from a ``TopicsImage``
(``coordinator/group/topics_image.py``).

Concept (KIP-932; reference section 5 "SimpleAssignor"): the group coordinator decides which
member fetches from which partitions. Share groups have no exclusive ownership, so a partition may
go to several members when members outnumber partitions. Kafka's rule, which we follow: for a
topic with ``P`` assignable partitions and ``S`` subscribed members, every partition is given to
``k = ceil(S / P)`` members (``k = 1`` when ``P >= S``, i.e. like a consumer group), and each
member's share of the topic's ``P * k`` slots differs from any other subscriber's by at most one.
Balance first, then stickiness; not rack-aware.

Algorithm (our own), topic by topic in name order:
1. Quotas: every subscriber gets ``P*k // S`` slots; the ``P*k % S`` extra slots go to the members
   with the fewest partitions so far across topics (this keeps homogeneous groups balanced to
   within one partition overall), then to members that held more of this topic before
   (stickiness), then by member id.
2. Sticky phase: each member keeps the partitions it held in ``previous`` (lowest first), while
   under its quota and while the partition has fewer than ``k`` holders.
3. Fill phase: each member, in id order, takes the partitions it lacks with the fewest holders.
   If every partition it lacks is full, a swap frees one: some holder Y of a full partition q that
   does not hold a partition r with spare capacity moves from q to r, and the member takes q. A
   holder like Y always exists (r has fewer than k holders, q has k), so every slot is filled.

Invariants (property-tested in tests/unit/coordinator/group/test_assignor.py):
- Members get partitions only of topics they subscribe to; every assignable partition of a topic
  with at least one subscriber is assigned, to exactly ``ceil(S/P)`` members.
- Per topic, subscribers' counts differ by at most one; if all members subscribe to the same
  topics, members' total counts differ by at most one.
- Deterministic, and a fixed point: ``assign(m, t, previous=assign(m, t, p)) == assign(m, t, p)``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet

from coordinator.group.topics_image import TopicsImage

MemberAssignment = dict[uuid.UUID, frozenset[int]]


def assign(
    members: Mapping[str, Iterable[str]],
    topics: TopicsImage,
    previous: Mapping[str, Mapping[uuid.UUID, AbstractSet[int]]] | None = None,
    assignable: Mapping[uuid.UUID, AbstractSet[int]] | None = None,
) -> dict[str, MemberAssignment]:
    """Compute the target assignment.

    Args:
        members: member id -> subscribed topic names.
        topics: topic metadata; subscribed names missing from it are ignored.
        previous: the previous target assignment (member id -> topic id -> partitions), for
            stickiness. Entries for unknown members, topics or partitions are ignored.
        assignable: when given, only these partitions (topic id -> partitions) may be assigned,
            which is how share-state initialisation gates assignment (reference section 5:
            "only partitions whose share state is initialized are assignable").

    Returns every member id (possibly with an empty assignment); empty topic entries are omitted.
    """
    previous = previous or {}
    subs = {m: frozenset(names) for m, names in members.items()}
    result: dict[str, dict[uuid.UUID, frozenset[int]]] = {m: {} for m in sorted(subs)}
    load = {m: 0 for m in subs}

    for name in sorted({n for names in subs.values() for n in names}):
        info = topics.get(name)
        if info is None:
            continue
        parts = set(range(info.num_partitions))
        if assignable is not None:
            parts &= set(assignable.get(info.topic_id, ()))
        subscribers = sorted(m for m in subs if name in subs[m])
        if not parts or not subscribers:
            continue
        prev = {
            m: sorted(set(previous.get(m, {}).get(info.topic_id, ())) & parts) for m in subscribers
        }
        holders = _assign_topic(sorted(parts), subscribers, prev, load)
        for m, held in holders.items():
            if held:
                result[m][info.topic_id] = frozenset(held)
                load[m] += len(held)
    return result


def _assign_topic(
    partitions: list[int],
    subscribers: list[str],
    prev: Mapping[str, list[int]],
    load: Mapping[str, int],
) -> dict[str, set[int]]:
    n_parts, n_subs = len(partitions), len(subscribers)
    k = -(-n_subs // n_parts)  # ceil(S / P); 1 when P >= S
    slots = n_parts * k
    base, extra = divmod(slots, n_subs)

    # 1. Quotas: extras to the least-loaded members first (balance), then to the ones that
    # held more of this topic (stickiness), then by id (determinism).
    order = sorted(subscribers, key=lambda m: (load[m], -len(prev[m]), m))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(order)}

    held: dict[str, set[int]] = {m: set() for m in subscribers}
    count = {p: 0 for p in partitions}

    # 2. Sticky phase.
    for m in subscribers:
        for p in prev[m]:
            if len(held[m]) >= quota[m]:
                break
            if count[p] < k:
                held[m].add(p)
                count[p] += 1

    # 3. Fill phase (with the swap repair described in the module docstring).
    for m in subscribers:
        while len(held[m]) < quota[m]:
            candidates = [p for p in partitions if p not in held[m] and count[p] < k]
            if candidates:
                p = min(candidates, key=lambda q: (count[q], q))
                held[m].add(p)
                count[p] += 1
                continue
            r = min(p for p in partitions if count[p] < k)  # spare capacity; m holds r
            q = min(p for p in partitions if p not in held[m])  # full (count == k)
            y = min(o for o in subscribers if q in held[o] and r not in held[o])
            held[y].remove(q)
            held[y].add(r)
            count[r] += 1
            held[m].add(q)
    return held
