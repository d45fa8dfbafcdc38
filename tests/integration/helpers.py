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


def wait_assigned(consumers: list[Consumer], partitions: int, timeout: float = 40.0
                  ) -> list[set[int]]:
    """Poll the group's consumers until their assignments are non-empty, disjoint and cover
    partitions 0..``partitions``-1 of the one topic they subscribe to; the sets, in order."""
    deadline = time.monotonic() + timeout
    while True:
        for c in consumers:
            c.poll(0.05)
        sets = [{tp.partition for tp in c.assignment()} for c in consumers]
        union = set().union(*sets)
        if union == set(range(partitions)) and sum(map(len, sets)) == partitions \
                and all(sets):
            return sets
        assert time.monotonic() < deadline, f"assignments never settled: {sets}"
