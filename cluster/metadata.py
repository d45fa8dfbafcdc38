"""The one narrow question-answering interface a broker routes by: who is live, who leads what.

``ClusterMetadata`` is what handlers, the share-partition leaders and the inter-broker clients
ask; they never look at etcd or at a ``ClusterView`` directly. Two implementations:

- ``LocalMetadata``: the embedded single broker (``make run``). This node is the only live
  broker, the controller, and the leader (epoch 0, sole replica and ISR) of every partition of
  every topic it has.
- ``EtcdMetadata``: a cluster member. Answers come from the ``ClusterView`` that the etcd watch
  keeps current (``cluster/etcd_store.py``), so they cost no I/O.

Endpoints are per listener name (``listeners`` / ``advertised.listeners``): a client is told the
address of the listener it connected through, and brokers call each other on
``inter.broker.listener.name``.

**A broker that just left stays listed in Metadata** (``metadata_nodes``) for
``DEPARTED_GRACE_S``, though it leads nothing and ``live_nodes`` no longer has it. A client
that reads, in one answer, both a partition's new leader and its old leader's departure can
drop the old broker after moving the partition off it and take the partition along
(librdkafka 2.x decommissions a broker missing from Metadata; the partition ends up with no
broker until its next refresh, a second later). Listed a little longer, the old broker is
dropped in a later answer, once nothing is delegated to it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from cluster.view import NO_LEADER, BrokerRegistration, ClusterView

__all__ = ["DEPARTED_GRACE_S", "NO_LEADER", "ClusterMetadata", "EtcdMetadata", "LocalMetadata",
           "Node", "PartitionInfo"]

# How long a broker that left (its etcd session ended) is still listed in Metadata answers (see
# the module doc): longer than a client's metadata refresh interval (librdkafka rescans every
# second) plus the election that follows the departure.
DEPARTED_GRACE_S = 2.0


@dataclass(frozen=True, slots=True)
class Node:
    """A live broker as reached through one listener."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """Where one partition lives. ``leader`` is ``NO_LEADER`` while it is offline;
    ``offline_replicas`` are the replicas whose brokers are not live."""

    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


class ClusterMetadata(Protocol):
    """Routing questions (see the module doc). Every method is cheap and does no I/O."""

    @property
    def node_id(self) -> int:
        """This broker's ``node.id``."""
        ...

    @property
    def clustered(self) -> bool:
        """True for a cluster member, False for the embedded single broker."""
        ...

    def live_nodes(self, listener: str) -> list[Node]:
        """The live brokers that have ``listener``, by node id."""
        ...

    def metadata_nodes(self, listener: str) -> list[Node]:
        """The brokers a Metadata answer lists: the live ones, and those that left less than
        ``DEPARTED_GRACE_S`` ago (module doc), by node id."""
        ...

    def node(self, node_id: int, listener: str) -> Node | None:
        """Live broker ``node_id``'s endpoint on ``listener``, or None (not live, or no such
        listener)."""
        ...

    def controller_id(self) -> int:
        """The controller's node id, or ``NO_LEADER`` while none is elected."""
        ...

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        """Placement of ``topic``'s ``partition``, or None if there is no such partition.
        ``leader`` is ``NO_LEADER`` when the leader is not live."""
        ...

    def is_leader(self, topic: str, partition: int) -> bool:
        """Whether this broker leads ``topic``'s ``partition`` now."""
        ...


class LocalMetadata:
    """The embedded single broker: this node leads everything (see the module doc).

    ``endpoints`` maps listener name to the advertised (host, port); ``partitions`` answers a
    topic's partition count (None if unknown), normally ``TopicRegistry`` backed.
    """

    clustered = False

    def __init__(self, node_id: int, endpoints: Mapping[str, tuple[str, int]],
                 partitions: Callable[[str], int | None], rack: str | None = None) -> None:
        self._node_id = node_id
        self._endpoints = dict(endpoints)
        self._partitions = partitions
        self._rack = rack

    @property
    def node_id(self) -> int:
        return self._node_id

    def set_endpoints(self, endpoints: Mapping[str, tuple[str, int]]) -> None:
        """The advertised address per listener, once the server has bound them."""
        self._endpoints = dict(endpoints)

    def live_nodes(self, listener: str) -> list[Node]:
        node = self.node(self._node_id, listener)
        return [node] if node is not None else []

    def metadata_nodes(self, listener: str) -> list[Node]:
        return self.live_nodes(listener)

    def node(self, node_id: int, listener: str) -> Node | None:
        if node_id != self._node_id or listener not in self._endpoints:
            return None
        host, port = self._endpoints[listener]
        return Node(node_id, host, port, self._rack)

    def controller_id(self) -> int:
        return self._node_id

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        count = self._partitions(topic)
        if count is None or not 0 <= partition < count:
            return None
        me = (self._node_id,)
        return PartitionInfo(self._node_id, 0, me, me)

    def is_leader(self, topic: str, partition: int) -> bool:
        count = self._partitions(topic)
        return count is not None and 0 <= partition < count


class EtcdMetadata:
    """A cluster member's answers, read from the watched ``ClusterView``. Call
    ``brokers_changed`` after every broker change the view applies (it notes departures, on
    ``clock``, for ``metadata_nodes``)."""

    clustered = True

    def __init__(self, node_id: int, view: ClusterView,
                 clock: Callable[[], float] = time.monotonic,
                 departed_grace_s: float = DEPARTED_GRACE_S) -> None:
        self._node_id = node_id
        self._view = view
        self._clock = clock
        self._grace = departed_grace_s
        self._known: dict[int, BrokerRegistration] = dict(view.brokers)
        self._departed: dict[int, tuple[BrokerRegistration, float]] = {}

    def brokers_changed(self) -> None:
        now = self._clock()
        brokers = self._view.brokers
        for n, reg in self._known.items():
            if n not in brokers:
                self._departed[n] = (reg, now)
        for n in brokers:
            self._departed.pop(n, None)
        self._known = dict(brokers)

    @property
    def node_id(self) -> int:
        return self._node_id

    def live_nodes(self, listener: str) -> list[Node]:
        out = []
        for reg in self._view.live_brokers():
            e = reg.endpoint(listener)
            if e is not None:
                out.append(Node(reg.node_id, e.host, e.port, reg.rack))
        return out

    def metadata_nodes(self, listener: str) -> list[Node]:
        now = self._clock()
        regs = self._view.live_brokers()
        if self._departed:
            for n, (reg, left_at) in list(self._departed.items()):
                if now - left_at >= self._grace:
                    del self._departed[n]
                elif n not in self._view.brokers:
                    regs.append(reg)
            regs.sort(key=lambda r: r.node_id)
        out = []
        for reg in regs:
            e = reg.endpoint(listener)
            if e is not None:
                out.append(Node(reg.node_id, e.host, e.port, reg.rack))
        return out

    def node(self, node_id: int, listener: str) -> Node | None:
        reg = self._view.brokers.get(node_id)
        e = reg.endpoint(listener) if reg is not None else None
        return Node(node_id, e.host, e.port, reg.rack) if e is not None and reg else None

    def controller_id(self) -> int:
        return self._view.controller_id()

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        record = self._view.topics.get(topic)
        if record is None or not 0 <= partition < len(record.partitions):
            return None
        p = record.partitions[partition]
        leader = p.leader if p.leader in self._view.brokers else NO_LEADER
        offline = tuple(r for r in p.replicas if r not in self._view.brokers)
        return PartitionInfo(leader, p.leader_epoch, p.replicas, p.isr, offline)

    def is_leader(self, topic: str, partition: int) -> bool:
        return self._view.leader_of(topic, partition) == self._node_id
