"""``ReplicaManager``: a cluster member's replicated partitions, led or followed.

Created by ``Broker.start`` in cluster mode (``broker.replication``; None on a single broker).
It follows the cluster view (etcd, ``cluster/view.py``) after every topic or broker change:

- **Leading** a partition (this broker is its leader in the view): a ``PartitionLeader``
  (``leader_state.py``) per partition and leader epoch. Followers' fetches
  (``replica_fetch.py``) report their progress here; the high watermark moves with them, wakes
  readers (consumers, share-partition leaders) and answers acks=all produces waiting for it.
- **Following** it: the partition is fetched from its leader by that broker's
  ``ReplicaFetcher`` (``fetcher.py``); the follower's high watermark is the leader's as last
  heard, capped by the local log end.
- Losing leadership answers every waiting acks=all produce NOT_LEADER_OR_FOLLOWER; the producer
  retries at the new leader (idempotence makes the retry safe).

**ISR changes** are the leader's to propose and etcd's to decide: every ``lag/2`` (and when a
follower catches up) the leader proposes a shrink or an expansion and writes it with
compare-and-swap on the topic's key, if the view still shows it leading under the same epoch.
A write that loses a race, or that etcd does not take, is proposed again later; until one
succeeds the ISR stays as it was, so a leader cut off from etcd never shrinks the ISR on its own
and its high watermark stops where its lost followers left it: it stops acknowledging acks=all.

Partitions with one replica are not tracked: their high watermark is the log end offset.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.config import topic_config_value
from broker.inter_broker import inter_broker_rpc_for
from broker.replication.fetch_session import FetchSessions
from broker.replication.fetcher import ReplicaFetcher
from broker.replication.leader_state import PartitionLeader, replica_wake_key
from cluster.view import NO_LEADER, TopicRecord

if TYPE_CHECKING:
    from broker.app import Broker
    from storage.segment_log import PartitionLog

log = logging.getLogger("shoal.replication")

TP = tuple[str, int]


@dataclass(slots=True)
class Following:
    """A partition this broker follows."""

    leader: int
    leader_epoch: int
    high_watermark: int


class ReplicaManager:
    """See the module doc."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self.node_id = broker.node_id
        self.leaders: dict[TP, PartitionLeader] = {}
        self.follows: dict[TP, Following] = {}
        self._waiters: dict[TP, list[tuple[int, asyncio.Future[ErrorCode]]]] = {}
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self.sessions = FetchSessions(int(broker.config.get(
            "max.incremental.fetch.session.cache.slots")))
        self._isr_wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._rpc: Any = None  # the fetchers' own connections (a long poll blocks its link)
        self.closed = False

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Follow the view from now on (the logs of placed partitions are open)."""
        member = self._broker.member
        assert member is not None
        self._rpc = inter_broker_rpc_for(self._broker)
        member.store.add_listener(self._on_change)
        self._broker.logs.on_append(self._on_append)
        self._broker.logs.high_watermark_of = self.high_watermark
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._isr_loop(), name="ISR changes"))
        self._tasks.append(loop.create_task(self._checkpoint_loop(),
                                            name="high watermark checkpoints"))
        self.sync()

    async def close(self) -> None:
        self.closed = True
        for f in list(self._fetchers.values()):
            await f.stop()
        self._fetchers.clear()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for tp in list(self._waiters):
            self._fail_waiters(tp, ErrorCode.not_leader_or_follower)
        if self._rpc is not None:
            await self._rpc.close()

    @property
    def rpc(self) -> Any:
        return self._rpc

    def _on_change(self, kind: str) -> None:
        if kind in ("topic", "broker") and not self.closed:
            self.sync()

    # -- roles ---------------------------------------------------------------------------------

    def sync(self) -> None:
        """Lead, follow or drop every replicated partition as the view says."""
        member = self._broker.member
        assert member is not None
        view = member.store.view
        now = self._broker.clock.monotonic_ms()
        seen: set[TP] = set()
        for name, record in view.topics.items():
            for i, pa in enumerate(record.partitions):
                if self.node_id not in pa.replicas or len(pa.replicas) < 2:
                    continue
                tp = (name, i)
                lg = self._broker.logs.get(name, i)
                if lg is None:
                    continue
                seen.add(tp)
                if pa.leader == self.node_id:
                    self._lead(tp, lg, pa.leader_epoch, pa.replicas, pa.isr, now)
                else:
                    self._follow(tp, lg, record, pa.leader, pa.leader_epoch)
        for tp in [*self.leaders, *self.follows]:
            if tp not in seen:
                self._drop(tp)

    def _lead(self, tp: TP, lg: PartitionLog, epoch: int, replicas: tuple[int, ...],
              isr: tuple[int, ...], now: int) -> None:
        st = self.leaders.get(tp)
        if st is not None and st.leader_epoch == epoch:
            if st.replicas != replicas or st.isr != isr:
                st.update_assignment(replicas, isr, now)
                self._advance(tp, st, lg)
            return
        self._unfollow(tp)
        lg.appending_epoch = epoch  # every append from now on is stamped with this epoch
        leo = lg.log_end_offset
        hw = min(lg.high_watermark, leo)
        self.leaders[tp] = st = PartitionLeader(self.node_id, epoch, replicas, isr, hw, leo, now)
        log.info("%s-%d: leading at leader epoch %d from offset %d (high watermark %d), "
                 "replicas %s, ISR %s", *tp, epoch, leo, hw, list(replicas), list(isr))
        self._advance(tp, st, lg)

    def _follow(self, tp: TP, lg: PartitionLog, record: TopicRecord, leader: int,
                epoch: int) -> None:
        if tp in self.leaders:
            del self.leaders[tp]
            lg.appending_epoch = -1
            self._fail_waiters(tp, ErrorCode.not_leader_or_follower)
            log.info("%s-%d: no longer the leader (leader epoch %d, leader %s)", *tp, epoch,
                     leader if leader != NO_LEADER else "none")
        f = self.follows.get(tp)
        if f is not None and f.leader == leader and f.leader_epoch == epoch:
            return
        self._unfollow(tp)
        hw = min(lg.high_watermark, lg.log_end_offset)
        self.follows[tp] = Following(leader, epoch, hw)
        if leader == NO_LEADER:
            return
        fetcher = self._fetchers.get(leader)
        if fetcher is None:
            fetcher = self._fetchers[leader] = ReplicaFetcher(self._broker, self, leader)
        fetcher.add(tp, epoch, record.topic_id)
        log.info("%s-%d: following broker %d at leader epoch %d from offset %d", *tp, leader,
                 epoch, lg.log_end_offset)

    def _unfollow(self, tp: TP) -> None:
        f = self.follows.pop(tp, None)
        if f is not None and (fetcher := self._fetchers.get(f.leader)) is not None:
            fetcher.remove(tp)

    def _drop(self, tp: TP) -> None:
        self._unfollow(tp)
        if self.leaders.pop(tp, None) is not None:
            if (lg := self._broker.logs.get(*tp)) is not None:
                lg.appending_epoch = -1
            self._fail_waiters(tp, ErrorCode.not_leader_or_follower)

    def fetcher_idle(self, leader: int) -> None:
        """A fetcher follows nothing more: forget it (it ends by itself)."""
        f = self._fetchers.get(leader)
        if f is not None and not f.partitions:
            del self._fetchers[leader]

    # -- the high watermark --------------------------------------------------------------------

    def high_watermark(self, topic: str, partition: int, lg: PartitionLog) -> int:
        """Where reads of ``topic``-``partition`` stop: the high watermark of a replicated
        partition, the log end offset of one with a single replica."""
        st = self.leaders.get((topic, partition))
        if st is not None:
            return st.high_watermark
        f = self.follows.get((topic, partition))
        if f is not None:
            return f.high_watermark
        return lg.log_end_offset

    def follower_fetched(self, topic: str, partition: int, replica: int, fetch_offset: int,
                         lg: PartitionLog, now_ms: int | None = None) -> None:
        """Follower ``replica`` fetches ``topic``-``partition`` at ``fetch_offset`` (at
        ``now_ms`` on the broker's monotonic clock; read here when not given)."""
        tp = (topic, partition)
        st = self.leaders.get(tp)
        if st is None:
            return
        st.follower_fetched(replica, fetch_offset, lg.log_end_offset,
                            self._broker.clock.monotonic_ms() if now_ms is None else now_ms)
        self._advance(tp, st, lg)
        # Only the fetching replica's own progress can make an expansion due (the high
        # watermark never goes back): an ISR member's fetch needs no check.
        if st.pending_isr is None and replica not in st.isr and st.expand_due():
            self._isr_wake.set()

    def follower_high_watermark(self, tp: TP, leader_hw: int, lg: PartitionLog) -> None:
        """A follower heard the leader's high watermark."""
        f = self.follows.get(tp)
        if f is None:
            return
        hw = min(leader_hw, lg.log_end_offset)
        if hw > f.high_watermark:
            f.high_watermark = hw
            lg.set_high_watermark(hw)

    def follower_truncated(self, tp: TP, lg: PartitionLog) -> None:
        f = self.follows.get(tp)
        if f is not None and f.high_watermark > lg.log_end_offset:
            f.high_watermark = lg.log_end_offset

    def _on_append(self, topic: str, partition: int) -> None:
        tp = (topic, partition)
        st = self.leaders.get(tp)
        if st is not None:
            # Followers' parked fetches wait for new records only (``replica_wake_key``): a
            # high watermark that moves does not end a follower's long poll (as Kafka's
            # DelayedFetch), so waking them for it was a pass over their sessions for nothing.
            self._broker.logs.watch.notify(replica_wake_key(topic, partition))
            if (lg := self._broker.logs.get(topic, partition)) is not None:
                self._advance(tp, st, lg)

    def _advance(self, tp: TP, st: PartitionLeader, lg: PartitionLog) -> None:
        if not st.advance(lg.log_end_offset):
            return
        hw = st.high_watermark
        lg.set_high_watermark(hw)
        self._broker.logs.watch.notify(tp)  # readers bounded by the high watermark
        waiters = self._waiters.get(tp)
        if not waiters:
            return
        keep = []
        enough = st.in_sync_count() >= self._min_isr(tp[0])
        for offset, fut in waiters:
            if offset <= hw:
                if not fut.done():
                    fut.set_result(ErrorCode.none if enough
                                   else ErrorCode.not_enough_replicas_after_append)
            else:
                keep.append((offset, fut))
        if keep:
            self._waiters[tp] = keep
        else:
            del self._waiters[tp]

    # -- acks=all ------------------------------------------------------------------------------

    def tracks(self, topic: str, partition: int) -> bool:
        """Whether this broker leads ``topic``-``partition`` as a replicated partition."""
        return (topic, partition) in self.leaders

    def min_isr_problem(self, topic: str, partition: int) -> str | None:
        """Why an acks=all produce to ``topic``-``partition`` must not be appended now (the ISR
        is below ``min.insync.replicas``), or None."""
        st = self.leaders.get((topic, partition))
        if st is None:
            return None
        need = self._min_isr(topic)
        if st.in_sync_count() >= need:
            return None
        return (f"{topic}-{partition}: the in-sync replicas {list(st.isr)} are fewer than "
                f"min.insync.replicas={need}; nothing was appended. Bring the other replicas "
                "back, or lower min.insync.replicas for acks=all producers")

    async def wait_replicated(self, topic: str, partition: int, end_offset: int,
                              timeout_s: float) -> ErrorCode:
        """Wait until the high watermark reaches ``end_offset`` (the log end just after the
        append): NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND (the ISR fell below
        ``min.insync.replicas`` meanwhile), NOT_LEADER_OR_FOLLOWER (leadership moved) or
        REQUEST_TIMED_OUT. Once the manager is closed (the broker is stopping: its listeners
        are closed, so no follower can fetch), every write is answered NOT_LEADER_OR_FOLLOWER
        at once: none can be confirmed any more, and its client retries on the next leader."""
        tp = (topic, partition)
        st = self.leaders.get(tp)
        if st is None or self.closed:
            return ErrorCode.not_leader_or_follower
        lg = self._broker.logs.get(topic, partition)
        if lg is not None:
            self._advance(tp, st, lg)
        if st.high_watermark >= end_offset:
            return ErrorCode.none if st.in_sync_count() >= self._min_isr(topic) \
                else ErrorCode.not_enough_replicas_after_append
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[ErrorCode] = loop.create_future()
        self._waiters.setdefault(tp, []).append((end_offset, fut))
        # The timeout answers the future itself: the waiter resumes straight from it (one
        # loop turn after the high watermark moves, not three through wait_for's wrapping).
        timer = loop.call_later(timeout_s, _settle, fut, ErrorCode.request_timed_out)
        try:
            return await fut
        finally:
            timer.cancel()

    async def wait_replicated_all(self, parts: list[tuple[str, int, int]],
                                  timeout_s: float) -> list[ErrorCode]:
        """``wait_replicated`` for each (topic, partition, end offset) of one produce, within
        one ``timeout_s`` in all; the codes in the same order."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        codes = []
        for topic, partition, end in parts:
            codes.append(await self.wait_replicated(topic, partition, end,
                                                    max(deadline - loop.time(), 0.001)))
        return codes

    def _fail_waiters(self, tp: TP, code: ErrorCode) -> None:
        for _offset, fut in self._waiters.pop(tp, ()):
            if not fut.done():
                fut.set_result(code)

    def _min_isr(self, topic: str) -> int:
        t = self._broker.topics.get(topic)
        return int(topic_config_value("min.insync.replicas", t.configs if t else {},
                                      self._broker.config))

    async def _checkpoint_loop(self) -> None:
        """Write the replicated partitions' high watermarks to their directories every
        ``replica.high.watermark.checkpoint.interval.ms`` (in a worker thread)."""
        while True:
            await asyncio.sleep(int(self._broker.config.get(
                "replica.high.watermark.checkpoint.interval.ms")) / 1000)
            logs = [lg for tp in [*self.leaders, *self.follows]
                    if (lg := self._broker.logs.get(*tp)) is not None]
            if logs:
                try:
                    await asyncio.to_thread(_checkpoint_all, logs)
                except OSError as e:  # the log directory went offline: the broker stops
                    log.error("writing high-watermark checkpoints failed: %s", e)

    # -- ISR changes ---------------------------------------------------------------------------

    async def _isr_loop(self) -> None:
        cfg = self._broker.config
        while True:
            lag = int(cfg.get("replica.lag.time.max.ms"))
            try:
                await asyncio.wait_for(self._isr_wake.wait(), max(lag / 2000, 0.05))
            except TimeoutError:
                pass
            self._isr_wake.clear()
            now = self._broker.clock.monotonic_ms()
            retry = False
            for tp, st in list(self.leaders.items()):
                new = st.proposal(now, lag)
                if new is None:
                    continue
                if not await self._write_isr(tp, st, new):
                    st.change_failed()
                    retry = True
            if retry:
                await asyncio.sleep(0.5)
                self._isr_wake.set()

    async def _write_isr(self, tp: TP, st: PartitionLeader, isr: tuple[int, ...]) -> bool:
        member = self._broker.member
        assert member is not None
        view = member.store.view
        record = view.topics.get(tp[0])
        if record is None or tp[1] >= len(record.partitions):
            return False
        pa = record.partitions[tp[1]]
        if pa.leader != self.node_id or pa.leader_epoch != st.leader_epoch:
            return False  # fenced: the view will make this broker resign
        if len(isr) > len(pa.isr):
            # As Kafka's controller (INELIGIBLE_REPLICA): a replica that is down or in
            # controlled shutdown is not added; the controller would only take it out again.
            down = view.shutting_down()
            isr = tuple(r for r in isr if r in pa.isr or (r in view.brokers and r not in down))
            if len(isr) <= len(pa.isr):
                return False
        parts = list(record.partitions)
        parts[tp[1]] = replace(pa, isr=isr)
        revision = view.topic_revisions.get(tp[0], 0)
        what = "shrink" if len(isr) < len(pa.isr) else "expand"
        try:
            ok = await asyncio.wait_for(
                member.store.update_topic(replace(record, partitions=tuple(parts)), revision), 10)
        except Exception as e:  # etcd unreachable
            log.warning("%s-%d: could not record the ISR %s from %s to %s in etcd (%s: %s); "
                        "acks=all produces wait until it can", *tp, what, list(pa.isr),
                        list(isr), type(e).__name__, e)
            return False
        if ok:
            log.info("%s-%d: ISR %s from %s to %s (leader epoch %d)", *tp, what, list(pa.isr),
                     list(isr), st.leader_epoch)
        return bool(ok)


def _settle(fut: asyncio.Future[ErrorCode], code: ErrorCode) -> None:
    if not fut.done():
        fut.set_result(code)


def _checkpoint_all(logs: list[PartitionLog]) -> None:
    for lg in logs:
        lg.checkpoint_high_watermark()
