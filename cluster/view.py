"""The cluster metadata model and the local view a broker serves from.

Every piece of cluster metadata is one key in the store, holding a small JSON document:

- ``<prefix>/cluster_id``: the cluster id, written once by the first broker;
- ``<prefix>/brokers/<node.id>``: a ``BrokerRegistration``, attached to that broker's lease, so
  it disappears when the broker stops renewing it;
- ``<prefix>/controller``: the elected controller (``ControllerRecord``), attached to the
  controller's lease;
- ``<prefix>/topics/<name>``: a ``TopicRecord``: id, configs and one ``PartitionAssignment`` per
  partition (replicas, leader, leader epoch, ISR). With one replica per partition the leader is
  that replica; the ISR and the leader epoch are there so that replication fits without a new
  format;
- ``<prefix>/group_configs/<group id>``: a group's config overrides (name -> text), the same
  everywhere so that any broker's answer and any group coordinator's behaviour agree.

``ClusterView`` applies put/delete events (the initial read and the watch give the same events)
and answers the questions routing needs: live brokers, the controller, a partition's leader. It
is pure: no I/O, no clock. A value that does not decode raises ``MetadataFormatError`` naming
the key, and leaves the view as it was.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

NO_LEADER = -1


class MetadataFormatError(ValueError):
    """A value in the metadata store is not a document this broker understands."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One advertised listener of a broker."""

    listener: str
    host: str
    port: int
    security_protocol: str


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A live broker: its id, advertised endpoints and rack.

    ``incarnation`` is unique per process start, so a broker restarted after ``kill -9`` can tell
    its own stale registration (still held by the old lease) from a second live broker that uses
    the same node id.
    """

    node_id: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None
    incarnation: str

    def endpoint(self, listener: str) -> Endpoint | None:
        for e in self.endpoints:
            if e.listener == listener:
                return e
        return None

    def to_json(self) -> bytes:
        return _dump({
            "node_id": self.node_id,
            "rack": self.rack,
            "incarnation": self.incarnation,
            "endpoints": [[e.listener, e.host, e.port, e.security_protocol]
                          for e in self.endpoints],
        })

    @classmethod
    def from_json(cls, data: bytes) -> BrokerRegistration:
        doc = _load(data)
        try:
            return cls(
                node_id=int(doc["node_id"]),
                rack=doc.get("rack"),
                incarnation=str(doc["incarnation"]),
                endpoints=tuple(Endpoint(str(l), str(h), int(p), str(s))
                                for l, h, p, s in doc["endpoints"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise MetadataFormatError(f"broker registration: {e!r}") from None


@dataclass(frozen=True, slots=True)
class ControllerRecord:
    """The elected controller. ``epoch`` is the store revision that created the record, so a
    later controller always has a larger epoch."""

    node_id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class PartitionAssignment:
    """Where one partition lives. ``leader`` is ``NO_LEADER`` when no replica can lead."""

    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    isr: tuple[int, ...] = ()

    def to_doc(self) -> list[Any]:
        return [list(self.replicas), self.leader, self.leader_epoch, list(self.isr)]

    @classmethod
    def from_doc(cls, doc: Any) -> PartitionAssignment:
        replicas, leader, epoch, isr = doc
        return cls(tuple(int(r) for r in replicas), int(leader), int(epoch),
                   tuple(int(r) for r in isr))


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """A topic: id, configs (name -> string value) and its partitions, in partition order."""

    name: str
    topic_id: str
    partitions: tuple[PartitionAssignment, ...]
    configs: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return _dump({
            "name": self.name,
            "topic_id": self.topic_id,
            "configs": dict(self.configs),
            "partitions": [p.to_doc() for p in self.partitions],
        })

    @classmethod
    def from_json(cls, data: bytes) -> TopicRecord:
        doc = _load(data)
        try:
            return cls(
                name=str(doc["name"]),
                topic_id=str(doc["topic_id"]),
                configs={str(k): str(v) for k, v in doc.get("configs", {}).items()},
                partitions=tuple(PartitionAssignment.from_doc(p) for p in doc["partitions"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise MetadataFormatError(f"topic record: {e!r}") from None


class Keys:
    """The store's key names under one prefix (one cluster per prefix)."""

    def __init__(self, prefix: str = "/shoal") -> None:
        self.prefix = prefix.rstrip("/")
        self.root = (self.prefix + "/").encode()
        self.cluster_id = f"{self.prefix}/cluster_id".encode()
        self.controller = f"{self.prefix}/controller".encode()
        self.brokers = f"{self.prefix}/brokers/".encode()
        self.topics = f"{self.prefix}/topics/".encode()
        self.group_configs = f"{self.prefix}/group_configs/".encode()

    def group_config(self, group_id: str) -> bytes:
        return self.group_configs + group_id.encode()

    def broker(self, node_id: int) -> bytes:
        return self.brokers + str(node_id).encode()

    def topic(self, name: str) -> bytes:
        return self.topics + name.encode()


class ClusterView:
    """The broker's local copy of the cluster metadata, kept current by store events.

    ``apply_put`` / ``apply_delete`` take the raw key and value and the store revision of the
    change, and return what kind of thing changed (``"broker"``, ``"controller"``, ``"topic"``,
    ``"cluster_id"``) or ``None`` for a key this broker does not use.
    """

    def __init__(self, keys: Keys) -> None:
        self.keys = keys
        self.revision = 0
        self.cluster_id: str | None = None
        self.brokers: dict[int, BrokerRegistration] = {}
        self.controller: ControllerRecord | None = None
        self.topics: dict[str, TopicRecord] = {}
        # The store revision of each topic's last change: the compare-and-swap token.
        self.topic_revisions: dict[str, int] = {}
        # Group id -> its config overrides as text (broker/group_configs.py parses them).
        self.group_configs: dict[str, dict[str, str]] = {}
        # The group ids whose configs the last applied event changed.
        self.changed_groups: list[str] = []

    def apply_put(self, key: bytes, value: bytes, mod_revision: int,
                  create_revision: int) -> str | None:
        """Apply one written key.

        Raises:
            MetadataFormatError: the value does not decode; the view is unchanged.
        """
        k = self.keys
        kind: str | None = None
        try:
            if key == k.cluster_id:
                self.cluster_id = value.decode()
                kind = "cluster_id"
            elif key == k.controller:
                doc = _load(value)
                self.controller = ControllerRecord(int(doc["node_id"]), create_revision)
                kind = "controller"
            elif key.startswith(k.brokers):
                reg = BrokerRegistration.from_json(value)
                self.brokers[reg.node_id] = reg
                kind = "broker"
            elif key.startswith(k.topics):
                topic = TopicRecord.from_json(value)
                self.topics[topic.name] = topic
                self.topic_revisions[topic.name] = mod_revision
                kind = "topic"
            elif key.startswith(k.group_configs):
                group_id = key[len(k.group_configs):].decode()
                doc = _load(value)
                self.group_configs[group_id] = {str(n): str(v) for n, v in doc.items()}
                self.changed_groups = [group_id]
                kind = "group_config"
        except (KeyError, TypeError, ValueError, UnicodeDecodeError) as e:
            raise MetadataFormatError(
                f"{key.decode(errors='replace')}: {e}") from None
        self.revision = max(self.revision, mod_revision)
        return kind

    def apply_delete(self, key: bytes, mod_revision: int) -> str | None:
        """Apply one deleted key (a lease that lapsed deletes its keys the same way)."""
        k = self.keys
        kind: str | None = None
        if key == k.controller:
            self.controller = None
            kind = "controller"
        elif key.startswith(k.brokers):
            try:
                self.brokers.pop(int(key[len(k.brokers):]), None)
            except ValueError:
                return None
            kind = "broker"
        elif key.startswith(k.topics):
            name = key[len(k.topics):].decode(errors="replace")
            self.topics.pop(name, None)
            self.topic_revisions.pop(name, None)
            kind = "topic"
        elif key.startswith(k.group_configs):
            group_id = key[len(k.group_configs):].decode(errors="replace")
            self.group_configs.pop(group_id, None)
            self.changed_groups = [group_id]
            kind = "group_config"
        self.revision = max(self.revision, mod_revision)
        return kind

    # -- questions ---------------------------------------------------------------------------

    def live_brokers(self) -> list[BrokerRegistration]:
        return [self.brokers[n] for n in sorted(self.brokers)]

    def controller_id(self) -> int:
        return self.controller.node_id if self.controller is not None else NO_LEADER

    def leader_of(self, topic: str, partition: int) -> int:
        """The partition's leader if that broker is live, else ``NO_LEADER`` (offline)."""
        record = self.topics.get(topic)
        if record is None or not 0 <= partition < len(record.partitions):
            return NO_LEADER
        leader = record.partitions[partition].leader
        return leader if leader in self.brokers else NO_LEADER

    def partition_counts(self) -> dict[int, int]:
        """How many partition replicas each live broker holds (placement balances on this)."""
        counts = {n: 0 for n in self.brokers}
        for record in self.topics.values():
            for p in record.partitions:
                for r in p.replicas:
                    if r in counts:
                        counts[r] += 1
        return counts


def _dump(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def _load(data: bytes) -> Any:
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise MetadataFormatError(f"not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise MetadataFormatError("not a JSON object")
    return doc
