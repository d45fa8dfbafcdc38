"""Helpers shared by integration tests."""

from __future__ import annotations

import time

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, name: str, partitions: int = 1,
                 config: dict[str, str] | None = None) -> None:
    """Create a topic with confluent-kafka's AdminClient and wait for the result."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})],
                                  operation_timeout=10)
    futures[name].result(timeout=15)


def wait_assigned(consumers: list[Consumer], partitions: int, timeout: float = 40.0,
                  balanced: bool = False) -> list[set[int]]:
    """Poll the group's consumers until their assignments are non-empty, disjoint and cover
    partitions 0..``partitions``-1 of the one topic they subscribe to; the sets, in order.

    ``balanced``: also wait until the sizes differ by at most one. The consumer protocol moves
    partitions one revocation at a time, so a covering but lopsided assignment (3 + 2 + 1 while
    the first member still revokes) is a normal step on the way there."""
    deadline = time.monotonic() + timeout
    while True:
        for c in consumers:
            c.poll(0.05)
        sets = [{tp.partition for tp in c.assignment()} for c in consumers]
        union = set().union(*sets)
        sizes = [len(x) for x in sets]
        even = not balanced or max(sizes) - min(sizes) <= 1
        if union == set(range(partitions)) and sum(sizes) == partitions and all(sets) and even:
            return sets
        assert time.monotonic() < deadline, f"assignments never settled: {sets}"
