"""``spark.readStream.format("shoal-share")``: a streaming source over a KIP-932 share group.

How a micro-batch flows (members in the driver, at-least-once):

1. ``latestOffset(start, limit)`` first settles the batch Spark is done with. Spark calls it
   only after the previous micro-batch has run and its commit log entry is written, so that
   batch's records are ACCEPTed; Spark's own ``commit(end)`` comes one batch late and never
   for the last batch, so it is only a backstop. Then it takes the next batch: the records of
   one poll of the share group (one ShareFetch, at most ``maxRecordsPerBatch``), and moves the
   offset to ``{"batch": n + 1}``; if no poll brought records, the offset stays put.
   Polling overlaps with Spark's work: the query runs two members (``prefetch=true``), and
   while Spark processes one member's batch the other has already polled the next. The
   ACCEPT of a finished batch runs in the background, followed by that member's next poll.
2. ``partitions(start, end)`` ships the held records to the executors, undecoded: each
   input partition gets whole topic-partitions as the broker sent them (v2 record batches and
   the acquired ranges), inline or from the driver's batch server (``transport``); ``read``
   decodes them into Arrow batches there (``pipeline/decode.py``), so the driver does no
   per-record work. While Spark works on them the
   consumer's lock keeper RENEWs their acquisition locks.
3. When the query stops or fails, the held records are RELEASEd and the members leave the
   group, so the records go to the next consumer at once. Spark does not call ``stop()`` when
   it terminates the runner process, so a SIGTERM handler does the same.

``acknowledge=false`` (a dry run) never accepts anything. Releasing a finished batch would hand
its records straight back to the next poll, spending a delivery attempt each time until the
group archives them, so instead the member that holds a finished batch is parked: it keeps the
records locked (renewing them) and the next batch is polled by a new member. Everything is
released when the query stops, so a dry run costs each record it saw one delivery attempt. The
group's in-flight limit (``share.partition.max.record.locks`` per partition) bounds how much a
dry run can read.

Offsets are a micro-batch counter, not Kafka offsets: a share group has no position for the
query to rewind to. After a restart, Spark re-runs a batch that was planned but not committed;
this source cannot re-read it (its records were released to the group, or locked to the dead
member until their locks expire), so the replayed batch is refilled with one fresh poll of the
group. It holds whatever the group hands out then, which includes the failed batch's records
once they are back (at once after a clean stop; after the lock duration if the driver died
with ``kill -9``), now with ``deliveryCount`` one higher. It may hold other records or none.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, wait
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from pipeline.options import SourceOptions
from pipeline.rows import SCHEMA_DDL

log = logging.getLogger("pipeline.share_source")

# How long Trigger.AvailableNow waits for a partition assignment before empty polls by members
# without one count as "no data" (a topic with no partitions for this query).
_ASSIGNMENT_GRACE_S = 30.0


class DataLossError(RuntimeError):
    """The broker refused to accept a committed batch: its records' locks had lapsed."""


class ShareInputPartition(InputPartition):
    """One Spark task's records as a ``pipeline.decode.pack`` payload (built on the consumer's
    thread right after the poll): inline, or where to fetch it (``transport=tcp``;
    pipeline/transport.py)."""

    def __init__(self, payload: bytes | None, address: tuple[str, int, bytes, int] | None) -> None:
        super().__init__(None)
        self.payload = payload
        self.address = address

    def __repr__(self) -> str:
        where = "inline" if self.payload is not None else f"from {self.address}"
        return f"ShareInputPartition({where})"


class ShareSource(DataSource):
    """The ``shoal-share`` data source (register with ``spark.dataSource.register``)."""

    @classmethod
    def name(cls) -> str:
        return "shoal-share"

    def schema(self) -> str:
        return SCHEMA_DDL

    def streamReader(self, schema: StructType) -> ShareStreamReader:
        return ShareStreamReader(SourceOptions.parse(self.options))


class ShareStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Driver side: the share-group members of one streaming query (see the module doc)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._members: list[Any] = []  # pipeline.bridge.ConsumerThread, created on first use
        self._parked: list[Any] = []  # dry run: members holding finished batches until stop
        self._batch: Any = None  # the member whose held records are Spark's current batch
        self._held_end: int | None = None  # the batch counter that batch ends at
        self._available_now = False
        self._drained = False
        self._quiet_since: float | None = None  # AvailableNow: since when polls came back empty
        self._server: Any = None  # transport=tcp: pipeline.transport.BatchServer
        self._token: bytes | None = None  # the published batch

    # Spark pickles a fresh reader to executors for read(); only the options travel.
    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    # -- offsets --------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, int]:
        # Only the driver's source runner calls this, once, as a fresh query starts: join the
        # group and poll now, so the first batch is ready when Spark first asks for one
        # (Spark plans the query meanwhile). The planner processes that also create a
        # reader never call it.
        for m in self._pool():
            if m.pending is None and not m.held:
                m.cycle(None, self.options.poll_timeout_ms)
        return {"batch": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.options.max_records_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        # A queue has no "latest offset" to stop at: Trigger.AvailableNow ends once polls have
        # come back empty for availableNowQuietMs (see _next_ready).
        self._available_now = True

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        if not isinstance(limit, (ReadMaxRows, ReadAllAvailable)):
            log.info("read limit %r is not supported; polling up to maxRecordsPerBatch", limit)
        self._settle_through(start["batch"])
        if self._batch is not None or self._drained:
            return start
        member = self._next_ready()
        if member is None:
            if self._available_now:
                self._drained = True
            return start
        self._batch = member
        self._held_end = start["batch"] + 1
        return {"batch": self._held_end}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        if start["batch"] >= end["batch"]:
            return []
        if self._held_end != end["batch"]:
            # A batch from the offset log that this process never polled: Spark is replaying
            # an uncommitted batch after a restart. Refill it from the group (module doc).
            if self._batch is not None:  # a batch Spark never asked to commit: give it back
                self._batch.cycle(_ack("RELEASE"), self.options.poll_timeout_ms)
            self._batch = self._next_ready()
            self._held_end = end["batch"]
            log.warning("share group %s: replaying micro-batch ending at %d after a restart "
                        "with %d records polled now (the records of the original attempt "
                        "come back through the group)", self.options.group_id, end["batch"],
                        self._batch.held_records if self._batch else 0)
        if self._batch is None or not self._batch.held:
            return []
        streams: list[list[bytes]] = self._batch.prepared
        if self._server is None:
            return [ShareInputPartition(b"".join(s), None) for s in streams]
        if self._token is not None:
            self._server.retract(self._token)
        self._token = self._server.publish(streams)
        host, port = self._server.host, self._server.port
        return [ShareInputPartition(None, (host, port, self._token, i))
                for i in range(len(streams))]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from pipeline.decode import to_batches  # lazy: the executor side only
        from pipeline.transport import fetch  # lazy: the executor side only

        assert isinstance(partition, ShareInputPartition)
        if partition.payload is not None:
            yield from to_batches(partition.payload)
        else:
            assert partition.address is not None
            yield from to_batches(fetch(*partition.address))

    def commit(self, end: dict[str, int]) -> None:
        self._settle_through(end["batch"])

    def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server, self._token = None, None
        members = [*self._members, *self._parked]
        self._members, self._parked, self._batch, self._held_end = [], [], None, None
        held = sum(m.held_records for m in members)
        for member in members:
            member.close()
        if members:
            log.info("share group %s: source stopped; released %d held records",
                     self.options.group_id, held)

    # -- internals --------------------------------------------------------------------------------

    def _settle_through(self, done: int) -> None:
        """Acknowledge the current batch if Spark has finished it (its end is at most ``done``).

        The ACCEPT runs in the background, followed by that member's next poll; a refusal
        surfaces when the cycle's result is taken (``_next_ready``).
        """
        if self._held_end is None or self._held_end > done:
            return
        member, self._batch, self._held_end = self._batch, None, None
        if self._token is not None:
            self._server.retract(self._token)
            self._token = None
        if member is None:
            return
        if self.options.acknowledge:
            member.cycle(_ack("ACCEPT"), self.options.poll_timeout_ms)
            return
        self._members.remove(member)
        self._parked.append(member)
        fresh = self._new_member()
        self._members.append(fresh)
        fresh.cycle(None, self.options.poll_timeout_ms)

    def _next_ready(self) -> Any:
        """A member (not the current batch's) holding polled records, or None for "no new
        data". Members whose poll came back empty poll again in the background.

        Without Trigger.AvailableNow, "no new data" is one round of empty polls. With it, the
        answer ends the query, so it takes empty polls for ``availableNowQuietMs`` in a row by
        members that have partitions assigned (a new member's first polls may predate its
        assignment, and share-partitions that are still initialising return nothing).
        """
        poll_ms = self.options.poll_timeout_ms
        candidates = [m for m in self._pool() if m is not self._batch]
        empty: set[int] = set()
        any_assigned = False
        deadline = time.monotonic() + poll_ms / 1000 + 90
        while True:
            for m in candidates:
                if m.pending is None and not m.held:
                    m.cycle(None, poll_ms)
                if m.pending is not None and m.pending.done():
                    result = m.take(0)
                    self._check_refused(result.refused)
                    if not m.held:
                        empty.add(id(m))
                        any_assigned = any_assigned or result.assigned
                        m.cycle(None, poll_ms)
                if m.pending is None and m.held:
                    self._quiet_since = None
                    return m
            now = time.monotonic()
            if len(empty) == len(candidates):
                if not self._available_now:
                    return None
                if self._quiet_since is None:
                    self._quiet_since = now
                quiet = now - self._quiet_since
                if any_assigned and quiet >= self.options.available_now_quiet_ms / 1000:
                    return None
                if quiet >= _ASSIGNMENT_GRACE_S:  # never assigned: no partitions for us
                    return None
                empty.clear()
                any_assigned = False
                deadline = now + poll_ms / 1000 + 90
            if now > deadline:
                raise TimeoutError(f"share group {self.options.group_id}: no poll finished in "
                                   f"{poll_ms / 1000 + 90:.0f} s; is the broker at "
                                   f"{self.options.bootstrap_servers} up?")
            wait([m.pending for m in candidates if m.pending is not None],
                 timeout=1.0, return_when=FIRST_COMPLETED)

    def _check_refused(self, refused: dict[str, int]) -> None:
        if not refused:
            return
        lost = sum(refused.values())
        msg = (f"share group {self.options.group_id}: the broker refused to accept {lost} "
               f"records of a committed micro-batch ({refused}); their acquisition locks had "
               "lapsed, so they may be delivered again or archived. Keep renewLocks=true, "
               "lower maxRecordsPerBatch, or raise the group's share.record.lock.duration.ms")
        if self.options.fail_on_data_loss:
            raise DataLossError(msg + " (failOnDataLoss=false logs this and goes on)")
        log.warning(msg)

    def _pool(self) -> list[Any]:
        if self.options.transport == "tcp" and self._server is None:
            from pipeline.transport import BatchServer  # lazy: transport=tcp only

            self._server = BatchServer(self.options.driver_host)
        if not self._members:
            # The members connect at the same time: the query's first batch waits for them.
            members = [self._new_member(wait=False)
                       for _ in range(2 if self.options.prefetch else 1)]
            try:
                for m in members:
                    m.wait_started()
            except BaseException:
                for m in members:
                    m.close()
                raise
            self._members = members
            _release_on_sigterm(self)
        return self._members

    def _new_member(self, wait: bool = True) -> Any:
        # Lazy: the driver's consumers only; executors never load the asyncio client.
        from pipeline.bridge import ConsumerThread
        from pipeline.decode import pack_pieces

        o = self.options
        parts = o.num_partitions
        return ConsumerThread(o.bootstrap_servers, o.group_id, o.topics,
                              max_records=o.max_records_per_batch, renew_locks=o.renew_locks,
                              client_id=o.client_id, security=dict(o.security),
                              prepare=lambda held: [pack_pieces([(p.topic, p.partition, p.acquired, p.data)
                                                                for p in g])
                                                   for g in deal(held, parts)],
                              wait=wait)


def _ack(name: str) -> Any:
    """``client.AcknowledgeType[name]``. The consumer side of ``client`` (aiokafka) is imported
    on first use: the executors and Spark's planner processes import this module too, and
    never use it."""
    from client import AcknowledgeType  # lazy: off the executors' import path

    return AcknowledgeType[name]


def deal(held: Sequence[Any], parts: int) -> list[list[Any]]:
    """Group a batch's partitions (``client.RawPartition``) into Spark partitions.

    ``parts == 0``: one Spark partition per topic-partition (Kafka-source style: each keeps
    its records in offset order). Otherwise the topic-partitions are dealt round-robin into
    ``parts`` Spark partitions, with empty ones dropped.
    """
    if not parts or parts >= len(held):
        return [[p] for p in held]
    return [list(held[i::parts]) for i in range(parts)]


def _release_on_sigterm(reader: ShareStreamReader) -> None:
    """Spark ends the source runner with SIGTERM and never calls ``stop()``: do it here.

    The JVM may signal more than once; later signals are ignored so they cannot cut the release
    short. Raising SystemExit afterwards unwinds the runner's command loop as a normal exit.
    """
    if threading.current_thread() is not threading.main_thread():
        return

    def on_sigterm(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            reader.stop()
        finally:
            raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_sigterm)
