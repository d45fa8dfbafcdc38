"""Issue 14: how long the server-side consumer assignors take on a large group (standalone).

Times ``uniform`` and ``range`` (coordinator/group/consumer/assignor.py) on 1,000 members and
10,000 partitions, the brief's budget being well under a second per assignment:

* ``homogeneous``: every member subscribes to 10 topics x 1,000 partitions; ``fresh`` (no previous
  assignment), ``steady`` (the previous result as ``current``: the common heartbeat-driven
  recomputation), ``join`` (one member added to the steady group);
* ``heterogeneous``: 100 topics x 100 partitions, every member subscribes to 10 random topics
  (seeded); ``fresh``, ``steady`` and ``join``.

Each time is the median of ``--rounds`` runs (wall clock, ``time.perf_counter``); also reported:
the partitions a join moved (the newcomer's fair share is about 10) and the spread of partition
counts (max - min) of the fresh assignment. No broker.

    .venv/bin/python -m bench.consumer_assignor [--members 1000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import uuid
from collections.abc import Callable, Mapping

from coordinator.group.consumer.assignor import (
    ASSIGNORS,
    GroupAssignment,
    MemberSubscription,
)
from coordinator.group.topics_image import TopicInfo


def _topics(n_topics: int, partitions: int) -> dict[uuid.UUID, TopicInfo]:
    ids = [uuid.UUID(int=random.Random(i).getrandbits(128)) for i in range(n_topics)]
    return {t: TopicInfo(t, f"topic-{i}", partitions) for i, t in enumerate(ids)}


def _members(
    n: int, subs: Callable[[int], frozenset[uuid.UUID]], result: GroupAssignment | None = None
) -> dict[str, MemberSubscription]:
    out = {}
    for i in range(n):
        mid = str(uuid.UUID(int=random.Random(10_000 + i).getrandbits(128)))
        out[mid] = MemberSubscription(mid, None, None, subs(i), (result or {}).get(mid, {}))
    return out


def _median_ms(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(times), 1)


def _scenario(
    name: str,
    members: int,
    topics: Mapping[uuid.UUID, TopicInfo],
    subs: Callable[[int], frozenset[uuid.UUID]],
    rounds: int,
) -> dict[str, float]:
    assignor = ASSIGNORS[name]
    fresh = _members(members, subs)
    first = assignor.assign(fresh, topics)
    steady = _members(members, subs, first)
    joined = _members(members + 1, subs, first)
    after_join = assignor.assign(joined, topics)
    return {
        "fresh_ms": _median_ms(lambda: assignor.assign(fresh, topics), rounds),
        "steady_ms": _median_ms(lambda: assignor.assign(steady, topics), rounds),
        "join_ms": _median_ms(lambda: assignor.assign(joined, topics), rounds),
        "moved_on_join": _moved(first, after_join),
        "max_minus_min": _spread(first),
    }


def _owners(result: GroupAssignment) -> dict[tuple[uuid.UUID, int], str]:
    return {(t, p): m for m, a in result.items() for t, ps in a.items() for p in ps}


def _moved(before: GroupAssignment, after: GroupAssignment) -> int:
    """Partitions whose owner changed (the newcomer's share is the least a join can move)."""
    old = _owners(before)
    return sum(1 for tp, m in _owners(after).items() if old.get(tp) != m)


def _spread(result: GroupAssignment) -> int:
    sizes = [sum(len(ps) for ps in a.values()) for a in result.values()]
    return max(sizes) - min(sizes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    homo_topics = _topics(10, 1000)
    homo_ids = frozenset(homo_topics)
    het_topics = _topics(100, 100)
    het_ids = sorted(het_topics)

    def het_subs(i: int) -> frozenset[uuid.UUID]:
        return frozenset(random.Random(i).sample(het_ids, 10))

    report = {}
    for name in ASSIGNORS:
        report[f"{name}/homogeneous"] = _scenario(
            name, args.members, homo_topics, lambda i: homo_ids, args.rounds
        )
        report[f"{name}/heterogeneous"] = _scenario(
            name, args.members, het_topics, het_subs, args.rounds
        )
    print(json.dumps({"members": args.members, "partitions": 10_000, "results": report}, indent=2))


if __name__ == "__main__":
    main()
