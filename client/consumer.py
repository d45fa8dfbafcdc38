"""``ShareConsumer``: an asyncio consumer for KIP-932 share groups.

Names and semantics follow Kafka's ``KafkaShareConsumer``; the async shape follows aiokafka
(``await start()``, ``await getmany(timeout_ms=...)``, ``async with``, ``async for``).

Tasks (each owned by the consumer and cancelled by ``close``):

- the heartbeat task: ShareGroupHeartbeat to the group coordinator every
  ``HeartbeatIntervalMs`` (sooner while joined without partitions, so a fresh member gets its
  partitions quickly), and at once after ``subscribe``/``unsubscribe``;
- at most one fetch task per broker (``client.fetcher``): a ShareFetch to each partition leader,
  all in parallel, with the acknowledgements of that broker's partitions piggybacked. A fetch
  still running when ``getmany`` returns stays running; its records are handed out by a later
  ``getmany``;
- optionally the lock keeper (``renew_locks=True``): while the application holds records of the
  current batch without a final acknowledgement, it RENEWs their acquisition locks at a third of
  the lock duration (ShareAcknowledge v2 with IsRenewAck), so slow processing does not lead to
  redelivery.

Requests on one broker's share session are serialised by a per-broker lock, because every
request must carry the session's next epoch (``client.session``). The sessions, their locks and
the acknowledgements not sent yet are kept by ``client.ack_sender``, which also sends
ShareAcknowledge.

Acknowledgement results (per partition: None or a ``KafkaError``) are passed to the
``acknowledgement_commit_callback`` whenever they arrive (piggybacked on a fetch, commit_sync,
commit_async, close, unsubscribe) and returned by ``commit_sync``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Self, TypeVar

from client.ack_sender import AckCallback, AckResults, AckSender, PendingAcks
from client.acks import InFlight
from client.cluster import Cluster
from client.errors import (
    ConsumerClosedError,
    IllegalStateError,
    KafkaError,
    UnsupportedVersionError,
)
from client.fetcher import ACQUIRE_MODES, Fetcher
from client.membership import SHARE_GROUP_HEARTBEAT, Membership
from client.records import AcknowledgeType, RawPartition, ShareRecord, TopicPartition
from client.security import SecuritySettings
from client.session import SHARE_FETCH, FetchParams

log = logging.getLogger("client.share_consumer")

__all__ = ["ShareConsumer"]

T = TypeVar("T")


class ShareConsumer:
    """A member of a share group.

    Args:
        bootstrap_servers: ``"host:port,..."`` or a list of them.
        group_id: the share group.
        acknowledgement_mode: ``"implicit"`` (records of a batch are accepted by the next
            ``getmany``/``commit_*``/``close``) or ``"explicit"`` (``acknowledge`` every record).
        max_poll_records: ShareFetch MaxRecords/BatchSize; a hard cap in ``record_limit`` mode.
        acquire_mode: ``"batch_optimized"`` or ``"record_limit"`` (ShareFetch v2, KIP-1206).
        renew_locks: run the lock keeper (RENEW for records still being processed).
        raw_records: hand batches out undecoded (``getmany_raw``: one ``RawPartition`` per
            partition, the broker's record batches and the acquired ranges), for a caller that
            decodes them elsewhere; needs explicit mode, and ``acknowledge_all`` acknowledges
            whole acquired ranges (gaps included). ``getmany`` is not available then.
        acknowledgement_commit_callback: ``cb(offsets_by_partition, exception_or_None)``.
        max_share_version: highest ShareFetch/ShareAcknowledge version to use (2; 1 for tests).
        config: Kafka security properties by their Kafka names, as a confluent-kafka config
            holds them: ``{"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": ..., "sasl.password": ..., "ssl.ca.location": ...}``
            (``sasl.jaas.config``, ``ssl.certificate.location``, ``ssl.key.location``,
            ``ssl.key.password``, ``ssl.endpoint.identification.algorithm`` too; see
            ``client/security.py``).
        security_protocol, sasl_mechanism, sasl_username, sasl_password, ssl_ca_location,
        ssl_certificate_location, ssl_key_location, ssl_key_password,
        ssl_endpoint_identification_algorithm: the same settings as keywords; a keyword wins
            over ``config``.
        security: ready-made ``SecuritySettings`` (instead of the two above).

    Raises:
        ValueError: a bad option (``SecurityConfigError`` for a security setting).
    """

    def __init__(self, bootstrap_servers: str | list[str], group_id: str, *,
                 acknowledgement_mode: str = "implicit", max_poll_records: int = 500,
                 acquire_mode: str = "batch_optimized", client_id: str = "shoal-share-consumer",
                 fetch_max_wait_ms: int = 500, fetch_min_bytes: int = 1,
                 fetch_max_bytes: int = 50 * 1024 * 1024, request_timeout_ms: int = 30_000,
                 renew_locks: bool = False, raw_records: bool = False,
                 rack_id: str | None = None,
                 acknowledgement_commit_callback: AckCallback | None = None,
                 max_share_version: int = 2, config: Mapping[str, Any] | None = None,
                 security_protocol: str | None = None, sasl_mechanism: str | None = None,
                 sasl_username: str | None = None, sasl_password: str | None = None,
                 ssl_ca_location: str | None = None,
                 ssl_certificate_location: str | None = None,
                 ssl_key_location: str | None = None, ssl_key_password: str | None = None,
                 ssl_endpoint_identification_algorithm: str | None = None,
                 security: SecuritySettings | None = None) -> None:
        if acknowledgement_mode not in ("implicit", "explicit"):
            raise ValueError(f"acknowledgement_mode must be implicit or explicit, not "
                             f"{acknowledgement_mode!r}")
        if acquire_mode not in ACQUIRE_MODES:
            raise ValueError(f"acquire_mode must be one of {sorted(ACQUIRE_MODES)}, "
                             f"not {acquire_mode!r}")
        if max_poll_records < 1:
            raise ValueError("max_poll_records must be at least 1")
        if raw_records and acknowledgement_mode != "explicit":
            raise ValueError("raw_records needs acknowledgement_mode='explicit'")
        self._explicit = acknowledgement_mode == "explicit"
        self._renew_locks = renew_locks
        self._max_share_version = max_share_version
        if security is None:
            security = SecuritySettings.from_options(
                config, security_protocol=security_protocol, sasl_mechanism=sasl_mechanism,
                sasl_username=sasl_username, sasl_password=sasl_password,
                ssl_ca_location=ssl_ca_location, ssl_certificate_location=ssl_certificate_location,
                ssl_key_location=ssl_key_location, ssl_key_password=ssl_key_password,
                ssl_endpoint_identification_algorithm=ssl_endpoint_identification_algorithm)
        elif config is not None:
            raise ValueError("pass security settings as security= or as config=, not both")
        self._cluster = Cluster(bootstrap_servers, client_id, request_timeout_ms, security)
        self._membership = Membership(group_id, rack_id=rack_id)
        self._group_id = group_id
        self._coordinator: int | None = None
        self._acks = AckSender(self._cluster, group_id, self._membership.member_id,
                               max_share_version, acknowledgement_commit_callback)
        self._sessions = self._acks.sessions  # tests read the sessions here
        params = FetchParams(fetch_max_wait_ms, fetch_min_bytes, fetch_max_bytes,
                             max_poll_records, max_poll_records, ACQUIRE_MODES[acquire_mode])
        self._fetcher = Fetcher(self._cluster, self._membership, self._acks, params,
                                on_fatal=self._set_fatal, refresh_metadata=self._refresh_metadata,
                                raw=raw_records)
        self._current = InFlight()
        self._fatal: KafkaError | None = None
        self._assignment_event = asyncio.Event()
        self._hb_wake = asyncio.Event()
        self._hb_task: asyncio.Task[None] | None = None
        self._keeper_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._started = False
        self._closed = False

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect to the cluster and start the heartbeat task.

        Raises:
            ConnectionError: no bootstrap server answered.
            UnsupportedVersionError: the broker has no share-group RPCs.
        """
        if self._closed:
            raise ConsumerClosedError("the consumer is closed")
        await self._cluster.bootstrap()
        conn = await self._cluster.any_connection()
        conn.version(SHARE_FETCH, 1, self._max_share_version)
        conn.version(SHARE_GROUP_HEARTBEAT, 1, 1)
        self._started = True
        self._hb_task = asyncio.create_task(self._heartbeat_loop(), name="shoal-share-heartbeat")
        if self._renew_locks:
            self._keeper_task = asyncio.create_task(self._keeper_loop(), name="shoal-lock-keeper")

    async def close(self) -> None:
        """Acknowledge what is due, close every share session, leave the group.

        In implicit mode the current batch is accepted; in explicit mode records without an
        acknowledgement are released by the broker when the session closes.
        """
        if self._closed or not self._started:
            self._closed = True
            await self._cluster.close()
            return
        self._closed = True
        inflight = self._fetcher.inflight
        for task in (self._keeper_task, *self._background):
            if task is not None:
                task.cancel()
        for task in inflight.values():
            task.cancel()
        await asyncio.gather(*inflight.values(), *self._background,
                             *(t for t in [self._keeper_task] if t), return_exceptions=True)
        inflight.clear()
        if not self._explicit:
            self._current.acknowledge_all(AcknowledgeType.ACCEPT)
        self._take_current_acks()
        try:
            await self._acks.send(self._acks.pending_for(None), close=True)
        except (TimeoutError, ConnectionError, OSError, KafkaError) as e:
            log.warning("closing share sessions failed: %s", e)
        self._current.replace(())
        await self._leave()
        if self._hb_task is not None:
            self._hb_task.cancel()
            await asyncio.gather(self._hb_task, return_exceptions=True)
        await self._cluster.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    def __aiter__(self) -> AsyncIterator[ShareRecord]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ShareRecord]:
        while not self._closed:
            batch = await self.getmany(timeout_ms=1000)
            for records in batch.values():
                for r in records:
                    yield r

    # -- subscription -----------------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        """Subscribe to topics (replacing the previous subscription); joins on the next heartbeat.

        Raises:
            IllegalStateError: the consumer is closed.
        """
        self._check_open()
        names = tuple(sorted(set(topics)))
        if not names:
            self.unsubscribe()
            return
        self._membership.subscribe(names)
        self._hb_wake.set()

    def subscription(self) -> frozenset[str]:
        return frozenset(self._membership.subscription)

    def unsubscribe(self) -> None:
        """Drop the subscription and leave the group (pending acknowledgements are sent first)."""
        self._check_open()
        if not self._membership.subscription:
            return
        if not self._explicit:
            self._current.acknowledge_all(AcknowledgeType.ACCEPT)
        self._take_current_acks()
        self._current.replace(())
        self._fetcher.buffer.clear()
        self._membership.subscription = ()
        task = asyncio.create_task(self._unsubscribe_flush())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _unsubscribe_flush(self) -> None:
        for t in list(self._fetcher.inflight.values()):
            await asyncio.gather(t, return_exceptions=True)
        await self._acks.send(self._acks.pending_for(None), close=True)
        await self._leave()

    def assignment(self) -> frozenset[TopicPartition]:
        """Partitions the coordinator assigned to this member (known topics only)."""
        names = self._cluster.topic_names
        return frozenset(TopicPartition(names[tid], p)
                         for tid, parts in self._membership.assignment.items() if tid in names
                         for p in parts)

    @property
    def member_id(self) -> str:
        return self._membership.member_id

    @property
    def acquisition_lock_timeout_ms(self) -> int | None:
        """The lock duration the broker reported with the last fetch (None before any)."""
        return self._acks.lock_timeout_ms

    # -- consuming ------------------------------------------------------------------------------

    async def getmany(self, timeout_ms: int = 0) -> dict[TopicPartition, list[ShareRecord]]:
        """Wait up to ``timeout_ms`` for records; returns ``{partition: records}`` (maybe empty).

        Settles the previous batch first: implicit mode accepts it; explicit mode requires every
        record to have been acknowledged. If RENEW acknowledgements are pending, they are sent
        and nothing new is fetched (a renew-only poll returns no records).

        Raises:
            IllegalStateError: not subscribed, or (explicit) unacknowledged records.
            KafkaError: a fatal group or fetch error.
        """
        if self._fetcher.raw:
            raise IllegalStateError("a raw_records consumer polls with getmany_raw()")
        return await self._poll(timeout_ms, self._hand_out, {})

    async def getmany_raw(self, timeout_ms: int = 0) -> list[RawPartition]:
        """``getmany`` for a ``raw_records`` consumer: the partitions of the next batch,
        undecoded (maybe none). The same settling rules apply.

        Raises:
            IllegalStateError: not a raw_records consumer, not subscribed, or unacknowledged
                offsets of the previous batch.
            KafkaError: a fatal group or fetch error.
        """
        if not self._fetcher.raw:
            raise IllegalStateError("getmany_raw() needs raw_records=True")
        return await self._poll(timeout_ms, self._hand_out_raw, [])

    async def _poll(self, timeout_ms: int, hand_out: Callable[[], T], nothing: T) -> T:
        self._check_open()
        if not self._membership.subscription:
            raise IllegalStateError("getmany without a subscription")
        self._raise_fatal()
        if self._current.has_pending(renew=True):
            self._take_current_acks()
            await self._acks.send(self._acks.pending_for(None), renew=True)
            return nothing
        if self._explicit:
            missing = self._current.unacknowledged_offsets()
            if missing:
                tp, offsets = next(iter(missing.items()))
                raise IllegalStateError(
                    f"explicit acknowledgement mode: {sum(map(len, missing.values()))} records "
                    f"of the previous batch are not acknowledged (first: {tp.topic}-"
                    f"{tp.partition}@{offsets[0]})")
        else:
            self._current.acknowledge_all(AcknowledgeType.ACCEPT)
        self._take_current_acks()
        self._current.replace(())
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            if self._fetcher.buffer:
                return hand_out()
            remaining = deadline - time.monotonic()
            await self._fetcher.start(remaining)
            if not self._fetcher.inflight:
                if remaining <= 0:
                    return hand_out()
                self._assignment_event.clear()
                try:
                    async with asyncio.timeout(min(remaining, 0.1)):
                        await self._assignment_event.wait()
                except TimeoutError:
                    pass
                continue
            await self._fetcher.wait(remaining)
            self._raise_fatal()
            if not self._fetcher.buffer and time.monotonic() >= deadline:
                return hand_out()

    def acknowledge(self, record: ShareRecord,
                    type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Acknowledge a record of the current batch (explicit mode).

        ACCEPT, RELEASE and REJECT are final; RENEW extends the lock and the record must still
        be acknowledged finally later. Sent with the next getmany/commit_*/close.

        Raises:
            IllegalStateError: implicit mode, the record is not from the current batch, or it
                has an unsent final acknowledgement of another type (a RENEW cannot undo a
                REJECT).
            UnsupportedVersionError: RENEW on a broker without ShareAcknowledge v2.
        """
        self._check_open()
        if not self._explicit:
            raise IllegalStateError("acknowledge() needs acknowledgement_mode='explicit'")
        kind = AcknowledgeType(type)
        if kind == AcknowledgeType.GAP:
            raise ValueError("GAP is not an acknowledgement an application can give")
        if kind == AcknowledgeType.RENEW and self._acks.share_version() < 2:
            raise UnsupportedVersionError("RENEW needs ShareAcknowledge v2 (KIP-1222)")
        self._current.acknowledge(record, kind)

    def acknowledge_all(self, type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Acknowledge, with ``type``, every record of the current batch that has no final
        acknowledgement yet (explicit mode): ``acknowledge`` on each of them, in one call.

        Raises:
            IllegalStateError: implicit mode.
            UnsupportedVersionError: RENEW on a broker without ShareAcknowledge v2.
        """
        self._check_open()
        if not self._explicit:
            raise IllegalStateError("acknowledge_all() needs acknowledgement_mode='explicit'")
        kind = AcknowledgeType(type)
        if kind == AcknowledgeType.GAP:
            raise ValueError("GAP is not an acknowledgement an application can give")
        if kind == AcknowledgeType.RENEW and self._acks.share_version() < 2:
            raise UnsupportedVersionError("RENEW needs ShareAcknowledge v2 (KIP-1222)")
        self._current.acknowledge_all(kind)

    async def commit_sync(self, timeout_ms: int | None = None) -> AckResults:
        """Send every pending acknowledgement now and wait: ``{partition: None | error}``.

        Raises:
            asyncio.TimeoutError: no answer within ``timeout_ms``.
        """
        self._check_open()
        if not self._explicit:
            self._current.acknowledge_all(AcknowledgeType.ACCEPT)
        renew = self._current.has_pending(renew=True)
        self._take_current_acks()
        coro = self._acks.send(self._acks.pending_for(None), renew=renew)
        if timeout_ms is None:
            return await coro
        return await asyncio.wait_for(coro, timeout_ms / 1000)

    def commit_async(self, callback: Callable[[AckResults], Any] | None = None
                     ) -> asyncio.Task[AckResults]:
        """Send pending acknowledgements in the background; ``callback(results)`` when done."""
        self._check_open()
        if not self._explicit:
            self._current.acknowledge_all(AcknowledgeType.ACCEPT)
        renew = self._current.has_pending(renew=True)
        self._take_current_acks()
        task = asyncio.create_task(self._acks.send(self._acks.pending_for(None), renew=renew))
        self._background.add(task)

        def done(t: asyncio.Task[AckResults]) -> None:
            self._background.discard(t)
            if callback is not None and not t.cancelled() and t.exception() is None:
                callback(t.result())
        task.add_done_callback(done)
        return task

    # -- internals: batches and acknowledgements -------------------------------------------------

    def _hand_out(self) -> dict[TopicPartition, list[ShareRecord]]:
        out = self._fetcher.hand_out()
        self._current.replace(r for rs in out.values() for r in rs)
        return out

    def _hand_out_raw(self) -> list[RawPartition]:
        out = self._fetcher.hand_out_raw()
        self._current.replace_raw(out)
        return out

    def _take_current_acks(self) -> None:
        self._acks.add(self._current.take_pending())

    # -- internals: membership ------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        backoff = 0.05
        while not self._closed:
            delay = self._membership.interval_ms / 1000
            try:
                if self._membership.subscription or self._membership.joined:
                    delay = await self._heartbeat_once()
                    backoff = 0.05
            except (TimeoutError, ConnectionError, OSError, KafkaError) as e:
                log.info("share group heartbeat failed (%s); retrying", e)
                self._coordinator = None
                delay, backoff = backoff, min(backoff * 2, 2.0)
            self._hb_wake.clear()
            # asyncio.timeout, not wait_for: on Python 3.11, wait_for can swallow the cancel
            # that close() sends when the event fires at the same moment, and the loop would
            # then run forever.
            try:
                async with asyncio.timeout(delay):
                    await self._hb_wake.wait()
            except TimeoutError:
                pass

    async def _heartbeat_once(self) -> float:
        """One heartbeat; returns seconds until the next."""
        if not self._membership.subscription:
            return self._membership.interval_ms / 1000
        if self._coordinator is None:
            self._coordinator = await self._cluster.find_coordinator(self._group_id)
        conn = await self._cluster.connection(self._coordinator)
        req = self._membership.request()
        resp = await asyncio.wait_for(conn.call(SHARE_GROUP_HEARTBEAT, 1, req),
                                      self._cluster.timeout)
        out = self._membership.on_response(req, resp)
        if out.find_coordinator:
            self._coordinator = None
            return 0.1
        if out.error is not None:
            self._fatal = out.error
        if out.assignment_changed:
            await self._refresh_metadata()
            self._assignment_event.set()
        interval = self._membership.interval_ms / 1000
        if self._membership.joined and not self._membership.assignment:
            # A fresh member: partitions are assigned once their share state is initialized,
            # one heartbeat later; ask again soon instead of after a whole interval.
            return min(interval, 0.2)
        return interval

    async def _leave(self) -> None:
        if not self._membership.joined or self._coordinator is None:
            self._membership.epoch, self._membership.assignment = 0, {}
            return
        self._membership.leaving = True
        try:
            conn = await self._cluster.connection(self._coordinator)
            req = self._membership.request()
            resp = await asyncio.wait_for(conn.call(SHARE_GROUP_HEARTBEAT, 1, req),
                                          self._cluster.timeout)
            self._membership.on_response(req, resp)
        except (TimeoutError, ConnectionError, OSError) as e:
            log.warning("leaving share group %s failed: %s", self._group_id, e)
        finally:
            self._membership.leaving = False
            self._membership.epoch, self._membership.assignment = 0, {}

    async def _refresh_metadata(self) -> None:
        await self._cluster.refresh(list(self._membership.subscription) or [])

    # -- internals: lock keeper -------------------------------------------------------------------

    async def _keeper_loop(self) -> None:
        while True:
            # A third of the lock duration leaves two chances before a lock would expire. Until
            # a fetch reports the duration, wake every second.
            await asyncio.sleep((self._acks.lock_timeout_ms or 3000) / 3000)
            held = self._current.unacknowledged_offsets()
            if not held or self._acks.share_version() < 2:
                continue
            renew: PendingAcks = {tp: dict.fromkeys(offsets, AcknowledgeType.RENEW)
                                  for tp, offsets in held.items()}
            try:
                await self._acks.send(renew, renew=True)
            except (TimeoutError, ConnectionError, OSError, KafkaError) as e:
                log.warning("renewing acquisition locks failed: %s", e)

    # -- small helpers ----------------------------------------------------------------------------

    def _set_fatal(self, exc: KafkaError) -> None:
        self._fatal = exc

    def _check_open(self) -> None:
        if self._closed:
            raise ConsumerClosedError("the consumer is closed")
        if not self._started:
            raise ConsumerClosedError("call `await start()` first")

    def _raise_fatal(self) -> None:
        if self._fatal is not None:
            exc, self._fatal = self._fatal, None
            raise exc
