"""Server-side consumer-group assignors (KIP-848): ``uniform`` and ``range`` (pure).

Concept: in the consumer protocol the group coordinator, not a client, computes the target
assignment. The group picks an assignor by name (client ``group.remote.assignor``, else the first
of the broker's ``group.consumer.assignors``, Kafka default ``uniform, range``). Each member's
subscription is already resolved to existing topic ids (names plus regex matches); ``current`` is
the member's partitions in the previous target assignment, the only input for stickiness.

Contract of every assignor (property-tested in
tests/unit/coordinator/group/test_consumer_assignor.py):
- every member id appears in the result, possibly with ``{}``; no empty partition sets;
- every partition of every topic in ``topics`` that at least one member subscribes to is assigned
  to exactly one member subscribed to it; partitions of other topics are not assigned; subscribed
  ids missing from ``topics`` are ignored (the shell resolves subscriptions against metadata);
- deterministic: equal input gives equal output (no dict/set iteration order leaks out).

``uniform`` (Kafka's UniformAssignor, our own code): balance first, then stickiness.
- Homogeneous group (every member subscribes to the same topics): with ``P`` partitions and ``M``
  members, every member gets ``P // M`` or that plus one. Each member keeps its ``current``
  partitions up to its quota; the extra (+1) quotas go to the members that already hold the most,
  so a balanced previous assignment is a fixed point and a join moves about ``P / (M+1)``
  partitions. Released and new partitions fill the members below quota, in topic-id/partition
  order. O(P + M).
- Heterogeneous group: (1) members keep every ``current`` partition of a topic they still
  subscribe to; (2) unowned partitions go, topic by topic (most partitions per subscriber first,
  as Kafka), each to the currently least-loaded subscriber; (3) balancing rounds: per topic, move
  partitions from its most-loaded owning subscriber to its least-loaded subscriber while their
  total counts differ by more than one (partitions that were new in this run move first). Every
  move lowers the sum of squared member loads, so the rounds converge; like Kafka we cap them
  (``_MAX_BALANCE_ROUNDS``). That reaches Kafka's notion of balanced for overlapping
  subscriptions: no single move of one partition to another subscriber of its topic helps;
  (4) unlike Kafka, chains of moves then finish the job (``_balance_chains``): afterwards no
  sequence of moves brings two members closer, i.e. the loads are as even as the subscriptions
  allow (within the search budget ``_CHAIN_SEARCH_BUDGET``, never reached in our benchmarks).
- Racks are not considered (Kafka 4.x's uniform builders do not use them either).

``range`` (Kafka 4.x's RangeAssignor): per topic, its subscribers in one stable order get
consecutive ranges, the first ``n % S`` one partition more. The order is static members first by
``group.instance.id``, then dynamic members by member id, the same for every topic, so members of
a homogeneous group on equally partitioned topics get the same partition numbers of every topic
(co-partitioning, for joins). Like Kafka 4.x it does not read ``current``: its stickiness is that
the order depends only on ids, so static members keep their ranges across restarts while the
group's membership and the topics stay the same.
"""

from __future__ import annotations

import heapq
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from sortedcontainers import SortedList  # type: ignore[import-untyped]

from coordinator.group.topics_image import TopicInfo

__all__ = [
    "ASSIGNORS",
    "DEFAULT_ASSIGNORS",
    "ConsumerAssignor",
    "GroupAssignment",
    "MemberSubscription",
    "RangeAssignor",
    "UniformAssignor",
]

GroupAssignment = dict[str, dict[uuid.UUID, frozenset[int]]]

# Kafka's UniformHeterogeneousAssignmentBuilder caps its balancing loop at 16 rounds; every round
# that moves something strictly lowers the sum of squared loads, and in practice (equal or nested
# subscriptions) one round balances and the next sees nothing to do.
_MAX_BALANCE_ROUNDS = 16
# Member visits allowed for the chain search after the rounds (see _balance_chains): a few hundred
# milliseconds at most; real groups need far less.
_CHAIN_SEARCH_BUDGET = 2_000_000


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """One member as an assignor sees it."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    # Resolved subscription (topic names and regex matches), existing topics only.
    topic_ids: frozenset[uuid.UUID]
    # The member's partitions in the previous target assignment (stickiness).
    current: Mapping[uuid.UUID, frozenset[int]]


class ConsumerAssignor(Protocol):
    """A server-side assignor, selected by ``name`` (``group.remote.assignor``)."""

    name: str

    def assign(
        self, members: Mapping[str, MemberSubscription], topics: Mapping[uuid.UUID, TopicInfo]
    ) -> GroupAssignment:
        """The new target assignment: member id -> topic id -> partitions (see module doc)."""
        ...


def _subscribed(
    members: Mapping[str, MemberSubscription], topics: Mapping[uuid.UUID, TopicInfo]
) -> dict[str, frozenset[uuid.UUID]]:
    """Member id -> its subscribed topic ids that exist in ``topics``.

    Computed once per distinct subscription: set operations between frozensets reuse the
    element hashes they store, while hashing a ``uuid.UUID`` runs Python code.
    """
    known = frozenset(topics)
    resolved: dict[frozenset[uuid.UUID], frozenset[uuid.UUID]] = {}
    out = {}
    for m, s in members.items():
        ts = s.topic_ids
        r = resolved.get(ts)
        if r is None:
            r = resolved[ts] = ts if ts <= known else ts & known
        out[m] = r
    return out


def _build_result(
    member_ids: list[str], topic_ids: list[uuid.UUID], owners: Mapping[uuid.UUID, list[int]]
) -> GroupAssignment:
    """Turn per-topic owner arrays (member index per partition, -1 = none) into the result."""
    result: list[dict[uuid.UUID, frozenset[int]]] = [{} for _ in member_ids]
    for t in topic_ids:
        by_owner: dict[int, list[int]] = {}
        for p, i in enumerate(owners[t]):
            if i in by_owner:
                by_owner[i].append(p)
            else:
                by_owner[i] = [p]
        for i, ps in by_owner.items():
            if i >= 0:
                result[i][t] = frozenset(ps)
    return dict(zip(member_ids, result))


class UniformAssignor:
    """Balanced and sticky (Kafka's ``uniform``, the default server-side assignor)."""

    name: str = "uniform"

    def assign(
        self, members: Mapping[str, MemberSubscription], topics: Mapping[uuid.UUID, TopicInfo]
    ) -> GroupAssignment:
        """The new target assignment (see the module doc for the algorithm)."""
        subs = _subscribed(members, topics)
        member_ids = sorted(subs)
        distinct = set(subs.values())
        all_topics = sorted(frozenset().union(*distinct))
        if not all_topics:
            return {m: {} for m in member_ids}
        owners = {t: [-1] * topics[t].num_partitions for t in all_topics}
        kept = self._keep_current(member_ids, subs, members, owners)
        if len(distinct) == 1:
            self._homogeneous(member_ids, all_topics, owners, kept)
        else:
            self._heterogeneous(member_ids, subs, all_topics, owners, kept)
        return _build_result(member_ids, all_topics, owners)

    @staticmethod
    def _keep_current(
        member_ids: list[str],
        subs: Mapping[str, frozenset[uuid.UUID]],
        members: Mapping[str, MemberSubscription],
        owners: dict[uuid.UUID, list[int]],
    ) -> list[list[tuple[uuid.UUID, int]]]:
        """Give each member its ``current`` partitions of topics it still subscribes to.

        A partition listed by two members (not possible for a previous target assignment, but
        cheap to tolerate) stays with the first by member id; partitions beyond the topic's
        count are dropped. Returns each member's kept (topic, partition), in topic/partition order.
        """
        kept: list[list[tuple[uuid.UUID, int]]] = []
        for i, m in enumerate(member_ids):
            mine: list[tuple[uuid.UUID, int]] = []
            current = members[m].current
            for t in sorted(t for t in current if t in subs[m]):
                arr = owners[t]
                n = len(arr)
                for p in sorted(current[t]):
                    if 0 <= p < n and arr[p] < 0:
                        arr[p] = i
                        mine.append((t, p))
            kept.append(mine)
        return kept

    @staticmethod
    def _homogeneous(
        member_ids: list[str],
        topic_ids: list[uuid.UUID],
        owners: dict[uuid.UUID, list[int]],
        kept: list[list[tuple[uuid.UUID, int]]],
    ) -> None:
        n_members = len(member_ids)
        total = sum(len(owners[t]) for t in topic_ids)
        base, extra = divmod(total, n_members)
        # The +1 quotas go to the members holding the most already (stickiness; makes a balanced
        # previous assignment a fixed point), ties by member id.
        order = sorted(range(n_members), key=lambda i: (-len(kept[i]), i))
        quota = [base] * n_members
        for i in order[:extra]:
            quota[i] += 1
        room = [0] * n_members
        for i in range(n_members):
            held = kept[i]
            if len(held) > quota[i]:
                for t, p in held[quota[i] :]:
                    owners[t][p] = -1
            else:
                room[i] = quota[i] - len(held)
        i = 0
        for t in topic_ids:
            arr = owners[t]
            for p, owner in enumerate(arr):
                if owner >= 0:
                    continue
                while room[i] == 0:
                    i += 1
                arr[p] = i
                room[i] -= 1

    @staticmethod
    def _heterogeneous(
        member_ids: list[str],
        subs: Mapping[str, frozenset[uuid.UUID]],
        topic_ids: list[uuid.UUID],
        owners: dict[uuid.UUID, list[int]],
        kept: list[list[tuple[uuid.UUID, int]]],
    ) -> None:
        # Group members by subscription first: one UUID hash per distinct subscription and topic.
        by_subscription: dict[frozenset[uuid.UUID], list[int]] = {}
        for i, m in enumerate(member_ids):
            by_subscription.setdefault(subs[m], []).append(i)
        subscribers: dict[uuid.UUID, list[int]] = {t: [] for t in topic_ids}
        for ts, indices in by_subscription.items():
            for t in ts:
                subscribers[t].extend(indices)
        for indices in subscribers.values():
            indices.sort()
        load = [len(k) for k in kept]
        # Kafka's topic order: most partitions per subscriber first, then fewer subscribers first,
        # then topic id.
        ordered = sorted(
            topic_ids, key=lambda t: (-len(owners[t]) / len(subscribers[t]), len(subscribers[t]), t)
        )
        # Partitions assigned in this run (not kept from ``current``): balancing moves them first.
        fresh: dict[uuid.UUID, set[int]] = {}
        for t in ordered:
            arr = owners[t]
            free = [p for p, owner in enumerate(arr) if owner < 0]
            if not free:
                continue
            fresh[t] = set(free)
            heap = [(load[i], i) for i in subscribers[t]]
            heapq.heapify(heap)
            for p in free:
                n, i = heap[0]
                arr[p] = i
                load[i] = n + 1
                heapq.heapreplace(heap, (n + 1, i))
        balanceable = [t for t in ordered if len(subscribers[t]) > 1]
        for _ in range(_MAX_BALANCE_ROUNDS):
            moved = 0
            for t in balanceable:
                moved += _balance_topic(owners[t], subscribers[t], load, fresh.setdefault(t, set()))
            if not moved:
                break
        _balance_chains(ordered, owners, subscribers, load, fresh)


def _balance_topic(arr: list[int], subscribers: list[int], load: list[int], fresh: set[int]) -> int:
    """Move partitions of one topic from its most- to its least-loaded subscribers.

    Stops when the most-loaded subscriber owning a partition of the topic has at most one more
    partition (in total, over all topics) than the least-loaded subscriber. Returns the number of
    partitions moved; updates ``arr`` (owner per partition) and ``load`` in place.
    """
    if not arr:
        return 0
    lowest = min(load[i] for i in subscribers)
    owned: dict[int, list[int]] = {}
    for p, i in enumerate(arr):
        owned.setdefault(i, []).append(p)
    if max(load[i] for i in owned) - lowest <= 1:
        return 0
    for ps in owned.values():
        # pop() takes the last: fresh partitions (new in this run) go first, highest first.
        ps.sort(key=lambda p: (p in fresh, p))
    low = SortedList((load[i], i) for i in subscribers)
    high = SortedList((load[i], i) for i in owned)
    moved = 0
    while True:
        top_load, a = high[-1]
        bottom_load, b = low[0]
        if top_load - bottom_load <= 1:
            return moved
        p = owned[a].pop()
        arr[p] = b
        fresh.add(p)
        moved += 1
        load[a] = top_load - 1
        load[b] = bottom_load + 1
        high.remove((top_load, a))
        if owned[a]:
            high.add((top_load - 1, a))
        low.remove((top_load, a))
        low.add((top_load - 1, a))
        low.remove((bottom_load, b))
        low.add((bottom_load + 1, b))
        if b in owned and owned[b]:
            high.remove((bottom_load, b))
            owned[b].append(p)
        else:
            owned[b] = [p]
        high.add((bottom_load + 1, b))


def _balance_chains(
    topic_ids: list[uuid.UUID],
    owners: dict[uuid.UUID, list[int]],
    subscribers: Mapping[uuid.UUID, list[int]],
    load: list[int],
    fresh: dict[uuid.UUID, set[int]],
) -> None:
    """Finish balancing with chains of moves that per-topic balancing cannot see.

    Per-topic balancing stops at "no single move helps", which can leave members two or more
    apart: X (11) holds only partitions of topic a, Z (9) does not read a, Y (10) reads both a
    and b. Moving an a-partition X -> Y and a b-partition Y -> Z balances all three. A chain
    from a member with load ``L`` to one with ``<= L - 2`` (each hop: the giver holds a partition
    of a topic the taker subscribes to) moves one partition per hop and changes only the two ends'
    loads. We search chains breadth first (fewest moves) from the most-loaded members down; when
    none is left no sequence of moves lowers the sum of squared loads, the assignment is as
    balanced as the subscriptions allow. Once a load level has no chain it never gets one later
    (chains found below it avoid everything it reaches), so each level is searched until it
    fails, once. ``_CHAIN_SEARCH_BUDGET`` bounds the total work for huge, tangled groups.
    """
    if max(load) - min(load) <= 1:
        return
    held: list[dict[uuid.UUID, list[int]]] = [{} for _ in load]
    for t in topic_ids:
        new = fresh.get(t)
        arr = owners[t]
        if new:  # pop() must give fresh partitions first: list the kept ones before them
            order = [p for p in range(len(arr)) if p not in new] + sorted(new)
        else:
            order = list(range(len(arr)))
        for p in order:
            per_member = held[arr[p]]
            if t in per_member:
                per_member[t].append(p)
            else:
                per_member[t] = [p]
    budget = _CHAIN_SEARCH_BUDGET
    level = max(load)
    while budget > 0 and level - min(load) >= 2:
        sources = [i for i, n in enumerate(load) if n == level]
        found = None
        if sources:
            found, budget = _find_chain(sources, level, held, subscribers, load, budget)
        if found is None:  # this level is done for good: go to the next lower load present
            level = max(n for n in load if n < level)
            continue
        parent, target = found
        end = target
        while end in parent:  # walk back: each giver hands one partition to the next
            giver, t = parent[end]
            ps = held[giver][t]
            p = ps.pop()
            if not ps:
                del held[giver][t]
            held[end].setdefault(t, []).append(p)
            owners[t][p] = end
            end = giver
        load[end] -= 1  # the source; loads in between are unchanged
        load[target] += 1


def _find_chain(
    sources: list[int],
    level: int,
    held: list[dict[uuid.UUID, list[int]]],
    subscribers: Mapping[uuid.UUID, list[int]],
    load: list[int],
    budget: int,
) -> tuple[tuple[dict[int, tuple[int, uuid.UUID]], int] | None, int]:
    """Breadth-first search for a member with load ``<= level - 2`` reachable from ``sources``.

    Returns ((parent links, end member) or None, remaining budget).
    """
    parent: dict[int, tuple[int, uuid.UUID]] = {}
    seen = set(sources)
    seen_topics: set[uuid.UUID] = set()
    queue = deque(sources)
    while queue:
        a = queue.popleft()
        for t in held[a]:
            if t in seen_topics:
                continue
            seen_topics.add(t)
            subs = subscribers[t]
            budget -= len(subs)
            for b in subs:
                if b in seen:
                    continue
                seen.add(b)
                parent[b] = (a, t)
                if load[b] <= level - 2:
                    return (parent, b), budget
                queue.append(b)
        if budget <= 0:
            break
    return None, budget


class RangeAssignor:
    """Consecutive ranges per topic in a stable member order (Kafka's ``range``)."""

    name: str = "range"

    def assign(
        self, members: Mapping[str, MemberSubscription], topics: Mapping[uuid.UUID, TopicInfo]
    ) -> GroupAssignment:
        """The new target assignment (see the module doc for the member order)."""
        subs = _subscribed(members, topics)
        # Static members first by instance id (so a restarted static member keeps its range),
        # then dynamic members by member id; member id breaks ties between equal instance ids.
        order = sorted(
            subs,
            key=lambda m: (
                (0, members[m].instance_id or "", m)
                if members[m].instance_id is not None
                else (1, "", m)
            ),
        )
        result: GroupAssignment = {m: {} for m in sorted(subs)}
        subscribers: dict[uuid.UUID, list[str]] = {}
        for m in order:
            for t in subs[m]:
                subscribers.setdefault(t, []).append(m)
        for t in sorted(subscribers):
            ms = subscribers[t]
            n = topics[t].num_partitions
            base, extra = divmod(n, len(ms))
            start = 0
            for k, m in enumerate(ms):
                end = start + base + (1 if k < extra else 0)
                if end > start:
                    result[m][t] = frozenset(range(start, end))
                start = end
        return result


ASSIGNORS: dict[str, ConsumerAssignor] = {
    UniformAssignor.name: UniformAssignor(),
    RangeAssignor.name: RangeAssignor(),
}

# Kafka's group.consumer.assignors default, in order: the first is the group's default.
DEFAULT_ASSIGNORS: tuple[str, ...] = ("uniform", "range")


def consumer_assignors(value: str) -> tuple[str, ...]:
    """The short names (uniform, range) of a valid ``group.consumer.assignors`` value."""
    out = []
    for n in str(value).split(","):
        if n.strip():
            short = n.strip().rsplit(".", 1)[-1].removesuffix("Assignor").lower()
            if short not in out:
                out.append(short)
    return tuple(out)
