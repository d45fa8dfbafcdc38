"""``CoordinatorHost``: what a coordinator may use of the broker that hosts it.

The coordinators (group, transaction, share state) run inside a broker but do not import it:
they are handed a host with exactly this surface, and ``broker.app.Broker`` implements it
structurally (no inheritance; ``broker/coordinators.py`` passes the broker as the host).

- ``config``: broker config values by name (``get``; dynamic changes apply on the next read);
- ``clock``: wall-clock and monotonic milliseconds (tests inject a fake);
- ``topics``: a read-only image of the topics (by name, by id, all), each with its name, id
  and partition count;
- ``ensure_internal_topic``: a coordinator's internal topic, created if missing;
- ``log_for``: the partition log of a registered topic (internal topics are always open);
- ``leads``: whether this broker leads a partition (a coordinator serves only those);
- ``next_producer_id``: a producer id never handed out before (the transaction coordinator).

Everything else a coordinator needs (a persister, marker writers, per-group configs) is passed
to it explicitly when it is opened.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, Protocol

from storage.log import PartitionLogLike

__all__ = ["Clock", "ConfigValues", "CoordinatorHost", "PartitionLogLike", "TopicImage",
           "TopicView"]


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch."""
        ...

    def monotonic_ms(self) -> int:
        """Milliseconds on a clock that never goes back."""
        ...


class ConfigValues(Protocol):
    def get(self, name: str) -> Any:
        """The current value of broker config ``name`` (parsed).

        Raises:
            KeyError: ``name`` is not a broker config.
        """
        ...


class TopicView(Protocol):
    """One topic as a coordinator sees it."""

    @property
    def name(self) -> str: ...

    @property
    def topic_id(self) -> uuid.UUID: ...

    @property
    def partitions(self) -> int: ...


class TopicImage(Protocol):
    """The broker's topics, read-only."""

    def get(self, name: str) -> TopicView | None: ...

    def by_id(self, topic_id: uuid.UUID) -> TopicView | None: ...

    def all(self) -> Sequence[TopicView]: ...


class CoordinatorHost(Protocol):
    """The broker as its coordinators see it (see the module doc)."""

    @property
    def config(self) -> ConfigValues: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def topics(self) -> TopicImage: ...

    def ensure_internal_topic(self, name: str, partitions_config: str,
                              configs: dict[str, Any]) -> TopicView:
        """Topic ``name``, created with the partition count of config ``partitions_config`` and
        topic configs ``configs`` if missing; an existing one keeps its partition count and gets
        whichever of ``configs`` it lacks."""
        ...

    def log_for(self, topic: str, partition: int) -> PartitionLogLike:
        """The open log of a partition of a registered topic.

        Raises:
            KeyError: no such topic partition.
        """
        ...

    def leads(self, topic: str, partition: int) -> bool:
        """Whether this broker leads ``topic``'s ``partition`` now: a coordinator loads (serves)
        the internal partitions it leads. A single broker leads them all."""
        ...

    def next_producer_id(self) -> int:
        """A producer id never handed out before (durable across restarts)."""
        ...
