"""Share subscriptions to topics that do not exist, reported once (Kafka says nothing).

A share group whose members subscribe to a topic that does not exist gets nothing from it, as
in Kafka. So that such a typo is not silent, the first heartbeat carrying the subscription logs
a warning (event ``subscribed_topic_missing``) naming the group and the topic; it is not
repeated for that group and topic until the topic has existed in between (created, then
deleted again). ``MissingTopics`` is the sans-IO memory of what was reported;
``warn_missing_topics`` keeps one per broker and logs.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger("shoal.groups")


class MissingTopics:
    """Which subscribed topics of which groups were reported missing: ``newly_missing``
    answers each (group, topic) once, and forgets a topic found to exist again, so a topic
    deleted later is reported again."""

    def __init__(self) -> None:
        self._reported: set[tuple[str, str]] = set()

    def newly_missing(self, group_id: str, names: Iterable[str],
                      exists: Callable[[str], bool]) -> list[str]:
        out = []
        for name in sorted(set(names)):
            key = (group_id, name)
            if exists(name):
                self._reported.discard(key)
            elif key not in self._reported:
                self._reported.add(key)
                out.append(name)
        return out


_per_broker: weakref.WeakKeyDictionary[Any, MissingTopics] = weakref.WeakKeyDictionary()


def warn_missing_topics(broker: Any, group_id: str, names: Iterable[str],
                        client_id: str | None) -> None:
    """Log a warning for each topic of ``names`` that ``broker.topics`` does not have and
    that was not reported for ``group_id`` yet."""
    seen = _per_broker.setdefault(broker, MissingTopics())
    for topic in seen.newly_missing(group_id, names,
                                    lambda n: broker.topics.get(n) is not None):
        log.warning("share group %s: a member (client %s) subscribes to topic %s, which does "
                    "not exist; the group gets no records from it until it is created "
                    "(shoal topics --create --topic %s)", group_id, client_id or "-", topic,
                    topic, extra={"event": "subscribed_topic_missing", "group": group_id,
                                  "topic": topic})
