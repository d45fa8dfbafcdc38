"""A share subscription to a topic that does not exist is reported once per group and topic
(broker/missing_topics.py)."""

from __future__ import annotations

from broker.missing_topics import MissingTopics


def test_each_group_and_topic_is_reported_once_until_the_topic_exists() -> None:
    topics = {"orders"}
    seen = MissingTopics()
    assert seen.newly_missing("g", ["orders", "ordrs"], topics.__contains__) == ["ordrs"]
    assert seen.newly_missing("g", ["ordrs"], topics.__contains__) == []   # said already
    assert seen.newly_missing("h", ["ordrs"], topics.__contains__) == ["ordrs"]  # other group
    topics.add("ordrs")
    assert seen.newly_missing("g", ["ordrs"], topics.__contains__) == []
    topics.discard("ordrs")  # created, then deleted again: worth saying again
    assert seen.newly_missing("g", ["ordrs"], topics.__contains__) == ["ordrs"]
