"""Broker and topic configuration, using Kafka's config names.

Configs come from (lowest to highest precedence) the built-in defaults below, a Java-style
``.properties`` file (``--config``), and command-line options. Each broker config is declared once
in ``BROKER_CONFIGS`` with its type, default, validator and a line of documentation; the same table
feeds DescribeConfigs and validates IncrementalAlterConfigs. Topic configs
(``TOPIC_CONFIGS``) fall back to the broker config named in ``synonym`` as in Kafka.

Any other name is rejected with a ``ConfigError`` that suggests the closest declared name, so a
typo in a properties file or ``--override`` stops the broker instead of being ignored. The one
exception is ``NO_EFFECT_KAFKA_CONFIGS``: real Kafka broker configs that mean nothing for a single
Shoal process. They are accepted at startup, so a ``server.properties`` copied from a Kafka install
keeps working, and each one logs a warning that it has no effect (as Kafka's
``AbstractConfig.logUnused`` warns about supplied configs it does not use).

Invariant: a ``BrokerConfig`` only ever holds validated values of the declared type.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker.security.listeners import (
    DEFAULT_PROTOCOL_MAP,
    Listener,
    ListenerError,
    parse_listeners,
)

LONG_MAX = 2**63 - 1

log = logging.getLogger("shoal.config")


class ConfigError(ValueError):
    """An unknown name or an invalid value; the message says which and why."""


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    type: str  # "int" | "long" | "bool" | "string" | "list" | "double"
    default: Any
    doc: str
    validator: Callable[[Any], str | None] | None = None
    dynamic: bool = False  # may be changed at runtime with IncrementalAlterConfigs
    synonym: str | None = None  # for topic configs: the broker config that supplies the default
    sensitive: bool = False


def at_least(n: int) -> Callable[[Any], str | None]:
    return lambda v: None if v >= n else f"must be at least {n}"


def between(lo: int, hi: int) -> Callable[[Any], str | None]:
    return lambda v: None if lo <= v <= hi else f"must be between {lo} and {hi}"


def one_of(*allowed: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in allowed else f"must be one of {', '.join(allowed)}"


def cleanup_policy_problem(v: Any) -> str | None:
    """``cleanup.policy``: a comma-separated list of ``compact`` and ``delete`` (Kafka's values)."""
    items = [x.strip() for x in str(v).split(",")]
    if not items or any(x not in ("compact", "delete") for x in items):
        return "must be a list of compact and delete (compact, delete or compact,delete)"
    return None


def cleanup_policies(value: Any) -> frozenset[str]:
    """The set of policies in a valid ``cleanup.policy`` value."""
    return frozenset(x.strip() for x in str(value).split(","))


def _ratio(v: Any) -> str | None:
    return None if 0.0 <= v <= 1.0 else "must be between 0 and 1"


def _minus_one_or_at_least(n: int) -> Callable[[Any], str | None]:
    return lambda v: None if v == -1 or v >= n else f"must be -1 (unlimited) or at least {n}"


_BROKER_DEFS: list[ConfigDef] = [
    ConfigDef("node.id", "int", 1, "Id of this broker in Metadata responses.", at_least(0)),
    ConfigDef("listeners", "string", "PLAINTEXT://127.0.0.1:9092",
              "Listeners, NAME://host:port,... (host:port alone is PLAINTEXT)."),
    ConfigDef("advertised.listeners", "string", "",
              "Address clients are told to connect to, per listener name; defaults to the "
              "listener."),
    ConfigDef("log.dirs", "string", "./data", "Directory holding all partition logs and state."),
    ConfigDef("num.partitions", "int", 1, "Partitions of auto-created topics and of CreateTopics "
              "requests that ask for the default (-1).", at_least(1), dynamic=True),
    ConfigDef("default.replication.factor", "int", 1,
              "Only 1 is possible on a single broker.", between(1, 1)),
    ConfigDef("auto.create.topics.enable", "bool", True,
              "Create unknown topics on Metadata/Produce requests that allow it.", dynamic=True),
    ConfigDef("delete.topic.enable", "bool", True, "Allow DeleteTopics."),
    ConfigDef("log.segment.bytes", "int", 1024 * 1024 * 1024,
              "Maximum size of one segment file.", at_least(1024), dynamic=True),
    ConfigDef("log.roll.ms", "long", 7 * 24 * 3600 * 1000,
              "Roll a new segment after this long even if not full.", at_least(1), dynamic=True),
    ConfigDef("log.retention.ms", "long", 7 * 24 * 3600 * 1000,
              "Delete segments older than this (-1: keep forever).", _minus_one_or_at_least(1),
              dynamic=True),
    ConfigDef("log.retention.bytes", "long", -1,
              "Delete old segments while a partition is larger than this (-1: no limit).",
              _minus_one_or_at_least(0), dynamic=True),
    ConfigDef("log.cleanup.policy", "list", "delete",
              "Default cleanup.policy of topics: delete (retention), compact (keep the latest "
              "record per key) or compact,delete.", cleanup_policy_problem, dynamic=True),
    ConfigDef("log.cleaner.enable", "bool", True,
              "Run the log cleaner, which compacts topics with cleanup.policy compact."),
    ConfigDef("log.cleaner.backoff.ms", "long", 15_000,
              "How long the cleaner sleeps when no partition needs cleaning.", at_least(0),
              dynamic=True),
    ConfigDef("log.cleaner.min.cleanable.ratio", "double", 0.5,
              "Default min.cleanable.dirty.ratio: clean a partition once this share of its "
              "log is dirty (not yet compacted).", _ratio, dynamic=True),
    ConfigDef("log.cleaner.min.compaction.lag.ms", "long", 0,
              "Default min.compaction.lag.ms: a record stays uncompacted at least this long.",
              at_least(0), dynamic=True),
    ConfigDef("log.cleaner.max.compaction.lag.ms", "long", LONG_MAX,
              "Default max.compaction.lag.ms: a record is compacted at most this long after it "
              "was written, whatever the dirty ratio.", at_least(1), dynamic=True),
    ConfigDef("log.cleaner.delete.retention.ms", "long", 86_400_000,
              "Default delete.retention.ms: how long tombstones survive after the segment "
              "holding them was first cleaned.", at_least(0), dynamic=True),
    ConfigDef("log.cleaner.dedupe.buffer.size", "long", 128 * 1024 * 1024,
              "Memory for the cleaner's key map; a larger dirty section is cleaned in several "
              "passes.", at_least(1024 * 1024), dynamic=True),
    ConfigDef("log.retention.check.interval.ms", "long", 300_000,
              "How often retention is enforced.", at_least(1)),
    ConfigDef("log.index.interval.bytes", "int", 4096,
              "Bytes between offset-index entries.", at_least(0), dynamic=True),
    ConfigDef("log.flush.interval.messages", "long", LONG_MAX,
              "fsync a partition after this many messages (default: leave it to the OS, as "
              "Kafka does; acknowledged data then survives a process crash but not power loss).",
              at_least(1), dynamic=True),
    ConfigDef("log.flush.interval.ms", "long", -1,
              "fsync a partition when its oldest unflushed message is this old (-1: never "
              "by time).", _minus_one_or_at_least(0), dynamic=True),
    ConfigDef("log.flush.scheduler.interval.ms", "long", 1000,
              "How often the time-based flush policy is checked.", at_least(1)),
    ConfigDef("socket.request.max.bytes", "int", 100 * 1024 * 1024,
              "Largest request frame accepted; larger frames close the connection.", at_least(1)),
    ConfigDef("message.max.bytes", "int", 1024 * 1024 + 12,
              "Largest record batch accepted (after compression).", at_least(0), dynamic=True),
    ConfigDef("log.message.timestamp.type", "string", "CreateTime",
              "CreateTime: records keep the producer's timestamps; LogAppendTime: the broker "
              "stamps each batch with its clock when appending.",
              one_of("CreateTime", "LogAppendTime"), dynamic=True),
    ConfigDef("log.message.timestamp.before.max.ms", "long", LONG_MAX,
              "CreateTime only: refuse (INVALID_TIMESTAMP) a batch with a record timestamp this "
              "much older than the broker's clock.", at_least(0), dynamic=True),
    ConfigDef("log.message.timestamp.after.max.ms", "long", 3_600_000,
              "CreateTime only: refuse (INVALID_TIMESTAMP) a batch with a record timestamp this "
              "much ahead of the broker's clock (Kafka 4.0+ default: 1 hour).", at_least(0),
              dynamic=True),
    ConfigDef("producer.id.expiration.ms", "int", 86_400_000,
              "An idempotent producer id with no append to a partition for this long is "
              "forgotten by that partition (its next batch must then start a new epoch).",
              at_least(1), dynamic=True),
    ConfigDef("producer.id.expiration.check.interval.ms", "int", 600_000,
              "How often idle producer ids are looked for.", at_least(1)),
    ConfigDef("queued.max.requests", "int", 500,
              "Requests a single connection may have in flight before the broker stops reading "
              "from it (backpressure).", at_least(1)),
    ConfigDef("fetch.max.bytes", "int", 55 * 1024 * 1024,
              "Cap on a Fetch response's MaxBytes.", at_least(1024), dynamic=True),
    # Connection and request bounds (issue 12, sections 1 and 4; broker/connection_limits.py).
    ConfigDef("max.connections", "int", 2**31 - 1,
              "Connections the broker accepts in total; further ones are closed at accept.",
              at_least(0)),
    ConfigDef("max.connections.per.ip", "int", 2**31 - 1,
              "Connections accepted from one IP address; further ones are closed at accept.",
              at_least(0)),
    ConfigDef("max.connections.per.ip.overrides", "string", "",
              "Per-host exceptions to max.connections.per.ip: host:count,host:count.",
              lambda v: _overrides_problem(v)),
    ConfigDef("connections.max.idle.ms", "long", 600_000,
              "Close a connection with no traffic and no request in progress for this long.",
              at_least(1)),
    ConfigDef("socket.request.partial.timeout.ms", "long", 30_000,
              "Shoal extension: close a connection that sent the start of a request frame but "
              "not its end within this long (a slow or stalled sender holds a buffer).",
              at_least(1)),
    ConfigDef("connections.authentication.timeout.ms", "long", 10_000,
              "Shoal extension: close a connection on a TLS or SASL listener that has not "
              "finished its TLS handshake and SASL authentication within this long after it "
              "was accepted (Kafka has no bound; a stalled handshake would hold the socket).",
              at_least(1)),
    ConfigDef("sasl.server.max.receive.size", "int", 524_288,
              "Largest frame a client may send on a SASL listener before it has "
              "authenticated.", at_least(1)),
    ConfigDef("queued.max.request.bytes", "long", 256 * 1024 * 1024,
              "Bytes of partly received request frames all connections together may hold; a "
              "connection whose frame does not fit stops being read until memory frees "
              "(-1: no limit, Kafka's default; Shoal bounds it so half-sent frames cannot fill "
              "memory).", _minus_one_or_at_least(1)),
    ConfigDef("queued.max.response.bytes", "long", 16 * 1024 * 1024,
              "Shoal extension: stop reading requests from a connection while this many bytes "
              "of its responses are not yet sent (a client that does not read its answers "
              "cannot make the broker buffer without limit; Kafka mutes such a channel).",
              at_least(1024)),
    ConfigDef("group.share.max.session.partitions", "int", 10_000,
              "Shoal extension: most partitions one share session may hold; a ShareFetch that "
              "would exceed it gets SHARE_SESSION_LIMIT_REACHED.", at_least(1)),
    ConfigDef("shutdown.timeout.ms", "long", 5000,
              "How long a graceful shutdown waits for in-flight requests.", at_least(0)),
    ConfigDef("compression.type", "string", "producer",
              "Only 'producer' (keep batches as produced) is supported.", one_of("producer")),
    ConfigDef("offsets.topic.num.partitions", "int", 50,
              "Partitions of __consumer_offsets.", between(1, 1000)),
    # Classic consumer groups (Kafka's names and defaults).
    ConfigDef("group.min.session.timeout.ms", "int", 6000,
              "Lowest session.timeout.ms a classic group member may ask for.", at_least(1)),
    ConfigDef("group.max.session.timeout.ms", "int", 1_800_000,
              "Highest session.timeout.ms a classic group member may ask for.", at_least(1)),
    ConfigDef("group.initial.rebalance.delay.ms", "int", 3000,
              "How long the first rebalance of an empty classic group waits for more members.",
              at_least(0)),
    ConfigDef("group.max.size", "int", 0x7FFFFFFF,
              "Maximum number of members of one classic group.", at_least(1)),
    ConfigDef("group.config.max.groups", "int", 10_000,
              "Shoal extension: most groups with group configs (IncrementalAlterConfigs on "
              "GROUP resources, kept in group-configs.json); configs for one more group are "
              "refused with POLICY_VIOLATION.", at_least(1)),
    # Consumer groups, KIP-848 consumer protocol (Kafka's names and defaults). Each
    # group.consumer.X without "min."/"max." is the default of the group config consumer.X and
    # must lie in [group.consumer.min.X, group.consumer.max.X].
    ConfigDef("group.consumer.session.timeout.ms", "int", 45_000,
              "Default consumer.session.timeout.ms: a consumer-protocol member that does not "
              "heartbeat this long is removed from its group.", at_least(1)),
    ConfigDef("group.consumer.min.session.timeout.ms", "int", 45_000,
              "Lowest consumer.session.timeout.ms a group may set.", at_least(1)),
    ConfigDef("group.consumer.max.session.timeout.ms", "int", 60_000,
              "Highest consumer.session.timeout.ms a group may set.", at_least(1)),
    ConfigDef("group.consumer.heartbeat.interval.ms", "int", 5_000,
              "Default consumer.heartbeat.interval.ms, the interval consumer-protocol members are "
              "told to heartbeat at.", at_least(1)),
    ConfigDef("group.consumer.min.heartbeat.interval.ms", "int", 5_000,
              "Lowest consumer.heartbeat.interval.ms a group may set.", at_least(1)),
    ConfigDef("group.consumer.max.heartbeat.interval.ms", "int", 15_000,
              "Highest consumer.heartbeat.interval.ms a group may set.", at_least(1)),
    ConfigDef("group.consumer.settling.heartbeat.interval.ms", "int", 500,
              "Shoal's own: the heartbeat interval consumer-protocol members are told while their "
              "group settles (a member still reconciling, or less than one "
              "consumer.heartbeat.interval.ms since the last new target assignment), so a "
              "rebalance completes in a fraction of a second instead of waiting out the regular "
              "interval; 0 (or a value not below the regular interval) answers the regular "
              "interval always, as Kafka.", at_least(0)),
    ConfigDef("group.consumer.max.size", "int", 0x7FFFFFFF,
              "Maximum number of members of one consumer-protocol group.", at_least(1)),
    ConfigDef("group.consumer.assignors", "list", "uniform,range",
              "Server-side assignors consumer-protocol groups may use (uniform, range); the "
              "first is the default, a member picks another with group.remote.assignor.",
              lambda v: _assignors_problem(v)),
    ConfigDef("offset.metadata.max.bytes", "int", 4096,
              "Largest metadata string of a committed offset.", at_least(0)),
    ConfigDef("offsets.retention.minutes", "int", 10080,
              "How long an empty group's committed offsets are kept.", at_least(1)),
    ConfigDef("share.coordinator.state.topic.num.partitions", "int", 50,
              "Partitions of __share_group_state; never change after deployment.",
              between(1, 1000)),
    ConfigDef("share.coordinator.append.fsync", "bool", True,
              "fsync __share_group_state before answering a share-state write (group commit: "
              "writes appended during an fsync share the next one). false: answer once the "
              "write is in the page cache; survives a process crash, not a power loss."),
    ConfigDef("share.coordinator.snapshot.update.records.per.snapshot", "int", 500,
              "ShareUpdate records per share-partition before a full ShareSnapshot is written.",
              between(0, 500)),
    ConfigDef("share.coordinator.state.topic.segment.bytes", "int", 1024 * 1024,
              "segment.bytes of __share_group_state when it is created (Kafka: 100 MiB). "
              "Pruning deletes whole segments, so this bounds the redundant bytes kept.",
              at_least(1024)),
    ConfigDef("share.coordinator.state.topic.prune.interval.ms", "long", 10_000,
              "Least time between two prunes of a __share_group_state partition (Kafka: 5 min).",
              at_least(0)),
    ConfigDef("share.coordinator.cold.partition.snapshot.interval.ms", "int", 300_000,
              "How often share-partitions not snapshotted since the previous run are "
              "re-snapshotted, so an idle share-partition does not stop pruning.", at_least(1)),
    # Transactions (KIP-98; Kafka's names and defaults; coordinator/txn/service.py).
    ConfigDef("transactional.id.expiration.ms", "int", 604_800_000,
              "A transactional id with no transaction for this long (in Empty, CompleteCommit "
              "or CompleteAbort) is removed from __transaction_state.", at_least(1)),
    ConfigDef("transaction.max.timeout.ms", "int", 900_000,
              "Largest transaction.timeout.ms a producer may ask for; InitProducerId with a "
              "larger one gets INVALID_TRANSACTION_TIMEOUT.", at_least(1)),
    ConfigDef("transaction.state.log.num.partitions", "int", 50,
              "Partitions of __transaction_state; never change after deployment.",
              between(1, 1000)),
    ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10_000,
              "Accepted for Kafka compatibility. Shoal aborts each transaction exactly at its "
              "deadline (start + transaction.timeout.ms, a timer per transaction) instead of "
              "looking for timed-out ones at this interval.", at_least(1)),
    ConfigDef("transaction.end.wait.ms", "int", 1000,
              "Shoal's own: how long EndTxn waits for the transaction's markers to be written "
              "before answering (they are local appends, usually done at once), so the "
              "producer's next transaction does not get CONCURRENT_TRANSACTIONS and back off; "
              "0 answers once PrepareCommit/PrepareAbort is durable, as Kafka.", at_least(0),
              dynamic=True),
    ConfigDef("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3_600_000,
              "How often transactional ids idle past transactional.id.expiration.ms are "
              "looked for.", at_least(1)),
    # Share groups (KIP-932; reference section 2). Each group.share.X without "min."/"max." is
    # the default of the per-group config share.X (broker/group_configs.py), which must lie in
    # [group.share.min.X, group.share.max.X]; share_bounds_problem() checks the broker values.
    ConfigDef("group.share.max.size", "int", 200,
              "Maximum number of members of one share group.", between(1, 1000)),
    ConfigDef("group.share.session.timeout.ms", "int", 45_000,
              "Default share.session.timeout.ms: a member that does not heartbeat this long "
              "is removed.", at_least(1)),
    ConfigDef("group.share.min.session.timeout.ms", "int", 45_000,
              "Lowest share.session.timeout.ms a group may set.", at_least(1)),
    ConfigDef("group.share.max.session.timeout.ms", "int", 60_000,
              "Highest share.session.timeout.ms a group may set.", at_least(1)),
    ConfigDef("group.share.heartbeat.interval.ms", "int", 5_000,
              "Default share.heartbeat.interval.ms, the interval members are told to heartbeat "
              "at.", at_least(1)),
    ConfigDef("group.share.min.heartbeat.interval.ms", "int", 5_000,
              "Lowest share.heartbeat.interval.ms a group may set.", at_least(1)),
    ConfigDef("group.share.max.heartbeat.interval.ms", "int", 15_000,
              "Highest share.heartbeat.interval.ms a group may set.", at_least(1)),
    ConfigDef("group.share.record.lock.duration.ms", "int", 30_000,
              "Default share.record.lock.duration.ms: how long an acquired record stays locked "
              "to its consumer.", between(1000, 3_600_000)),
    ConfigDef("group.share.min.record.lock.duration.ms", "int", 15_000,
              "Lowest share.record.lock.duration.ms a group may set.", between(1000, 30_000)),
    ConfigDef("group.share.max.record.lock.duration.ms", "int", 60_000,
              "Highest share.record.lock.duration.ms a group may set.",
              between(30_000, 3_600_000)),
    ConfigDef("group.share.delivery.count.limit", "int", 5,
              "Default share.delivery.count.limit: deliveries before a record is archived.",
              between(2, 10)),
    ConfigDef("group.share.min.delivery.count.limit", "int", 2,
              "Lowest share.delivery.count.limit a group may set.", between(2, 5)),
    ConfigDef("group.share.max.delivery.count.limit", "int", 10,
              "Highest share.delivery.count.limit a group may set.", between(5, 25)),
    ConfigDef("group.share.partition.max.record.locks", "int", 2000,
              "Default share.partition.max.record.locks: in-flight records per share-partition.",
              between(100, 10_000)),
    ConfigDef("group.share.min.partition.max.record.locks", "int", 100,
              "Lowest share.partition.max.record.locks a group may set.", between(100, 2000)),
    ConfigDef("group.share.max.partition.max.record.locks", "int", 4000,
              "Highest share.partition.max.record.locks a group may set.",
              between(2000, 10_000)),
    ConfigDef("group.share.assignment.interval.ms", "int", 1000,
              "Default share.assignment.interval.ms (accepted and described; assignments are "
              "currently computed at once, as in Kafka 4.2).", at_least(0), dynamic=True),
    ConfigDef("group.share.min.assignment.interval.ms", "int", 0,
              "Lowest share.assignment.interval.ms a group may set.", at_least(0)),
    ConfigDef("group.share.max.assignment.interval.ms", "int", 15_000,
              "Highest share.assignment.interval.ms a group may set.", at_least(0)),
    ConfigDef("group.share.initialize.retry.interval.ms", "int", 30_000,
              "How long a share-partition may stay Initializing before a heartbeat retries "
              "its state initialization.", at_least(1)),
    ConfigDef("group.share.initialize.wait.ms", "int", 500,
              "Shoal extension: how long a heartbeat that starts share-state initialization "
              "waits for it, so that a joining member gets its partitions in the join answer "
              "instead of one heartbeat interval later. 0: answer at once, as Kafka does.",
              at_least(0), dynamic=True),
    ConfigDef("group.share.max.share.sessions", "int", 2000,
              "Maximum number of share sessions on this broker.", at_least(1)),
    ConfigDef("group.share.partition.unload.idle.ms", "long", 300_000,
              "Shoal extension (no Kafka equivalent): share-partitions of a share group with no "
              "members that were not fetched or acknowledged for this long, and hold no "
              "acquired records or unwritten state, are unloaded from memory; the next "
              "ShareFetch loads them again from the share coordinator, progress intact.",
              at_least(1)),
    ConfigDef("errors.deadletterqueue.auto.create.topics.enable", "bool", False,
              "KIP-1191: create a share group's dead-letter topic (with "
              "errors.deadletterqueue.group.enable=true) when a record is first dead-lettered "
              "to it and it does not exist; false: such records are archived without a "
              "dead-letter record, and that is logged.", dynamic=True),
    ConfigDef("errors.deadletterqueue.topic.name.prefix", "string", "dlq.",
              "KIP-1191: the prefix every share group's errors.deadletterqueue.topic.name must "
              "start with (empty: any name not starting with '__').", dynamic=True),
    ConfigDef("group.share.assignors", "list", "simple",
              "Share-group assignor; only 'simple' exists.", one_of("simple")),
    # Authorization (issue 13; broker/security/). Kafka's names and defaults.
    ConfigDef("authorizer.class.name", "string", "",
              "Empty: no authorization. org.apache.kafka.metadata.authorizer.StandardAuthorizer "
              "(or kafka.security.authorizer.AclAuthorizer): ACLs, managed with CreateAcls, "
              "DescribeAcls and DeleteAcls and kept in the data directory.",
              lambda v: _authorizer_class_problem(v)),
    ConfigDef("super.users", "string", "",
              "Principals allowed everything regardless of ACLs, ';'-separated "
              "(User:admin;User:ops), including the inter-broker share-state RPCs (83-87) "
              "and, without an ACL authorizer, the SCRAM credential RPCs (50, 51), which "
              "everyone else is refused with CLUSTER_AUTHORIZATION_FAILED. Connections "
              "without authentication are User:ANONYMOUS, so listing User:ANONYMOUS lets any "
              "such client act as the cluster: for tests and tools only.",
              lambda v: _super_users_problem(v)),
    ConfigDef("allow.everyone.if.no.acl.found", "bool", False,
              "Allow an operation on a resource that no ACL names at all (default: deny)."),
    ConfigDef("metrics.listen", "string", "",
              "Shoal extension: HOST:PORT of the Prometheus endpoint (GET /metrics); empty: "
              "off.", lambda v: _listener_problem(v) if v else None),
    # The metrics endpoint's bounds and security (issue 25; broker/metrics.py MetricsServer).
    ConfigDef("metrics.max.connections", "int", 16,
              "Shoal extension: connections the metrics endpoint holds at once (counted at "
              "accept, before TLS); one more is closed at once (503 on plain HTTP). Prometheus "
              "needs one per scrape.", at_least(1)),
    ConfigDef("metrics.render.cache.ms", "long", 1000,
              "Shoal extension: a scrape within this long of the last rendered page gets that "
              "page again, so a scrape storm renders at most once per interval on the event "
              "loop; 0 renders every scrape.", at_least(0)),
    ConfigDef("metrics.web.config.file", "string", "",
              "Shoal extension: a Prometheus exporter-toolkit web config file (YAML: "
              "tls_server_config with cert_file, key_file, client_ca_file, client_auth_type; "
              "basic_auth_users of bcrypt hashes) for HTTPS and basic auth on the metrics "
              "endpoint; empty: plain HTTP for everyone."),
    # Listeners and security (issue 13; broker/security/). Each may also be given for one
    # listener as listener.name.<lower-case listener name>.<name> (LISTENER_PREFIX below).
    ConfigDef("listener.security.protocol.map", "string", DEFAULT_PROTOCOL_MAP,
              "Security protocol of each listener name (NAME:PROTOCOL,...)."),
    ConfigDef("inter.broker.listener.name", "string", "",
              "Accepted and checked to name a listener; a single broker has no inter-broker "
              "traffic."),
    ConfigDef("sasl.enabled.mechanisms", "list", "GSSAPI",
              "SASL mechanisms of SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (Kafka's "
              "default GSSAPI is not supported: set this on a SASL listener).",
              lambda v: _mechanisms_problem(v)),
    ConfigDef("sasl.jaas.config", "string", None,
              "JAAS login config of SASL listeners (PlainLoginModule user_<name>=\"<password>\").",
              sensitive=True),
    ConfigDef("ssl.keystore.type", "string", "JKS", "Only PEM key stores can be used.",
              one_of("JKS", "PKCS12", "PEM")),
    ConfigDef("ssl.keystore.location", "string", None,
              "PEM file with the private key and certificate chain."),
    ConfigDef("ssl.keystore.key", "string", None, "Inline PEM private key.", sensitive=True),
    ConfigDef("ssl.keystore.certificate.chain", "string", None,
              "Inline PEM certificate chain."),
    ConfigDef("ssl.keystore.password", "string", None,
              "Key store password (not used for PEM: see ssl.key.password).", sensitive=True),
    ConfigDef("ssl.key.password", "string", None, "Password of an encrypted private key.",
              sensitive=True),
    ConfigDef("ssl.truststore.type", "string", "JKS", "Only PEM trust stores can be used.",
              one_of("JKS", "PKCS12", "PEM")),
    ConfigDef("ssl.truststore.location", "string", None,
              "PEM file with the CA certificates trusted for client certificates."),
    ConfigDef("ssl.truststore.certificates", "string", None, "Inline PEM CA certificates."),
    ConfigDef("ssl.truststore.password", "string", None,
              "Trust store password (not used for PEM).", sensitive=True),
    ConfigDef("ssl.client.auth", "string", "none",
              "Ask TLS clients for a certificate: none, requested or required.",
              one_of("none", "requested", "required")),
    ConfigDef("ssl.enabled.protocols", "list", "TLSv1.2,TLSv1.3",
              "TLS versions served (TLSv1.2, TLSv1.3).", lambda v: _protocols_problem(v)),
    ConfigDef("ssl.protocol", "string", "TLSv1.3",
              "Accepted for Kafka compatibility; the versions come from ssl.enabled.protocols."),
    ConfigDef("ssl.cipher.suites", "list", "",
              "TLS 1.2 cipher suites (Kafka/IANA names); empty: OpenSSL's defaults."),
    ConfigDef("ssl.principal.mapping.rules", "string", "DEFAULT",
              "Rules mapping a client certificate's DN to a principal name (DEFAULT, "
              "RULE:pattern/replacement/[LU]).", lambda v: _mapping_rules_problem(v)),
    ConfigDef("ssl.endpoint.identification.algorithm", "string", "https",
              "Accepted for Kafka compatibility (a broker verifies no server certificate)."),
]

# listener.name.<listener>.<config>: a per-listener value of a declared config, or of a SASL
# mechanism's config (listener.name.<listener>.<mechanism>.sasl.jaas.config), as in Kafka.
LISTENER_PREFIX = "listener.name."
_SASL_MECHANISMS = ("GSSAPI", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


def _protocols_problem(value: str) -> str | None:
    names = [p.strip() for p in value.split(",") if p.strip()]
    bad = [p for p in names if p not in ("TLSv1.2", "TLSv1.3")]
    if bad or not names:
        return f"{', '.join(bad) or 'empty'}: Shoal serves TLSv1.2 and TLSv1.3"
    return None


def _mapping_rules_problem(value: str) -> str | None:
    from broker.security.tls import TlsConfigError, parse_mapping_rules

    try:
        parse_mapping_rules(value, "rules")
    except TlsConfigError as exc:
        return str(exc)
    return None


def _mechanisms_problem(value: str) -> str | None:
    unknown = [m for m in (x.strip() for x in value.split(",")) if m and m not in _SASL_MECHANISMS]
    return f"unknown SASL mechanism(s) {', '.join(unknown)}" if unknown else None


# The authorizer checks live with the authorizer; imported when used, since broker.security
# builds on this module.
def _authorizer_class_problem(value: str) -> str | None:
    from broker.security.setup import authorizer_class_problem

    return authorizer_class_problem(value)


def _super_users_problem(value: str) -> str | None:
    from broker.security.setup import super_users_problem

    return super_users_problem(value)


def _listener_problem(value: str) -> str | None:
    try:
        parse_listener(value)
    except ConfigError as exc:
        return str(exc)
    return None


def _overrides_problem(value: str) -> str | None:
    from broker.connection_limits import overrides_problem

    return overrides_problem(value)


def _assignors_problem(value: str) -> str | None:
    names = [n.strip() for n in str(value).split(",") if n.strip()]
    known = ("uniform", "range")
    # Kafka also accepts the assignor class names; the short name is what matters.
    short = [n.rsplit(".", 1)[-1].removesuffix("Assignor").lower() for n in names]
    if not short:
        return "at least one assignor is needed (uniform, range)"
    unknown = [n for n, s in zip(names, short, strict=True) if s not in known]
    if unknown:
        return f"unknown assignor(s) {', '.join(unknown)}; the assignors are uniform and range"
    return None


# (default, min, max) broker config names of each bounded consumer-group setting.
CONSUMER_BOUNDED = {
    suffix: (f"group.consumer.{suffix}", f"group.consumer.min.{suffix}",
             f"group.consumer.max.{suffix}")
    for suffix in ("session.timeout.ms", "heartbeat.interval.ms")
}

# (default, min, max) broker config names of each bounded share-group setting.
SHARE_BOUNDED = {
    suffix: (f"group.share.{suffix}", f"group.share.min.{suffix}", f"group.share.max.{suffix}")
    for suffix in ("session.timeout.ms", "heartbeat.interval.ms", "record.lock.duration.ms",
                   "delivery.count.limit", "partition.max.record.locks", "assignment.interval.ms")
}


def share_bounds_problem(get: Callable[[str], Any]) -> str | None:
    """Why the group.share.* broker configs are inconsistent, or None (Kafka checks the same when
    it builds its group-coordinator and share-group configs)."""
    for default, lo, hi in SHARE_BOUNDED.values():
        if get(lo) > get(hi):
            return f"{lo}={get(lo)} must not be greater than {hi}={get(hi)}"
        if not get(lo) <= get(default) <= get(hi):
            return f"{default}={get(default)} must be between {lo}={get(lo)} and {hi}={get(hi)}"
    if get("group.share.heartbeat.interval.ms") >= get("group.share.session.timeout.ms"):
        return ("group.share.heartbeat.interval.ms must be less than "
                "group.share.session.timeout.ms")
    for default, lo, hi in CONSUMER_BOUNDED.values():
        if get(lo) > get(hi):
            return f"{lo}={get(lo)} must not be greater than {hi}={get(hi)}"
        if not get(lo) <= get(default) <= get(hi):
            return f"{default}={get(default)} must be between {lo}={get(lo)} and {hi}={get(hi)}"
    if get("group.consumer.heartbeat.interval.ms") >= get("group.consumer.session.timeout.ms"):
        return ("group.consumer.heartbeat.interval.ms must be less than "
                "group.consumer.session.timeout.ms")
    if get("group.share.max.share.sessions") < get("group.share.max.size"):
        return "group.share.max.share.sessions must be at least group.share.max.size"
    return None

BROKER_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in _BROKER_DEFS}

# Real Apache Kafka broker configs that Shoal accepts at startup but ignores, each with the reason
# it has no effect (logged). They are the ones Kafka's config/server.properties and common
# docker-compose setups for share groups carry. A declared name never appears here
# (tests/unit/broker/test_config.py checks), and nothing here can be changed at runtime.
NO_EFFECT_KAFKA_CONFIGS: Mapping[str, str] = {
    # KRaft: Shoal is one process with no controller quorum.
    "process.roles": "Shoal is a single process with no KRaft controller",
    "controller.quorum.voters": "Shoal has no KRaft controller quorum",
    "controller.quorum.bootstrap.servers": "Shoal has no KRaft controller quorum",
    "controller.listener.names": "Shoal has no controller listener",
    # Threads and sockets: one asyncio event loop, OS default socket buffers.
    "num.network.threads": "Shoal serves all connections on one event loop",
    "num.io.threads": "Shoal serves all requests on one event loop",
    "num.recovery.threads.per.data.dir": "logs are opened and recovered one at a time",
    "socket.send.buffer.bytes": "Shoal uses the OS default socket buffers",
    "socket.receive.buffer.bytes": "Shoal uses the OS default socket buffers",
    # Replication of internal topics: a single broker keeps one replica of everything.
    "offsets.topic.replication.factor": "a single broker keeps one replica",
    "transaction.state.log.replication.factor": "a single broker keeps one replica",
    "transaction.state.log.min.isr": "a single broker keeps one replica",
    "share.coordinator.state.topic.replication.factor": "a single broker keeps one replica",
    "share.coordinator.state.topic.min.isr": "a single broker keeps one replica",
    # Switches that turn share groups on in Kafka 4.0-4.2; Shoal always serves them.
    "group.coordinator.rebalance.protocols": "Shoal always serves the classic, consumer and "
                                             "share protocols",
    "group.share.enable": "share groups are always enabled in Shoal",
    "unstable.api.versions.enable": "Shoal advertises only the API versions it serves",
    # The log cleaner: one thread, no I/O throttle.
    "log.cleaner.threads": "Shoal runs one cleaner thread",
    "log.cleaner.io.max.bytes.per.second": "Shoal's cleaner is not throttled",
    "log.cleaner.io.buffer.size": "Shoal's cleaner sizes its read buffers itself",
    "log.cleaner.io.buffer.load.factor": "Shoal's key map is bounded by "
                                         "log.cleaner.dedupe.buffer.size alone",
    # Classic consumer groups and Kafka internals Shoal does not have.
    "group.share.persister.class.name": "Shoal's share-state persister is built in",
    "broker.id": "Shoal reports node.id as its broker id; set node.id instead",
}

_SEE_README = "See docs/configuration.md for the broker configs."


def unknown_broker_config_problem(name: str) -> str:
    """Why ``name`` cannot be set as a broker config: a no-effect Kafka config (runtime changes
    only reach here), or an unknown name with the closest known one suggested."""
    if name in NO_EFFECT_KAFKA_CONFIGS:
        return (f"{name} has no effect in Shoal ({NO_EFFECT_KAFKA_CONFIGS[name]}) and cannot be "
                "changed while the broker runs")
    close = difflib.get_close_matches(name, [*BROKER_CONFIGS, *NO_EFFECT_KAFKA_CONFIGS], n=1)
    hint = f"did you mean {close[0]!r}?" if close else "check the spelling or remove it."
    return f"unknown broker config {name!r}; {hint} {_SEE_README}"


_TOPIC_DEFS: list[ConfigDef] = [
    ConfigDef("cleanup.policy", "list", None,
              "delete: remove old segments by retention.ms/retention.bytes; compact: keep the "
              "latest record per key (records need a key); compact,delete: both.",
              cleanup_policy_problem, synonym="log.cleanup.policy"),
    ConfigDef("min.cleanable.dirty.ratio", "double", None,
              "Per-topic log.cleaner.min.cleanable.ratio.", _ratio,
              synonym="log.cleaner.min.cleanable.ratio"),
    ConfigDef("min.compaction.lag.ms", "long", None, "Per-topic log.cleaner.min.compaction.lag.ms.",
              at_least(0), synonym="log.cleaner.min.compaction.lag.ms"),
    ConfigDef("max.compaction.lag.ms", "long", None, "Per-topic log.cleaner.max.compaction.lag.ms.",
              at_least(1), synonym="log.cleaner.max.compaction.lag.ms"),
    ConfigDef("delete.retention.ms", "long", None, "Per-topic log.cleaner.delete.retention.ms.",
              at_least(0), synonym="log.cleaner.delete.retention.ms"),
    ConfigDef("retention.ms", "long", None, "Per-topic log.retention.ms.",
              _minus_one_or_at_least(1), synonym="log.retention.ms"),
    ConfigDef("retention.bytes", "long", None, "Per-topic log.retention.bytes.",
              _minus_one_or_at_least(0), synonym="log.retention.bytes"),
    ConfigDef("segment.bytes", "int", None, "Per-topic log.segment.bytes.", at_least(1024),
              synonym="log.segment.bytes"),
    ConfigDef("segment.ms", "long", None, "Per-topic log.roll.ms.", at_least(1),
              synonym="log.roll.ms"),
    ConfigDef("max.message.bytes", "int", None, "Per-topic message.max.bytes.", at_least(0),
              synonym="message.max.bytes"),
    ConfigDef("flush.messages", "long", None, "Per-topic log.flush.interval.messages.",
              at_least(1), synonym="log.flush.interval.messages"),
    ConfigDef("flush.ms", "long", None, "Per-topic log.flush.interval.ms.",
              _minus_one_or_at_least(0), synonym="log.flush.interval.ms"),
    ConfigDef("index.interval.bytes", "int", None, "Per-topic log.index.interval.bytes.",
              at_least(0), synonym="log.index.interval.bytes"),
    ConfigDef("message.timestamp.type", "string", None,
              "Per-topic log.message.timestamp.type.", one_of("CreateTime", "LogAppendTime"),
              synonym="log.message.timestamp.type"),
    ConfigDef("message.timestamp.before.max.ms", "long", None,
              "Per-topic log.message.timestamp.before.max.ms.", at_least(0),
              synonym="log.message.timestamp.before.max.ms"),
    ConfigDef("message.timestamp.after.max.ms", "long", None,
              "Per-topic log.message.timestamp.after.max.ms.", at_least(0),
              synonym="log.message.timestamp.after.max.ms"),
    ConfigDef("min.insync.replicas", "int", 1, "Single broker: always 1.", between(1, 1)),
    ConfigDef("compression.type", "string", "producer", "Only 'producer' is supported.",
              one_of("producer")),
    ConfigDef("errors.deadletterqueue.group.enable", "bool", False,
              "KIP-1191: whether share groups may use this topic as their dead-letter topic "
              "(errors.deadletterqueue.topic.name); the broker then writes to it on their "
              "behalf."),
]

TOPIC_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in _TOPIC_DEFS}


def parse_value(d: ConfigDef, raw: Any) -> Any:
    """Convert a raw (usually string) value to the config's type and validate it.

    Raises:
        ConfigError: the value has the wrong type or fails the validator.
    """
    try:
        if raw is None:
            value: Any = None
        elif d.type in ("int", "long"):
            value = int(str(raw).strip())
        elif d.type == "double":
            value = float(str(raw).strip())
        elif d.type == "bool":
            s = str(raw).strip().lower()
            if s not in ("true", "false"):
                raise ValueError(raw)
            value = s == "true"
        else:
            value = str(raw).strip()
    except ValueError:
        raise ConfigError(f"{d.name}: {raw!r} is not a valid {d.type}") from None
    if value is not None and d.validator is not None:
        problem = d.validator(value)
        if problem:
            raise ConfigError(f"{d.name}={raw}: {problem}")
    return value


def format_value(value: Any) -> str | None:
    """How a config value is shown in DescribeConfigs."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def read_properties(path: Path) -> dict[str, str]:
    """Parse a Java-style properties file (``key=value`` or ``key: value``; ``#``/``!`` comments).

    Raises:
        ConfigError: a non-comment line has no separator.
    """
    out: dict[str, str] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        s = line.strip()
        if not s or s[0] in "#!":
            continue
        for sep in ("=", ":"):
            if sep in s:
                k, v = s.split(sep, 1)
                out[k.strip()] = v.strip()
                break
        else:
            raise ConfigError(f"{path}:{lineno}: expected key=value, got {s!r}")
    return out


class BrokerConfig:
    """Validated broker configs; dynamic ones can change while the broker runs."""

    def __init__(self, overrides: Mapping[str, Any] | None = None) -> None:
        self._values: dict[str, Any] = {d.name: d.default for d in _BROKER_DEFS}
        self._explicit: set[str] = set()
        # Where a value came from, for DescribeConfigs (Kafka's STATIC_BROKER_CONFIG vs
        # DYNAMIC_BROKER_CONFIG): values given at startup, and names changed while running.
        self._static: dict[str, Any] = {}
        self._dynamic: set[str] = set()
        self._listeners: list[Callable[[str], None]] = []
        # listener.name.<listener>.<config> values (startup only), and the raw values of the
        # accepted no-effect Kafka configs (controller.listener.names drops listeners).
        self._per_listener: dict[str, Any] = {}
        self._no_effect: dict[str, str] = {}
        for name, raw in (overrides or {}).items():
            self.set(name, raw, initial=True)
        problem = share_bounds_problem(self.get)
        if problem:
            raise ConfigError(problem)
        self._check_listeners()

    def set(self, name: str, raw: Any, *, initial: bool = False) -> None:
        """Set a config from its raw value. At startup (``initial``) a name in
        ``NO_EFFECT_KAFKA_CONFIGS`` is accepted, logged and not stored.

        Raises:
            ConfigError: unknown name (the message suggests the closest known one), invalid
                value, or not dynamic (after startup).
        """
        d = BROKER_CONFIGS.get(name)
        if d is None:
            if initial and name in NO_EFFECT_KAFKA_CONFIGS:
                log.warning("broker config %s=%s is accepted but has no effect in Shoal: %s",
                            name, raw, NO_EFFECT_KAFKA_CONFIGS[name])
                self._no_effect[name] = str(raw)
                return
            if initial and name.startswith(LISTENER_PREFIX):
                self._per_listener[name] = _parse_per_listener(name, raw)
                return
            raise ConfigError(unknown_broker_config_problem(name))
        if not initial and not d.dynamic:
            raise ConfigError(f"{name} cannot be changed while the broker runs; restart with it set")
        value = parse_value(d, raw) if initial else self.check(name, raw)
        self._values[name] = value
        self._explicit.add(name)
        if initial:
            self._static[name] = value
        else:
            self._dynamic.add(name)
        for cb in self._listeners:
            cb(name)

    def check(self, name: str, raw: Any) -> Any:
        """The parsed value ``set`` would store for a runtime change, without storing it.

        Raises:
            ConfigError: unknown name, invalid value, or inconsistent with related configs.
        """
        d = BROKER_CONFIGS.get(name)
        if d is None:
            raise ConfigError(unknown_broker_config_problem(name))
        value = parse_value(d, raw)
        if name.startswith(("group.share.", "group.consumer.")):
            problem = share_bounds_problem(lambda n: value if n == name else self._values[n])
            if problem:
                raise ConfigError(f"{name}={raw}: {problem}")
        return value

    def reset(self, name: str) -> None:
        """Drop a runtime change: back to the startup value, or the default if none was given.

        Raises:
            ConfigError: unknown or not dynamic.
        """
        d = BROKER_CONFIGS.get(name)
        if d is None or not d.dynamic:
            raise ConfigError(f"{name} is not a dynamic broker config")
        self._dynamic.discard(name)
        if name in self._static:
            self._values[name] = self._static[name]
        else:
            self._values[name] = d.default
            self._explicit.discard(name)
        for cb in self._listeners:
            cb(name)

    def source(self, name: str) -> str:
        """``"dynamic"`` (changed at runtime), ``"static"`` (given at startup) or ``"default"``."""
        if name in self._dynamic:
            return "dynamic"
        if name in self._static:
            return "static"
        return "default"

    def static_value(self, name: str) -> Any:
        """The value given at startup, or None if the config was not given."""
        return self._static.get(name)

    def dynamic_names(self) -> list[str]:
        """Names of the configs changed while the broker runs."""
        return sorted(self._dynamic)

    def on_change(self, cb: Callable[[str], None]) -> None:
        self._listeners.append(cb)

    def get(self, name: str) -> Any:
        return self._values[name]

    def is_default(self, name: str) -> bool:
        return name not in self._explicit

    def items(self) -> list[tuple[str, Any]]:
        return sorted((k, v) for k, v in self._values.items() if k in BROKER_CONFIGS)

    def as_mapping(self) -> dict[str, Any]:
        """Every declared value plus the ``listener.name.*`` ones, for
        ``broker.security.listeners.listener_config`` and the TLS/SASL builders."""
        return {**self._values, **self._per_listener}

    @property
    def listeners(self) -> list[Listener]:
        """The listeners to serve (without controller listeners), as ``_check_listeners``
        validated them."""
        return parse_listeners(
            self._values["listeners"], self._values["listener.security.protocol.map"],
            self._values["advertised.listeners"], self._values["inter.broker.listener.name"],
            exclude=self._no_effect.get("controller.listener.names", "").split(","))

    def _check_listeners(self) -> None:
        """Raises:
            ConfigError: the listener configs are inconsistent (``parse_listeners``).
        """
        try:
            names = {x.name.lower() for x in self.listeners}
        except ListenerError as exc:
            raise ConfigError(str(exc)) from None
        for key in self._per_listener:
            listener = key[len(LISTENER_PREFIX):].split(".", 1)[0]
            if listener not in names:
                log.warning("broker config %s is for listener %s, which is not in listeners",
                            key, listener.upper())

    # Typed accessors for the hot paths.
    @property
    def node_id(self) -> int:
        return int(self._values["node.id"])

    @property
    def data_dir(self) -> Path:
        return Path(self._values["log.dirs"].split(",")[0])

    @property
    def listen(self) -> tuple[str, int]:
        return parse_listener(self._values["listeners"])

    @property
    def advertised(self) -> tuple[str, int]:
        adv = self._values["advertised.listeners"]
        return parse_listener(adv) if adv else self.listen


def _parse_per_listener(name: str, raw: Any) -> Any:
    """Parse ``listener.name.<listener>.<config>``: a declared config (validated as such) or a
    SASL mechanism's ``<mechanism>.sasl.*`` config (kept as text).

    Raises:
        ConfigError: no listener name, or an unknown config after it.
    """
    listener, _, key = name[len(LISTENER_PREFIX):].partition(".")
    if not listener or not key:
        raise ConfigError(f"{name}: expected {LISTENER_PREFIX}<listener>.<config>")
    if listener != listener.lower():
        raise ConfigError(f"{name}: the listener name in {LISTENER_PREFIX}<listener>. must be "
                          f"lower case ({listener.lower()})")
    d = BROKER_CONFIGS.get(key)
    if d is not None:
        return parse_value(d, raw)
    mechanism, _, sasl_key = key.partition(".")
    if mechanism.upper() in _SASL_MECHANISMS and sasl_key.startswith("sasl."):
        return str(raw).strip()
    close = difflib.get_close_matches(key, list(BROKER_CONFIGS), n=1)
    hint = f"did you mean {LISTENER_PREFIX}{listener}.{close[0]}?" if close else \
        "check the spelling or remove it."
    raise ConfigError(f"unknown broker config {name!r}; {hint} {_SEE_README}")


def parse_listener(value: str) -> tuple[str, int]:
    """``PLAINTEXT://host:port`` or ``host:port`` to (host, port).

    Raises:
        ConfigError: no port, or a port outside 0..65535.
    """
    s = value.split(",")[0].strip()
    if "://" in s:
        s = s.split("://", 1)[1]
    host, sep, port = s.rpartition(":")
    if not sep:
        raise ConfigError(f"listener {value!r} has no port (expected host:port)")
    try:
        p = int(port)
    except ValueError:
        raise ConfigError(f"listener {value!r}: port {port!r} is not a number") from None
    if not 0 <= p <= 65535:
        raise ConfigError(f"listener {value!r}: port {p} is out of range")
    return (host.strip("[]") or "0.0.0.0", p)


def topic_config_value(name: str, topic_configs: Mapping[str, Any], broker: BrokerConfig) -> Any:
    """Effective value of a topic config: the topic's override, else the broker synonym/default."""
    if name in topic_configs:
        return topic_configs[name]
    d = TOPIC_CONFIGS[name]
    if d.synonym is not None:
        return broker.get(d.synonym)
    return d.default


