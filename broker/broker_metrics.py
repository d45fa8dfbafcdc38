"""The broker's metric set: hot-path counters, and gauges read from live state at scrape time.

Concept: ``BrokerMetrics`` is created with the ``Broker`` and reached by handlers as
``ctx.broker.metrics``. Request paths only bump the instruments below (a dict store per
partition at most; nothing per record). Everything that describes state (share groups, members,
share sessions, each share-partition's window, lag and oldest unacknowledged age, and the
counters every ``SharePartition`` keeps itself: acknowledgements by type, lock timeouts,
delivery-limit archives) is read by collectors when ``/metrics`` is scraped, so it costs nothing
between scrapes.

Lag follows KIP-1226: log end offset - share-partition start offset - records already
acknowledged or archived at/after the start offset. Share-partitions loaded on this broker are
reported from their live window; every other share-partition with state at the local share
coordinator from that persisted state (broker/share/figures.py: cached per scrape interval, at
most MAX_SHARE_PARTITION_SERIES). Age and drain figures (oldest unacknowledged record age from its
append time, drain rate, drain ETA) are defined in broker/share/drain.py. docs/metrics.md
lists every metric with its Kafka JMX counterpart.

Consumer groups (classic, and consumer-type groups as the group service lists them) are read
through ``GroupCoordinatorService.consumer_groups`` at scrape time: state and members per group,
committed offset and lag (log end offset - committed offset) per partition with a committed
offset, at most ``MAX_CONSUMER_GROUP_PARTITION_SERIES`` partition series per page.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.cluster_metrics import collect_cluster
from broker.metrics import Family, Registry
from broker.share.drain import age_s, drain_eta_s, since_progress_s
from broker.share.record_state import AckType
from broker.share.admin import share_lag
from broker.share.figures import MAX_SHARE_PARTITION_SERIES, ShareFigures

if TYPE_CHECKING:
    from broker.app import Broker

log = logging.getLogger("shoal.metrics")

GROUP_STATES = ("Empty", "Stable")
_PARTITION_LABELS = ("group", "topic", "partition")
# Per-partition consumer-group series (committed offset and lag) on one page at most; past it
# only the per-group sums are exported (and a warning is logged once), so a broker with many
# groups does not flood Prometheus. Share-partition series are bounded by what is loaded.
MAX_CONSUMER_GROUP_PARTITION_SERIES = 10_000


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
    """Every metric Shoal exports; see the module docstring and docs/metrics.md."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self.registry = r = Registry()
        # -- hot-path instruments (names map to Kafka JMX in docs/metrics.md) --
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
        self.share_fetch_empty = r.counter(
            "shoal_share_fetch_empty_responses_total",
            "ShareFetch requests that asked for records and were answered without any.")
        self.share_fetch_parked = r.counter(
            "shoal_share_fetch_parked_total",
            "ShareFetch requests that waited (MaxWaitMs) for records or for MinBytes at least "
            "once before their answer.")
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
        # The metrics endpoint itself (broker/metrics.py MetricsServer).
        self.metrics_render_seconds = r.histogram(
            "shoal_metrics_render_duration_seconds",
            "Time spent rendering the /metrics page on the event loop (one observation per "
            "render; scrapes answered with the cached page, metrics.render.cache.ms, are not "
            "renders).")
        self.metrics_connections_rejected = r.counter(
            "shoal_metrics_connections_rejected_total",
            "Connections to the metrics endpoint closed at accept because "
            "metrics.max.connections were open.")
        # Age and drain figures, including share-partitions not loaded here (scrape-time cache).
        self.share_figures = ShareFigures(broker)
        r.add_collector(self._collect_broker)
        r.add_collector(self._collect_groups)
        r.add_collector(self._collect_share_partitions)
        r.add_collector(self._collect_consumer_groups)
        r.add_collector(self._collect_transactions)
        r.add_collector(lambda: collect_cluster(broker))
        self._series_capped = False

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

    def _collect_transactions(self) -> Iterable[Family]:
        b = self._broker
        if not b.started:
            return
        txns = b.transactions
        listed = txns.list_transactions((), ())
        if isinstance(listed, ErrorCode):
            return
        by_state: dict[str, int] = {}
        oldest = 0.0
        now = b.clock.now_ms()
        for meta in listed:
            by_state[meta.state.kafka_name] = by_state.get(meta.state.kafka_name, 0) + 1
            if meta.state.kafka_name == "Ongoing":
                oldest = max(oldest, (now - meta.start_ms) / 1000)
        yield Family("shoal_transactions", "gauge",
                     "Transactional ids by the state of their transaction.", ("state",),
                     [((s,), n) for s, n in sorted(by_state.items())])
        yield Family("shoal_transaction_oldest_ongoing_age_seconds", "gauge",
                     "Seconds since the oldest ongoing transaction started (0 if none).",
                     samples=[((), round(oldest, 3))])
        yield Family("shoal_transaction_markers_pending", "gauge",
                     "Transactions whose COMMIT/ABORT markers are being written.",
                     samples=[((), txns.markers_pending())])

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
            ("shoal_share_partition_oldest_acquired_age_seconds", "gauge",
             "Seconds since the oldest record still acquired (unacknowledged) was acquired; "
             "0 when none is."),
            ("shoal_share_acquisition_lock_timeouts_total", "counter",
             "Records whose acquisition lock expired before they were acknowledged."),
            ("shoal_share_delivery_limit_archived_records_total", "counter",
             "Records archived because they reached the delivery count limit."),
            ("shoal_share_archived_records_total", "counter",
             "Records archived by REJECT or GAP acknowledgements or at the delivery count "
             "limit."),
            ("shoal_share_partition_oldest_unacked_append_age_seconds", "gauge",
             "Seconds since the oldest record not yet acknowledged or archived (acquired, "
             "released, in redelivery backoff or never delivered) at or after the start offset "
             "was appended (its log batch timestamp; redelivery does not reset it); 0 when none "
             "is."),
            ("shoal_share_partition_drain_rate", "gauge",
             "Records completed (acknowledged or archived) per second, exponentially weighted "
             "over the last minute, since the share-partition was loaded here."),
            ("shoal_share_partition_drain_eta_seconds", "gauge",
             "Lag divided by the drain rate: 0 without lag, +Inf when records wait and none "
             "completed in the last minute (see shoal_share_partition_seconds_since_progress)."),
            ("shoal_share_partition_seconds_since_progress", "gauge",
             "Seconds since a record of this share-partition last completed (acknowledged or "
             "archived) while records wait: 0 without lag, +Inf when none completed since it "
             "was loaded on this broker or it is not loaded here."),
            ("shoal_share_dead_lettered_records_total", "counter",
             "KIP-1191: records archived after their dead-letter record was written to the "
             "group's DLQ topic (errors.deadletterqueue.topic.name)."),
            ("shoal_share_dead_letter_skipped_records_total", "counter",
             "KIP-1191: records the group gave up on that were archived without a dead-letter "
             "record because the DLQ topic was missing or does not allow it (see the log)."),
            ("shoal_share_partition_archiving_records", "gauge",
             "KIP-1191: records waiting for their dead-letter record to be durable (ARCHIVING)."),
            ("shoal_share_partition_loaded", "gauge",
             "1 when the share-partition is loaded on this broker, 0 when its figures come "
             "from the persisted share state (nobody fetched it since the broker started)."),
        )}
        acks = Family("shoal_share_acknowledgements_total", "counter",
                      "Records acknowledged, by acknowledgement type.",
                      (*_PARTITION_LABELS, "type"))
        group_lag = Family("shoal_share_group_lag", "gauge",
                           "Sum of shoal_share_partition_lag over the group's share-partitions.",
                           ("group",))
        group_age = Family("shoal_share_group_oldest_acquired_age_seconds", "gauge",
                           "Largest shoal_share_partition_oldest_acquired_age_seconds of the "
                           "group.", ("group",))
        per_group: dict[str, list[float]] = {}  # group -> [partitions, lag, age]
        # group -> [lag, drain rate, oldest unacked record age, least seconds since progress
        # of its share-partitions with lag (0 when none has lag)]
        drain: dict[str, list[float]] = {}
        figures = self.share_figures
        live = b.shares.partitions.partitions()
        series = 0
        for key, sp in sorted(live.items(),
                              key=lambda kv: (kv[0].group_id, str(kv[0].topic_id),
                                              kv[0].partition)):
            topic = b.topics.by_id(key.topic_id)
            if topic is None:
                continue
            series += 1
            if series > MAX_SHARE_PARTITION_SERIES:
                continue
            m = sp.metrics()
            labels = (key.group_id, topic.name, str(key.partition))
            d = drain.setdefault(key.group_id, [0, 0.0, 0.0, math.inf])
            rate = sp.drain_rate(now)
            oldest = sp.oldest_unacked_offset()
            record_age = age_s(now, figures.appended_ms(key.group_id, topic.name,
                                                        key.partition, oldest))
            fams["shoal_share_partition_loaded"].add(labels, 1)
            fams["shoal_share_archived_records_total"].add(labels, m.archived_records)
            fams["shoal_share_dead_lettered_records_total"].add(labels, m.dead_lettered_records)
            fams["shoal_share_dead_letter_skipped_records_total"].add(
                labels, m.dead_letter_skipped_records)
            fams["shoal_share_partition_archiving_records"].add(labels, m.archiving_records)
            fams["shoal_share_partition_oldest_unacked_append_age_seconds"].add(labels,
                                                                                 record_age)
            fams["shoal_share_partition_drain_rate"].add(labels, rate)
            d[1] += rate
            d[2] = max(d[2], record_age)
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
                idle = since_progress_s(lag, now, sp.last_progress_ms())
                fams["shoal_share_partition_seconds_since_progress"].add(labels, idle)
                fams["shoal_share_partition_drain_eta_seconds"].add(labels,
                                                                    drain_eta_s(lag, rate, idle))
                if lag:
                    d[3] = min(d[3], idle)
                agg[1] += lag
                d[0] += lag
            at = m.oldest_unacked_acquired_at_ms
            age = max(0.0, (now - at) / 1000) if at is not None else 0.0
            fams["shoal_share_partition_oldest_acquired_age_seconds"].add(labels, age)
            agg[2] = max(agg[2], age)
            fams["shoal_share_acquisition_lock_timeouts_total"].add(labels, m.lock_timeouts)
            fams["shoal_share_delivery_limit_archived_records_total"].add(
                labels, m.delivery_limit_archives)
            for t in AckType:
                acks.add((*labels, t.name.lower()), m.acks.get(t, 0))
        for pp in figures.persisted(live):
            series += 1
            if series > MAX_SHARE_PARTITION_SERIES:
                break
            labels = (pp.key.group_id, pp.topic, str(pp.partition))
            lg = b.logs.get(pp.topic, pp.partition)
            if lg is None:
                continue
            agg = per_group.setdefault(pp.key.group_id, [0, 0, 0.0])
            d = drain.setdefault(pp.key.group_id, [0, 0.0, 0.0, math.inf])
            record_age = age_s(now, figures.appended_ms(pp.key.group_id, pp.topic,
                                                        pp.partition, pp.first_unacked))
            fams["shoal_share_partition_loaded"].add(labels, 0)
            fams["shoal_share_partition_start_offset"].add(labels, pp.start_offset)
            fams["shoal_share_partition_end_offset"].add(labels, pp.start_offset)
            for name in ("shoal_share_partition_in_flight_records",
                         "shoal_share_partition_in_flight_batches",
                         "shoal_share_partition_acquired_records",
                         "shoal_share_acquisition_lock_timeouts_total",
                         "shoal_share_delivery_limit_archived_records_total",
                         "shoal_share_archived_records_total",
                         "shoal_share_dead_lettered_records_total",
                         "shoal_share_dead_letter_skipped_records_total",
                         "shoal_share_partition_archiving_records",
                         "shoal_share_partition_oldest_acquired_age_seconds",
                         "shoal_share_partition_drain_rate"):
                fams[name].add(labels, 0)
            for t in AckType:
                acks.add((*labels, t.name.lower()), 0)
            fams["shoal_share_partition_oldest_unacked_append_age_seconds"].add(labels,
                                                                                 record_age)
            d[2] = max(d[2], record_age)
            lag = share_lag(lg.log_end_offset, pp.start_offset, pp.delivery_complete_count)
            if lag >= 0:
                fams["shoal_share_partition_lag"].add(labels, lag)
                idle = since_progress_s(lag, now, None)  # not loaded: nobody fetches it here
                fams["shoal_share_partition_seconds_since_progress"].add(labels, idle)
                fams["shoal_share_partition_drain_eta_seconds"].add(labels,
                                                                    drain_eta_s(lag, 0.0, idle))
                agg[1] += lag
                d[0] += lag
        dropped = max(0, series - MAX_SHARE_PARTITION_SERIES)
        yield Family("shoal_share_partition_series_dropped", "gauge",
                     "Share-partitions left out of the per-partition share metrics this scrape "
                     f"(more than {MAX_SHARE_PARTITION_SERIES}).", samples=[((), dropped)])
        group_record_age = Family(
            "shoal_share_group_oldest_unacked_append_age_seconds", "gauge",
            "Largest shoal_share_partition_oldest_unacked_append_age_seconds of the group.",
            ("group",))
        group_rate = Family("shoal_share_group_drain_rate", "gauge",
                            "Sum of shoal_share_partition_drain_rate over the group.", ("group",))
        group_eta = Family("shoal_share_group_drain_eta_seconds", "gauge",
                           "shoal_share_group_lag / shoal_share_group_drain_rate (0 without "
                           "lag, +Inf when records wait and no share-partition of the group "
                           "completed one in the last minute).", ("group",))
        group_idle = Family("shoal_share_group_seconds_since_progress", "gauge",
                            "Least shoal_share_partition_seconds_since_progress of the group's "
                            "share-partitions with lag (0 when none has lag).", ("group",))
        for group, (lag, rate, record_age, idle) in sorted(drain.items()):
            idle = idle if lag > 0 else 0.0
            group_record_age.add((group,), record_age)
            group_rate.add((group,), rate)
            group_eta.add((group,), drain_eta_s(int(lag), rate, idle))
            group_idle.add((group,), idle)
        yield group_record_age
        yield group_rate
        yield group_eta
        yield group_idle
        for group, (n, lag, age) in sorted(per_group.items()):
            loaded.add((group,), n)
            group_lag.add((group,), lag)
            group_age.add((group,), age)
        yield loaded
        yield from fams.values()
        yield acks
        yield group_lag
        yield group_age


    def _collect_consumer_groups(self) -> Iterable[Family]:
        """Classic and consumer-type groups this broker coordinates: state, members, and per
        partition the committed offset and lag (log end offset - committed offset, as
        kafka-consumer-groups.sh --describe computes LAG)."""
        b = self._broker
        if not b.started:
            return
        groups = b.share_groups.consumer_groups()
        counts: dict[tuple[str, str], int] = {}
        state = Family("shoal_consumer_group_state", "gauge",
                       "1 for the state each consumer group is in.", ("group", "type", "state"))
        members = Family("shoal_consumer_group_members", "gauge",
                         "Members of each consumer group.", ("group", "type"))
        committed = Family("shoal_consumer_group_committed_offset", "gauge",
                           "Committed offset of each consumer-group partition.",
                           _PARTITION_LABELS)
        lag = Family("shoal_consumer_group_lag", "gauge",
                     "Records after the committed offset: log end offset - committed offset.",
                     _PARTITION_LABELS)
        lag_sum = Family("shoal_consumer_group_lag_sum", "gauge",
                         "Sum of shoal_consumer_group_lag over the group's partitions.",
                         ("group",))
        series = 0
        for g in groups:
            counts[(g.group_type, g.state)] = counts.get((g.group_type, g.state), 0) + 1
            state.add((g.group_id, g.group_type, g.state), 1)
            if g.members is not None:
                members.add((g.group_id, g.group_type), g.members)
            total = 0
            for o in g.offsets:
                lg = b.logs.get(o.topic, o.partition)
                if lg is None:  # a deleted topic: its offsets wait for retention
                    continue
                behind = max(0, lg.log_end_offset - o.offset)
                total += behind
                if series < MAX_CONSUMER_GROUP_PARTITION_SERIES:
                    labels = (g.group_id, o.topic, str(o.partition))
                    committed.add(labels, o.offset)
                    lag.add(labels, behind)
                    series += 1
                elif not self._series_capped:
                    self._series_capped = True
                    log.warning("more than %d consumer-group partitions: per-partition "
                                "committed offset and lag series are cut there; "
                                "shoal_consumer_group_lag_sum still covers every group",
                                MAX_CONSUMER_GROUP_PARTITION_SERIES)
            lag_sum.add((g.group_id,), total)
        yield Family("shoal_consumer_groups", "gauge", "Consumer groups by type and state.",
                     ("type", "state"), [(k, n) for k, n in sorted(counts.items())])
        yield state
        yield members
        yield committed
        yield lag
        yield lag_sum



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
