"""Idempotent-producer state of every partition, kept across restarts (Kafka's ProducerStateManager).

The state of a partition (``broker/log/producer_state.py``) is loaded on first use: the newest
readable snapshot at or below the log end offset (``storage/producer_snapshot.py``), then the
headers of every batch appended after it are replayed. A snapshot is written

- when the partition's active segment is rolled, at the new segment's base offset (the state
  then covers exactly the offsets below it: the roll happens before the batch that caused it is
  appended and observed), and
- at a clean shutdown, at the log end offset (synced),

so after a crash the replay covers at most the active segment; after a clean shutdown, nothing.
Snapshots below the log start offset (retention, DeleteRecords) are deleted, except the newest
snapshot, which still carries the producers whose batches retention removed.

Invariant: a loaded partition's state reflects every batch below its log end offset; the produce
handler keeps it so by observing each batch right after appending it, and ``broker/log/txn_log.py``
each end-transaction marker, on the event loop. Replay does the same for both: a control batch
ends its producer's transaction, and an ABORT marker re-enters the segment's aborted-transaction
index (the entries from the replay start on are dropped first). After a crash the replay starts
at the newest snapshot at or below where crash recovery began re-reading the log, so every
segment recovery re-read gets its transaction index rebuilt.
Snapshot write failures are logged and otherwise ignored (a later replay is just longer).
"""

from __future__ import annotations

import logging
from pathlib import Path

from broker.clock import Clock
from broker.config import BrokerConfig
from broker.log.manager import LogManager
from broker.log.producer_state import ProducerStates
from protocol.record_batch import (
    CONTROL_COMMIT,
    BatchHeader,
    control_type,
    marker_coordinator_epoch,
)
from storage.producer_snapshot import (
    delete_snapshots,
    list_snapshots,
    read_latest,
    write_snapshot,
)
from storage.segment_log import PartitionLog

log = logging.getLogger("shoal.producer")

TopicPartition = tuple[str, int]
_REPLAY_CHUNK = 4096  # batch headers read at a time while replaying the log tail


class ProducerStateManager:
    def __init__(self, logs: LogManager, config: BrokerConfig, clock: Clock) -> None:
        self._logs = logs
        self._config = config
        self._clock = clock
        self._states: dict[TopicPartition, ProducerStates] = {}

    def states(self, topic: str, partition: int) -> ProducerStates:
        """The partition's producer state, loaded from its snapshot and log on first use.

        Raises:
            OSError: the partition directory or log could not be read.
            LogError: a segment could not be parsed.
        """
        key = (topic, partition)
        s = self._states.get(key)
        if s is None:
            lg = self._logs.get(topic, partition)
            if lg is None:
                return ProducerStates()  # no log: nothing can be appended anyway
            s = self._states[key] = self._load(topic, partition, lg)
        return s

    @property
    def clock(self) -> Clock:
        return self._clock

    def unload(self, topic: str, partition: int) -> None:
        """Forget the partition's state (its log was truncated, ``broker/log/replica_log.py``):
        the next ``states`` rebuilds it from the snapshots at or below the log end offset and
        the log after them."""
        if self._states.pop((topic, partition), None) is not None:
            lg = self._logs.get(topic, partition)
            if lg is not None:
                lg.roll_listener = None

    def loaded(self, topic: str, partition: int) -> bool:
        """Whether the partition's state is in memory (``states`` would not read the log)."""
        return (topic, partition) in self._states

    def _load(self, topic: str, partition: int, lg: PartitionLog) -> ProducerStates:
        now = self._clock.now_ms()
        directory = lg.directory
        leo, lso = lg.log_end_offset, lg.log_start_offset
        # Snapshots past the log end describe batches that crash recovery truncated away.
        delete_snapshots(directory, [o for o in list_snapshots(directory) if o > leo])
        # After a crash, replay at least what recovery re-read, so the aborted-transaction
        # index of those segments is rebuilt from the log (Kafka's LogLoader does the same).
        at_most = leo if lg.recovered_from is None else min(leo, lg.recovered_from)
        found = read_latest(directory, at_most)
        if found is None:
            start, states = lso, ProducerStates()
        else:
            start, states = found[0], ProducerStates.from_snapshot(found[1])
        replayed = 0
        pos = max(start, lso)
        # Index entries from the replay start on are rebuilt; the old ones stay as a fallback
        # for transactions that began below the log start (whose start no state remembers).
        previous: dict[int, tuple[int, int, int, int]] = {}
        if pos < leo:
            previous = {e[2]: e for e in lg.aborted_txns(pos, leo) if e[2] >= pos}
            lg.truncate_aborted_txns(pos)
        while pos < leo:
            headers = lg.batch_headers(pos, leo, _REPLAY_CHUNK)
            if not headers:
                break
            for h in headers:
                if h.base_offset >= start:
                    # The append time is not in the log: replayed producers count from now.
                    if h.is_control:
                        self._replay_marker(lg, states, h, now, previous)
                    else:
                        states.observe(h.producer_id, h.producer_epoch, h.base_sequence,
                                       h.record_count, h.base_offset, h.last_offset, now,
                                       h.is_transactional)
                    replayed += 1
            pos = headers[-1].last_offset + 1
        lg.first_unstable_offset = states.first_unstable_offset()
        states.expire(now, self._config.get("producer.id.expiration.ms"))
        if found is not None or replayed or len(states):
            log.info("%s-%d: producer state loaded (%d producer ids) from %s and %d batch(es) "
                     "of the log", topic, partition, len(states),
                     f"the snapshot at offset {start}" if found else "no snapshot", replayed)
        self._prune(directory, lso)
        lg.roll_listener = lambda base, t=topic, p=partition: self._on_roll(t, p, base)
        return states

    @staticmethod
    def _replay_marker(lg: PartitionLog, states: ProducerStates, h: BatchHeader, now: int,
                       previous: dict[int, tuple[int, int, int, int]]) -> None:
        """Replay a control batch: an end-transaction marker ends its producer's transaction;
        an ABORT re-enters the aborted-transaction index."""
        data = lg.read(h.base_offset, 1).data
        kind = control_type(data)
        if kind is None:
            return  # not a marker Shoal knows (Kafka skips unknown control batches too)
        coordinator_epoch = marker_coordinator_epoch(data)
        done = states.observe_marker(h.producer_id, h.producer_epoch, coordinator_epoch,
                                     h.base_offset, kind == CONTROL_COMMIT, now)
        if done is not None and done.aborted:
            stable = states.first_unstable_offset()
            lg.add_aborted_txn((done.producer_id, done.first_offset, done.last_offset,
                                done.last_offset + 1 if stable is None else stable))
        elif done is None and kind != CONTROL_COMMIT and h.base_offset in previous:
            lg.add_aborted_txn(previous[h.base_offset])

    def _on_roll(self, topic: str, partition: int, base_offset: int) -> None:
        """Called by the partition log (under its lock) right after it rolled a new segment."""
        states = self._states.get((topic, partition))
        lg = self._logs.get(topic, partition)
        if states is None or lg is None:
            return
        self._write(topic, partition, lg.directory, base_offset, states, lg.log_start_offset)

    def _write(self, topic: str, partition: int, directory: Path, offset: int,
               states: ProducerStates, lso: int, fsync: bool = False) -> None:
        try:
            write_snapshot(directory, offset, states.to_snapshot(), fsync)
            self._prune(directory, lso)
        except OSError:
            log.exception("%s-%d: writing the producer-state snapshot at offset %d failed; after "
                          "a restart more of the log will be replayed. Check the disk.",
                          topic, partition, offset)

    @staticmethod
    def _prune(directory: Path, lso: int) -> None:
        offsets = list_snapshots(directory)
        delete_snapshots(directory, [o for o in offsets[:-1] if o < lso])

    def expire(self) -> int:
        """Forget idle producer ids everywhere (``producer.id.expiration.ms``); return how many."""
        now = self._clock.now_ms()
        limit = self._config.get("producer.id.expiration.ms")
        return sum(s.expire(now, limit) for s in self._states.values())

    def drop_topic(self, topic: str, partitions: int) -> None:
        for p in range(partitions):
            self._states.pop((topic, p), None)

    def close(self) -> None:
        """Snapshot every loaded partition at its log end offset (clean shutdown; blocking)."""
        for (topic, p), states in list(self._states.items()):
            lg = self._logs.get(topic, p)
            if lg is None or lg.closed:
                continue
            lg.roll_listener = None
            self._write(topic, p, lg.directory, lg.log_end_offset, states, lg.log_start_offset,
                        fsync=True)
        self._states.clear()
