"""The cluster metadata model and the local view a broker serves from.

Every piece of cluster metadata is one key in the store, holding a small JSON document:

- ``<prefix>/cluster_id``: the cluster id, written once by the first broker;
- ``<prefix>/brokers/<node.id>``: a ``BrokerRegistration``, attached to that broker's lease, so
  it disappears when the broker stops renewing it; marked ``shutting_down`` during a controlled
  shutdown;
- ``<prefix>/controller``: the elected controller (``ControllerRecord``), attached to the
  controller's lease;
- ``<prefix>/topics/<name>``: a ``TopicRecord``: id, configs and one ``PartitionAssignment`` per
  partition (replicas, leader, leader epoch, ISR, and the adding/removing replicas of a running
  reassignment), written with compare-and-swap by the controller, the admin verbs and (ISR
  changes) the partition's leader;
- ``<prefix>/group_configs/<group id>``: a group's config overrides (name -> text), the same
  everywhere so that any broker's answer and any group coordinator's behaviour agree;
- ``<prefix>/acls/<id>``: one ACL binding (``protocol.acl_types.binding_doc``); the id is a
  digest of the binding (``acl_id``), so one binding has one key and creating it twice is
  idempotent;
- ``<prefix>/scram/<mechanism>/<user>``: one SCRAM credential (``ScramRecord``: salt, iteration
  count, StoredKey, ServerKey; never the password);
- ``<prefix>/features``: the finalized feature levels (name -> level), written once when the
  cluster is created; its mod revision is the features epoch ApiVersions reports.

``ClusterView`` applies put/delete events (the initial read and the watch give the same events)
and answers the questions routing needs: live brokers, the controller, a partition's leader. It
is pure: no I/O, no clock. A value that does not decode raises ``MetadataFormatError`` naming
the key, and leaves the view as it was.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from protocol.acl_types import AclBinding, binding_doc, binding_from_doc, binding_problem

NO_LEADER = -1
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


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
    # Controlled shutdown began (SIGTERM): the controller moves its leaderships away and takes
    # it out of ISRs; it is live (reachable) until its registration goes.
    shutting_down: bool = False

    def endpoint(self, listener: str) -> Endpoint | None:
        for e in self.endpoints:
            if e.listener == listener:
                return e
        return None

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {
            "node_id": self.node_id,
            "rack": self.rack,
            "incarnation": self.incarnation,
            "endpoints": [[e.listener, e.host, e.port, e.security_protocol]
                          for e in self.endpoints],
        }
        if self.shutting_down:  # absent otherwise: older brokers read the same document
            doc["shutting_down"] = True
        return _dump(doc)

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
                shutting_down=bool(doc.get("shutting_down", False)),
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
    """Where one partition lives. ``leader`` is ``NO_LEADER`` when no replica can lead.

    During a reassignment (AlterPartitionReassignments) ``replicas`` is the target followed by
    the replicas being moved away, ``adding`` the target replicas that are new and ``removing``
    the old ones not in the target; both are empty otherwise. The document is
    ``[replicas, leader, epoch, isr]``, with ``adding`` and ``removing`` appended only while a
    reassignment runs, so the four-element documents of earlier brokers still load.
    """

    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    isr: tuple[int, ...] = ()
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def target(self) -> tuple[int, ...]:
        """The replicas once a running reassignment completes (``replicas`` when none)."""
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def original(self) -> tuple[int, ...]:
        """The replicas before a running reassignment (what cancelling it returns to)."""
        return tuple(r for r in self.replicas if r not in self.adding)

    def to_doc(self) -> list[Any]:
        doc: list[Any] = [list(self.replicas), self.leader, self.leader_epoch, list(self.isr)]
        if self.reassigning:
            doc += [list(self.adding), list(self.removing)]
        return doc

    @classmethod
    def from_doc(cls, doc: Any) -> PartitionAssignment:
        if len(doc) == 4:
            replicas, leader, epoch, isr = doc
            adding: Any = ()
            removing: Any = ()
        else:
            replicas, leader, epoch, isr, adding, removing = doc
        return cls(tuple(int(r) for r in replicas), int(leader), int(epoch),
                   tuple(int(r) for r in isr), tuple(int(r) for r in adding),
                   tuple(int(r) for r in removing))


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


@dataclass(frozen=True, slots=True)
class ScramRecord:
    """A stored SCRAM credential (RFC 5802 section 3: what a server may keep)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:  # keys stay out of logs
        return f"ScramRecord(iterations={self.iterations}, salt={len(self.salt)} bytes)"

    def to_json(self) -> bytes:
        return _dump({"salt": _b64(self.salt), "stored_key": _b64(self.stored_key),
                      "server_key": _b64(self.server_key), "iterations": self.iterations})

    @classmethod
    def from_json(cls, data: bytes) -> ScramRecord:
        doc = _load(data)
        try:
            return cls(_unb64(doc["salt"]), _unb64(doc["stored_key"]),
                       _unb64(doc["server_key"]), int(doc["iterations"]))
        except (KeyError, TypeError, ValueError, binascii.Error) as e:
            raise MetadataFormatError(f"SCRAM credential: {e!r}") from None


def acl_id(binding: AclBinding) -> str:
    """The key name of an ACL binding: a digest of its canonical JSON."""
    return hashlib.sha256(_dump(binding_doc(binding))).hexdigest()[:32]


def acl_to_json(binding: AclBinding) -> bytes:
    return _dump(binding_doc(binding))


def acl_from_json(data: bytes) -> AclBinding:
    """Raises:
        MetadataFormatError: not a binding, or one CreateAcls would refuse.
    """
    try:
        binding = binding_from_doc(_load(data))
    except (KeyError, TypeError, ValueError) as e:
        raise MetadataFormatError(f"ACL: {e!r}") from None
    problem = binding_problem(binding)
    if problem:
        raise MetadataFormatError(f"ACL {binding}: {problem[1]}")
    return binding


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
        self.acls = f"{self.prefix}/acls/".encode()
        self.scram = f"{self.prefix}/scram/".encode()
        self.features = f"{self.prefix}/features".encode()

    def acl(self, binding_id: str) -> bytes:
        return self.acls + binding_id.encode()

    def scram_credential(self, user: str, mechanism: str) -> bytes:
        return self.scram + f"{mechanism}/{user}".encode()

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
    ``"cluster_id"``, ``"group_config"``, ``"acl"``, ``"scram"``, ``"features"``) or ``None``
    for a key this broker does not use. After an ``"acl"`` event ``changed_acl`` holds the
    binding the key held before and the one it holds now (None: none), so a listener can apply
    the difference without comparing whole sets.
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
        # ACL id -> binding, and (before, after) of the last "acl" event.
        self.acls: dict[str, AclBinding] = {}
        self.changed_acl: tuple[AclBinding | None, AclBinding | None] = (None, None)
        # User -> mechanism -> credential.
        self.scram: dict[str, dict[str, ScramRecord]] = {}
        # Finalized feature levels and their epoch (the key's mod revision; 0: none yet).
        self.features: dict[str, int] = {}
        self.features_epoch = 0

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
            elif key.startswith(k.acls):
                binding_id = key[len(k.acls):].decode()
                binding = acl_from_json(value)
                self.changed_acl = (self.acls.get(binding_id), binding)
                self.acls[binding_id] = binding
                kind = "acl"
            elif key.startswith(k.scram):
                mechanism, user = _scram_key(key[len(k.scram):])
                self.scram.setdefault(user, {})[mechanism] = ScramRecord.from_json(value)
                kind = "scram"
            elif key == k.features:
                levels = {str(n): int(v) for n, v in _load(value).items()}
                self.features, self.features_epoch = levels, mod_revision
                kind = "features"
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
        elif key.startswith(k.acls):
            old = self.acls.pop(key[len(k.acls):].decode(errors="replace"), None)
            self.changed_acl = (old, None)
            kind = "acl"
        elif key.startswith(k.scram):
            try:
                mechanism, user = _scram_key(key[len(k.scram):])
            except (ValueError, UnicodeDecodeError):
                return None
            mechanisms = self.scram.get(user, {})
            mechanisms.pop(mechanism, None)
            if not mechanisms:
                self.scram.pop(user, None)
            kind = "scram"
        elif key == k.features:
            self.features, self.features_epoch = {}, 0
            kind = "features"
        self.revision = max(self.revision, mod_revision)
        return kind

    def present_keys(self) -> list[bytes]:
        """The keys of everything this view holds (a reload deletes those etcd lost)."""
        k = self.keys
        out = [k.broker(n) for n in self.brokers]
        out += [k.topic(t) for t in self.topics]
        out += [k.group_config(g) for g in self.group_configs]
        out += [k.acl(i) for i in self.acls]
        out += [k.scram_credential(u, m) for u, ms in self.scram.items() for m in ms]
        if self.controller is not None:
            out.append(k.controller)
        if self.features_epoch:
            out.append(k.features)
        return out

    # -- questions ---------------------------------------------------------------------------

    def live_brokers(self) -> list[BrokerRegistration]:
        return [self.brokers[n] for n in sorted(self.brokers)]

    def shutting_down(self) -> set[int]:
        """Live brokers in controlled shutdown (no new leaderships or replicas go there)."""
        return {n for n, b in self.brokers.items() if b.shutting_down}

    def active_brokers(self) -> list[BrokerRegistration]:
        """Live brokers not shutting down: where new replicas are placed."""
        return [b for b in self.live_brokers() if not b.shutting_down]

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


def _scram_key(rest: bytes) -> tuple[str, str]:
    """``<mechanism>/<user>`` (the user may contain ``/``).

    Raises:
        ValueError: no mechanism this broker knows.
    """
    mechanism, _, user = rest.decode().partition("/")
    if mechanism not in SCRAM_MECHANISMS or not user:
        raise ValueError(f"not <mechanism>/<user>: {rest!r}")
    return mechanism, user


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


def _unb64(text: Any) -> bytes:
    return base64.b64decode(str(text), validate=True)


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
