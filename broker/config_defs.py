"""The broker's config table: every broker config Shoal declares (name, type, default, validator,
one line of documentation), the Kafka configs it accepts but ignores, and the checks that span
several configs. ``broker/config.py`` builds ``BrokerConfig`` on it; DescribeConfigs and
IncrementalAlterConfigs read it."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from broker.config_no_effect import NO_EFFECT_KAFKA_CONFIGS
from broker.config_controller import CONTROLLER_DEFS
from broker.config_replication import REPLICATION_DEFS
from broker.config_types import (
    LONG_MAX,
    ConfigDef,
    ConfigError,
    assignment_interval_problem,
    at_least,
    between,
    cleanup_policy_problem,
    one_of,
    parse_listener,
    _minus_one_or_at_least,
    _ratio,
)
from broker.connection_limits import overrides_problem
from coordinator.group.consumer.migration import POLICY_NAMES
from broker.security.listeners import DEFAULT_PROTOCOL_MAP
from broker.security.setup import authorizer_class_problem, super_users_problem
from broker.security.tls import TlsConfigError, parse_mapping_rules


_BROKER_DEFS: list[ConfigDef] = [
    ConfigDef("node.id", "int", 1, "Id of this broker in Metadata responses.", at_least(0)),
    # Cluster mode (broker/cluster_member.py): empty runs the embedded single broker.
    ConfigDef("cluster.etcd.endpoints", "string", "",
              "Shoal extension: etcd endpoints (etcd://HOST:PORT[,HOST:PORT...] or "
              "HOST:PORT,...) holding the cluster's metadata; empty runs one broker on its own."),
    ConfigDef("cluster.etcd.prefix", "string", "/shoal",
              "Shoal extension: the etcd key prefix of this cluster (one cluster per prefix)."),
    ConfigDef("broker.session.timeout.ms", "int", 6000,
              "A cluster member that stops renewing its etcd session for this long leaves "
              "Metadata and the partitions it led move to another in-sync replica (or go "
              "offline). It bounds how long a killed leader's partitions wait (Kafka's default "
              "is 9000); the renewals run in a thread of their own, so a busy broker keeps its "
              "session. Shorter means faster failover but a session lost to a shorter etcd "
              "or network outage.", at_least(2000)),
    ConfigDef("broker.heartbeat.interval.ms", "int", 2000,
              "How often a cluster member renews its etcd session (a failed renewal is "
              "retried at once, on a new connection).", at_least(100)),
    ConfigDef("broker.rack", "string", "",
              "Rack of this broker; new partitions are spread over racks."),
    ConfigDef("listeners", "string", "PLAINTEXT://127.0.0.1:9092",
              "Listeners, NAME://host:port,... (host:port alone is PLAINTEXT)."),
    ConfigDef("advertised.listeners", "string", "",
              "Address clients are told to connect to, per listener name; defaults to the "
              "listener."),
    ConfigDef("log.dirs", "string", "./data", "Directory holding all partition logs and state."),
    ConfigDef("num.partitions", "int", 1, "Partitions of auto-created topics and of CreateTopics "
              "requests that ask for the default (-1).", at_least(1), dynamic=True),
    ConfigDef("default.replication.factor", "int", 1,
              "Replicas of topics created without a replication factor (-1) and of "
              "auto-created topics; a single broker allows only 1.", at_least(1)),
    *CONTROLLER_DEFS,  # broker/config_controller.py
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
              "forgotten by that partition (its next batch is then accepted at any sequence, KIP-360).",
              at_least(1), dynamic=True),
    ConfigDef("producer.id.expiration.check.interval.ms", "int", 600_000,
              "How often idle producer ids are looked for.", at_least(1)),
    ConfigDef("queued.max.requests", "int", 500,
              "Requests a single connection may have in flight before the broker stops reading "
              "from it (backpressure).", at_least(1)),
    ConfigDef("max.request.partition.size.limit", "int", 2000,
              "The most partitions a DescribeTopicPartitions response lists (Kafka's); a "
              "client pages through the rest with the response's cursor.", at_least(1)),
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
    ConfigDef("shutdown.force.timeout.ms", "long", 60_000,
              "Shoal extension: the longest a shutdown may take after SIGTERM or SIGINT, "
              "controlled shutdown included; a broker still stopping then logs the step it was "
              "in and exits at once with status 1 (as after kill -9, nothing acknowledged is "
              "lost). Keep it above controlled.shutdown.timeout.ms plus shutdown.timeout.ms.",
              at_least(1000)),
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
    ConfigDef("group.consumer.migration.policy", "string", "bidirectional",
              "Online migration of groups between the classic and consumer protocols: "
              "bidirectional (upgrade and downgrade), upgrade (a non-empty classic group becomes "
              "a consumer group when a member joins with the consumer protocol), downgrade (a "
              "consumer group becomes a classic group when its last consumer-protocol member "
              "leaves and only classic members remain) or disabled (neither). Case-insensitive.",
              lambda v: None if str(v).strip().lower() in POLICY_NAMES else
              f"must be one of {', '.join(POLICY_NAMES)}"),
    ConfigDef("offset.metadata.max.bytes", "int", 4096,
              "Largest metadata string of a committed offset.", at_least(0)),
    ConfigDef("offsets.retention.minutes", "int", 10080,
              "How long committed offsets are kept after their last commit once nothing reads "
              "them: every offset of an empty group, and the offsets of topics a group with "
              "members no longer subscribes to.", at_least(1)),
    ConfigDef("offsets.retention.check.interval.ms", "long", 600_000,
              "How often the offsets of a group with members are checked for topics it no "
              "longer subscribes to.", at_least(1)),
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
              "Shoal's own: EndTxn answers once PrepareCommit/PrepareAbort is durable, as "
              "Kafka; a request of the same transactional id that arrives while that "
              "transaction's markers are still being written waits for them up to this long "
              "(they are local appends, usually done at once) instead of getting "
              "CONCURRENT_TRANSACTIONS and backing off; 0 answers CONCURRENT_TRANSACTIONS at "
              "once, as Kafka.", at_least(0),
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
    ConfigDef("share.version", "int", 2,
              "The finalized share.version feature level ApiVersions advertises (Kafka sets it "
              "with kafka-features or kafka-storage format --feature): 2 (Kafka 4.4) enables "
              "share-group dead-letter topics (KIP-1191); 1 (Kafka 4.2) is share groups "
              "without them, so records given up on are archived with no dead-letter copy.",
              between(1, 2)),
    ConfigDef("group.share.assignment.interval.ms", "int", 0,
              "Default share.assignment.interval.ms. Only 0 is accepted: Shoal computes a share "
              "group's target assignment at once on every change; any other value is refused "
              "(INVALID_CONFIG) rather than ignored.", assignment_interval_problem,
              dynamic=True),
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
    # The broker's client for broker-to-broker calls (broker/inter_broker.py, issue 23).
    ConfigDef("security.inter.broker.protocol", "string", "PLAINTEXT",
              "Security protocol brokers call each other with when inter.broker.listener.name "
              "is not set (the listener of that name is used); set only one of the two.",
              one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
    ConfigDef("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI",
              "SASL mechanism brokers call each other with on a SASL inter-broker listener "
              "(PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; the login is the username/password of "
              "that listener's JAAS config for the mechanism)."),
    ConfigDef("request.timeout.ms", "int", 30_000,
              "How long a broker-to-broker request (the share-state RPCs to the share "
              "coordinator) may take, retries included, before it fails.", at_least(1)),
    ConfigDef("socket.connection.setup.timeout.ms", "long", 10_000,
              "How long a broker may take to connect to another broker (TCP, TLS and SASL).",
              at_least(1)),
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
    return authorizer_class_problem(value)


def _super_users_problem(value: str) -> str | None:
    return super_users_problem(value)


def _listener_problem(value: str) -> str | None:
    try:
        parse_listener(value)
    except ConfigError as exc:
        return str(exc)
    return None


def _overrides_problem(value: str) -> str | None:
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

BROKER_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in [*_BROKER_DEFS, *REPLICATION_DEFS]}

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
