"""The broker's metric set: hot-path counters, and gauges read from live state at scrape time.

Concept: ``BrokerMetrics`` is created with the ``Broker`` and reached by handlers as
``ctx.broker.metrics``. Request paths only bump the instruments below (a dict store per
partition at most; nothing per record). Everything that describes state (share groups, members,
share sessions, each share-partition's window, lag and oldest unacknowledged age, and the
counters every ``SharePartition`` keeps itself: acknowledgements by type, lock timeouts,
delivery-limit archives) is read by collectors when ``/metrics`` is scraped, so it costs nothing
between scrapes.

Lag follows KIP-1226: log end offset - share-partition start offset - records already
acknowledged or archived at/after the start offset. Only share-partitions loaded on this broker
(fetched from since it started) are reported; the README's Metrics section lists every metric
with its Kafka JMX counterpart.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.metrics import Family, Registry
from broker.share.record_state import AckType

if TYPE_CHECKING:
    from broker.app import Broker

GROUP_STATES = ("Empty", "Stable")
_PARTITION_LABELS = ("group", "topic", "partition")


def error_label(code: int | ErrorCode) -> str:
    """An error code as a label value, named as Kafka names it (``INVALID_RECORD_STATE``)."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(int(code))


def first_response_error(resp: Any) -> int:
    """The first error in a ShareFetch/ShareAcknowledge response (top level, then per
    partition fetch and acknowledge errors), or 0 when it carries none.

    Runs once per request, so it only tests truth values (error codes are ints, NONE is 0).
    """
    if resp.error_code:
        return int(resp.error_code)
    for t in resp.responses:
        for p in t.partitions:
            if p.error_code:
                return int(p.error_code)
            ack = getattr(p, "acknowledge_error_code", 0)
            if ack:
                return int(ack)
    return 0


class BrokerMetrics:
    """Every metric Shoal exports; see the module docstring and README "Metrics"."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self.registry = r = Registry()
        # -- hot-path instruments (names map to Kafka JMX in README "Metrics") --
        self.produce_bytes = r.labelled_counter(
            "shoal_produce_bytes_total", "Record-batch bytes appended by Produce requests.",
            ("topic",))
        self.produce_records = r.labelled_counter(
            "shoal_produce_records_total", "Records appended by Produce requests.", ("topic",))
        self.fetch_bytes = r.labelled_counter(
            "shoal_fetch_bytes_total", "Record-batch bytes returned by Fetch requests.",
            ("topic",))
        self.share_fetch_bytes = r.labelled_counter(
            "shoal_share_fetch_bytes_total", "Record-batch bytes returned by ShareFetch requests.",
            ("topic",))
        self.share_acquired_records = r.labelled_counter(
            "shoal_share_acquired_records_total",
            "Records acquired (delivered) by ShareFetch requests, redeliveries included.",
            ("topic",))
        self.share_fetch_requests = r.counter(
            "shoal_share_fetch_requests_total", "ShareFetch requests answered.")
        self.share_fetch_failed = r.labelled_counter(
            "shoal_share_fetch_requests_failed_total",
            "ShareFetch requests whose response carries an error (top level, or a partition's "
            "fetch or acknowledge error), by the first such error.", ("error",))
        self.share_ack_requests = r.counter(
            "shoal_share_acknowledge_requests_total", "ShareAcknowledge requests answered.")
        self.share_ack_failed = r.labelled_counter(
            "shoal_share_acknowledge_requests_failed_total",
            "ShareAcknowledge requests whose response carries an error, by the first such "
            "error.", ("error",))
        self.share_state_write_seconds = r.histogram(
            "shoal_share_state_write_duration_seconds",
            "Time for the persister to make a share-state write durable, as the "
            "share-partition leader sees it (acknowledgements, lock timeouts, releases).")
        self.share_state_write_errors = r.labelled_counter(
            "shoal_share_state_write_errors_total", "Share-state writes the persister refused.",
            ("error",))
        self.share_session_evictions = r.counter(
            "shoal_share_session_evictions_total",
            "Share sessions removed because their connection closed.")
        self.sasl_successes = r.labelled_counter(
            "shoal_sasl_authentications_total",
            "Connections that authenticated with SASL, by listener and mechanism.",
            ("listener", "mechanism"))
        self.sasl_failures = r.labelled_counter(
            "shoal_sasl_authentication_failures_total",
            "SASL authentications refused (bad credentials, unknown mechanism, a request out "
            "of order), by listener and mechanism (\"none\" before one was chosen).",
            ("listener", "mechanism"))
        self.tls_handshake_failures = r.labelled_counter(
            "shoal_tls_handshake_failures_total",
            "TLS handshakes that failed or timed out (plaintext clients, bad certificates), "
            "by listener.", ("listener",))
        self.authorization_denied = r.labelled_counter(
            "shoal_authorization_denied_total",
            "Operations the authorizer refused to a client, by ACL operation and resource type "
            "(probes that only filter an answer, such as Metadata for all topics, not counted).",
            ("operation", "resource_type"))
        r.add_collector(self._collect_broker)
        r.add_collector(self._collect_groups)
        r.add_collector(self._collect_share_partitions)

    def render(self) -> str:
        return self.registry.render()

    # -- collectors (scrape time) --------------------------------------------------------

    def _collect_broker(self) -> Iterable[Family]:
        b = self._broker
        yield Family("shoal_connections", "gauge", "Open client connections.",
                     samples=[((), len(b.connections))])
        if not b.started:
            return
        sessions = b.shares.sessions
        yield Family("shoal_share_sessions", "gauge", "Share sessions in the cache.",
                     samples=[((), len(sessions))])
        stats = b.cleaner.stats
        for name, text, value in (
            ("shoal_log_cleaner_passes_total", "Compaction passes the log cleaner completed.",
             stats.passes),
            ("shoal_log_cleaner_read_bytes_total", "Bytes of segments the log cleaner rewrote.",
             stats.bytes_read),
            ("shoal_log_cleaner_written_bytes_total", "Bytes of cleaned segments swapped in.",
             stats.bytes_written),
        ):
            yield Family(name, "counter", text, samples=[((), value)])

    def _collect_groups(self) -> Iterable[Family]:
        b = self._broker
        if not b.started:
            return
        listed = b.share_groups.list_groups()
        by_state = dict.fromkeys(GROUP_STATES, 0)
        for g in listed:
            by_state[g.state] = by_state.get(g.state, 0) + 1
        yield Family("shoal_share_groups", "gauge", "Share groups by state.", ("state",),
                     [((s,), n) for s, n in sorted(by_state.items())])
        members = Family("shoal_share_group_members", "gauge", "Members of each share group.",
                         ("group",))
        for d in b.share_groups.describe([g.group_id for g in listed]):
            if d.group is not None:
                members.add((d.group.group_id,), len(d.group.members))
        yield members

    def _collect_share_partitions(self) -> Iterable[Family]:
        b = self._broker
        if not b.started:
            return
        now = b.clock.now_ms()
        loaded = Family("shoal_share_partitions", "gauge",
                        "Share-partitions loaded on this broker, per group.", ("group",))
        fams = {name: Family(name, kind, text, _PARTITION_LABELS) for name, kind, text in (
            ("shoal_share_partition_start_offset", "gauge",
             "Share-partition start offset (SPSO)."),
            ("shoal_share_partition_end_offset", "gauge",
             "Share-partition end offset (SPEO): last offset in the in-flight window."),
            ("shoal_share_partition_in_flight_records", "gauge",
             "Records in the in-flight window at or after the start offset."),
            ("shoal_share_partition_in_flight_batches", "gauge",
             "In-flight batches cached for the share-partition."),
            ("shoal_share_partition_acquired_records", "gauge",
             "Records currently acquired (locked to a consumer)."),
            ("shoal_share_partition_lag", "gauge",
             "Records not yet acknowledged or archived: log end offset - start offset - "
             "records already completed after it (KIP-1226)."),
            ("shoal_share_partition_oldest_unacked_age_seconds", "gauge",
             "Seconds since the oldest record still acquired (unacknowledged) was acquired; "
             "0 when none is."),
            ("shoal_share_acquisition_lock_timeouts_total", "counter",
             "Records whose acquisition lock expired before they were acknowledged."),
            ("shoal_share_delivery_limit_archived_records_total", "counter",
             "Records archived because they reached the delivery count limit."),
        )}
        acks = Family("shoal_share_acknowledgements_total", "counter",
                      "Records acknowledged, by acknowledgement type.",
                      (*_PARTITION_LABELS, "type"))
        group_lag = Family("shoal_share_group_lag", "gauge",
                           "Sum of shoal_share_partition_lag over the group's share-partitions.",
                           ("group",))
        group_age = Family("shoal_share_group_oldest_unacked_age_seconds", "gauge",
                           "Largest shoal_share_partition_oldest_unacked_age_seconds of the "
                           "group.", ("group",))
        per_group: dict[str, list[float]] = {}  # group -> [partitions, lag, age]
        for key, sp in sorted(b.shares.partitions.partitions().items(),
                              key=lambda kv: (kv[0].group_id, str(kv[0].topic_id),
                                              kv[0].partition)):
            topic = b.topics.by_id(key.topic_id)
            if topic is None:
                continue
            m = sp.metrics()
            labels = (key.group_id, topic.name, str(key.partition))
            agg = per_group.setdefault(key.group_id, [0, 0, 0.0])
            agg[0] += 1
            fams["shoal_share_partition_start_offset"].add(labels, m.start_offset)
            fams["shoal_share_partition_end_offset"].add(labels, m.end_offset)
            fams["shoal_share_partition_in_flight_records"].add(labels, m.in_flight_records)
            fams["shoal_share_partition_in_flight_batches"].add(labels, m.in_flight_batches)
            fams["shoal_share_partition_acquired_records"].add(labels, m.acquired_records)
            lg = b.logs.get(topic.name, key.partition)
            if lg is not None:
                lag = max(0, lg.log_end_offset - m.start_offset - m.delivery_complete_count)
                fams["shoal_share_partition_lag"].add(labels, lag)
                agg[1] += lag
            at = m.oldest_unacked_acquired_at_ms
            age = max(0.0, (now - at) / 1000) if at is not None else 0.0
            fams["shoal_share_partition_oldest_unacked_age_seconds"].add(labels, age)
            agg[2] = max(agg[2], age)
            fams["shoal_share_acquisition_lock_timeouts_total"].add(labels, m.lock_timeouts)
            fams["shoal_share_delivery_limit_archived_records_total"].add(
                labels, m.delivery_limit_archives)
            for t in AckType:
                acks.add((*labels, t.name.lower()), m.acks.get(t, 0))
        for group, (n, lag, age) in sorted(per_group.items()):
            loaded.add((group,), n)
            group_lag.add((group,), lag)
            group_age.add((group,), age)
        yield loaded
        yield from fams.values()
        yield acks
        yield group_lag
        yield group_age



async def counted(run: Any, ctx: Any, req: Any, requests: Any, failed: Any) -> Any:
    """Run a handler coroutine, counting the request and any error it answers or raises."""
    requests.value += 1
    try:
        resp = await run(ctx, req)
    except Exception:
        failed.inc("UNKNOWN_SERVER_ERROR")
        raise
    code = first_response_error(resp)
    if code:
        failed.inc(error_label(code))
    return resp
