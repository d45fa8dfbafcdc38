"""``ReplicaFetcher``: a follower's fetch loop for every partition it follows from one leader.

One task per leader broker, on the broker's event loop, over its own inter-broker connection
(``ReplicaManager.rpc``: a long-polling fetch would hold up other calls on a shared one). Each
round is one Fetch (v12 to 17) with this broker's node id as replica id. A followed partition is
given with its fetch offset (the local log end), the local latest leader epoch
(LastFetchedEpoch) and the leader epoch it follows (CurrentLeaderEpoch).

Rounds run in a fetch session (KIP-227, ``fetch_session.py``): the first is a full fetch naming
every followed partition; the next ones name only partitions that are new or whose fetch offset
or leader epoch changed, and forget those no longer fetched from this leader. The leader answers
only partitions with something new. A session error, a failed round or a leader that keeps no
session starts over with a full fetch. Per partition answer:

- records: appended unchanged (offsets and leader epochs as the leader wrote them) through
  ``ReplicaLog`` (``broker/log/replica_log.py``), which keeps the producer state and
  aborted-transaction index as the leader's appends do;
- DivergingEpoch: the local log has a tail the leader does not. Truncate to the smaller of the
  leader's end offset for that epoch and the local one (Kafka's rule), then fetch again: the next
  round re-checks with the new last epoch, so a tail spanning several epochs is cut back step
  by step, never below what the leader has;
- OFFSET_OUT_OF_RANGE: the local log ends before the leader's log start (retention ran there
  meanwhile): empty the log and start it at the leader's log start; a local log end past the
  leader's end is cut back to it;
- NOT_LEADER_OR_FOLLOWER, FENCED / UNKNOWN_LEADER_EPOCH: the view is about to change (or just
  did): the partition waits, the next view change moves it to the right fetcher;
- the leader's high watermark, capped at the local log end, becomes this follower's, and its
  log start offset (moved by retention or DeleteRecords) this follower's log start.

A leader that cannot be reached is retried after ``replica.fetch.backoff.ms``; the loop logs
its first failure and its recovery, not every attempt.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.log.replica_log import ReplicaLog
from broker.replication.fetch_session import INITIAL_EPOCH
from protocol.codec import request_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.app import Broker
    from broker.replication.manager import ReplicaManager

log = logging.getLogger("shoal.replication")

FETCH = 1
VERSIONS = (12, 17)
TP = tuple[str, int]


@dataclass(slots=True)
class Followed:
    leader_epoch: int
    topic_id: uuid.UUID
    # Set after an error that only a view change resolves; cleared by ``add``.
    parked: bool = False


class ReplicaFetcher:
    """Fetches the partitions this broker follows from broker ``leader`` (module doc)."""

    def __init__(self, broker: Broker, manager: ReplicaManager, leader: int) -> None:
        self._broker = broker
        self._manager = manager
        self.leader = leader
        self.partitions: dict[TP, Followed] = {}
        self._replica_log = ReplicaLog(broker.logs, broker.producers)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        # The fetch session: its id (0: none yet), the epoch of the next fetch, and what the
        # leader holds for each partition (topic id, fetch offset, leader epoch).
        self._session_id = 0
        self._epoch = INITIAL_EPOCH
        self._held: dict[TP, tuple[uuid.UUID, int, int]] = {}
        # Topic names by id, for answers by topic id (ids of followed topics; never pruned:
        # an answer for a topic no longer followed is dropped by partition anyway).
        self._topic_names: dict[uuid.UUID, str] = {}

    def add(self, tp: TP, leader_epoch: int, topic_id: str) -> None:
        tid = uuid.UUID(topic_id)
        self.partitions[tp] = Followed(leader_epoch, tid)
        self._topic_names[tid] = tp[0]
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"replica fetcher from broker {self.leader}")
            self._task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("the replica fetcher from broker %d stopped: %r; it restarts on the next "
                      "metadata change", self.leader, task.exception(),
                      exc_info=task.exception())

    def remove(self, tp: TP) -> None:
        self.partitions.pop(tp, None)

    async def stop(self) -> None:
        self.partitions.clear()
        self._reset_session()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    # -- the loop ------------------------------------------------------------------------------

    async def _run(self) -> None:
        cfg = self._broker.config
        try:
            while self.partitions and not self._manager.closed:
                active = self.partitions
                if any(f.parked for f in active.values()):
                    active = {tp: f for tp, f in active.items() if not f.parked}
                if not active:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                ok = await self._round(active)
                if not ok:
                    self._wake.clear()
                    try:
                        await asyncio.wait_for(self._wake.wait(),
                                               int(cfg.get("replica.fetch.backoff.ms")) / 1000)
                    except TimeoutError:
                        pass
        finally:
            self._manager.fetcher_idle(self.leader)

    async def _round(self, active: dict[TP, Followed]) -> bool:
        """One Fetch to the leader; False when it failed (back off)."""
        cfg = self._broker.config
        wait_ms = int(cfg.get("replica.fetch.wait.max.ms"))
        logs = self._broker.logs
        full = self._session_id == 0
        held = self._held
        # One pass: every fetched partition's log end, and (outside a full fetch) only those
        # whose offset or epoch the leader's session does not already hold, by topic.
        asked: dict[TP, int] = {}
        by_topic: dict[str, list[tuple[int, Followed]]] = {}
        for tp, f in active.items():
            lg = logs.get(*tp)
            if lg is None:
                continue
            end = asked[tp] = lg.log_end_offset
            if full or held.get(tp) != (f.topic_id, end, f.leader_epoch):
                by_topic.setdefault(tp[0], []).append((tp[1], f))
        if not asked:
            return False
        same_set = held.keys() == asked.keys()
        forgotten: dict[uuid.UUID, list[int]] = {}
        if not full and not same_set:
            for (t, p), (tid, _, _) in held.items():
                if (t, p) not in asked:
                    forgotten.setdefault(tid, []).append(p)
        sent = {(t, p): (f.topic_id, asked[(t, p)], f.leader_epoch)
                for t, parts in by_topic.items() for p, f in parts}
        epoch = self._epoch
        max_bytes = int(cfg.get("replica.fetch.max.bytes"))

        def build(version: int) -> Any:
            m = request_module(FETCH, version)
            topics = []
            for topic, parts in by_topic.items():
                fps = []
                for p, f in parts:
                    lg = logs.get(topic, p)
                    assert lg is not None
                    fps.append(make(
                        m.FetchPartition, partition=p, current_leader_epoch=f.leader_epoch,
                        fetch_offset=asked[(topic, p)], last_fetched_epoch=lg.latest_epoch,
                        log_start_offset=lg.log_start_offset, partition_max_bytes=max_bytes))
                topics.append(make(m.FetchTopic, topic=topic, topic_id=parts[0][1].topic_id,
                                   partitions=tuple(fps)))
            return make(m.FetchRequest, replica_id=self._manager.node_id,
                        replica_state=make(m.ReplicaState, replica_id=self._manager.node_id,
                                           replica_epoch=-1),
                        max_wait=datetime.timedelta(milliseconds=wait_ms),
                        min_bytes=int(cfg.get("replica.fetch.min.bytes")),
                        max_bytes=int(cfg.get("replica.fetch.response.max.bytes")),
                        isolation_level=0, session_id=self._session_id,
                        session_epoch=epoch, topics=tuple(topics),
                        forgotten_topics_data=tuple(
                            make(m.ForgottenTopic, topic_id=tid, partitions=tuple(ps))
                            for tid, ps in forgotten.items()), rack_id="")

        rpc = self._manager.rpc
        resp, code, message = await rpc.send(self.leader, FETCH, VERSIONS, build,
                                             timeout_ms=wait_ms + int(cfg.get(
                                                 "request.timeout.ms")))
        if resp is None:
            self._reset_session()  # the leader may or may not have seen this epoch
            if not self._failing:
                log.warning("fetching %d partition(s) from leader broker %d failed: %s (%s); "
                            "retrying every %d ms", len(asked), self.leader, message,
                            code.name.upper(), int(cfg.get("replica.fetch.backoff.ms")))
            self._failing = True
            return False
        if self._failing:
            log.info("fetching from leader broker %d works again", self.leader)
            self._failing = False
        if resp.error_code != ErrorCode.none:
            self._reset_session()
            if resp.error_code in (ErrorCode.fetch_session_id_not_found,
                                   ErrorCode.invalid_fetch_session_epoch):
                log.info("leader broker %d closed this follower's fetch session (%s); "
                         "opening a new one", self.leader,
                         ErrorCode(resp.error_code).name.upper())
                return True
            log.warning("leader broker %d refused a follower fetch: %s", self.leader,
                        ErrorCode(resp.error_code).name.upper())
            return False
        if full:
            self._held = sent
            self._session_id = int(resp.session_id)
            self._epoch = INITIAL_EPOCH + 1 if self._session_id else INITIAL_EPOCH
        else:
            held.update(sent)
            if not same_set:
                for tp in [tp for tp in held if tp not in asked]:
                    del held[tp]
            self._epoch = 1 if self._epoch >= 2**31 - 1 else self._epoch + 1
        by_id = self._topic_names
        progressed = True
        for tr in resp.responses:
            topic = by_id.get(tr.topic_id) if tr.topic_id is not None else tr.topic
            if topic is None:
                topic = getattr(tr, "topic", None)
            for pr in tr.partitions:
                tp = (topic, pr.partition_index)
                if tp not in asked or tp not in self.partitions:
                    continue  # no longer followed from this leader
                if not await self._partition(tp, asked[tp], pr):
                    progressed = False
        return progressed

    async def _partition(self, tp: TP, fetch_offset: int, pr: Any) -> bool:
        """Apply one partition's answer; False when it failed in a way that needs a pause."""
        lg = self._broker.logs.get(*tp)
        if lg is None or lg.log_end_offset != fetch_offset:
            return True  # changed under us (truncated, deleted): the next round starts over
        err = ErrorCode(pr.error_code)
        topic, p = tp
        try:
            if err == ErrorCode.none:
                diverging = getattr(pr, "diverging_epoch", None)
                if diverging is not None and diverging.epoch >= 0 and diverging.end_offset >= 0:
                    await self._truncate_diverging(tp, lg, diverging.epoch,
                                                   diverging.end_offset)
                    return True
                data = pr.records
                if data:
                    self._replica_log.append(topic, p, bytes(data))
                self._manager.follower_high_watermark(tp, int(pr.high_watermark), lg)
                leader_start = int(pr.log_start_offset)
                if leader_start > lg.log_start_offset:
                    # Retention or DeleteRecords moved the leader's log start: follow it, so a
                    # failover does not bring deleted records back.
                    await asyncio.to_thread(lg.delete_records_before,
                                            min(leader_start, lg.log_end_offset))
                return True
            if err == ErrorCode.offset_out_of_range:
                leader_start = int(pr.log_start_offset)
                if leader_start > fetch_offset:
                    log.warning("%s-%d: the leader's log starts at %d, after this follower's "
                                "end %d; starting this replica over there", topic, p,
                                leader_start, fetch_offset)
                    await self._replica_log.truncate_fully_async(topic, p, leader_start)
                else:
                    hw = int(pr.high_watermark)
                    if 0 <= hw < fetch_offset:
                        log.warning("%s-%d: this follower's log end %d is past the leader's; "
                                    "truncating to its high watermark %d", topic, p,
                                    fetch_offset, hw)
                        await self._replica_log.truncate_to_async(topic, p, hw)
                self._manager.follower_truncated(tp, lg)
                return True
        except OSError as exc:  # LogDirOfflineError: the broker is going down
            log.error("%s-%d: storing what leader broker %d sent failed: %s", topic, p,
                      self.leader, exc)
            return False
        except ValueError as exc:  # batches not following the local log end
            log.error("%s-%d: leader broker %d sent records that do not follow this "
                      "replica's log end %d (%s); fetching again", topic, p, self.leader,
                      fetch_offset, exc)
            return False
        if err in (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch,
                   ErrorCode.unknown_leader_epoch, ErrorCode.unknown_topic_or_partition,
                   ErrorCode.unknown_topic_id):
            # Only a view change resolves it; ``add`` (from the manager) unparks.
            f = self.partitions.get(tp)
            if f is not None:
                f.parked = True
                asyncio.get_running_loop().call_later(
                    int(self._broker.config.get("replica.fetch.backoff.ms")) / 1000,
                    self._unpark, tp)
            return True
        log.warning("%s-%d: leader broker %d answered the follower fetch with %s", topic, p,
                    self.leader, err.name.upper())
        return False

    def _reset_session(self) -> None:
        """The next round is a full fetch that opens a new session."""
        self._session_id = 0
        self._epoch = INITIAL_EPOCH
        self._held = {}

    def _unpark(self, tp: TP) -> None:
        f = self.partitions.get(tp)
        if f is not None and f.parked:
            f.parked = False
            self._wake.set()

    async def _truncate_diverging(self, tp: TP, lg: Any, epoch: int, end_offset: int) -> None:
        # When this log never had the leader's epoch, its own largest epoch below it ends
        # earlier: cut back there, and the next round compares again from that epoch.
        _local_epoch, local_end = lg.end_offset_for_epoch(epoch)
        target = min(end_offset, local_end) if local_end >= 0 else end_offset
        target = max(target, lg.log_start_offset)
        if target < lg.log_end_offset:
            log.info("%s-%d: truncating a divergent tail: log end %d -> %d (leader epoch %d "
                     "ends at %d at the leader)", *tp, lg.log_end_offset, target, epoch,
                     end_offset)
            await self._replica_log.truncate_to_async(tp[0], tp[1], target)
            self._manager.follower_truncated(tp, lg)
