"""The log cleaner thread: compacts partitions of topics whose ``cleanup.policy`` has ``compact``
(Kafka's ``LogCleaner`` and ``LogCleanerManager``, behaviour only).

One daemon thread (``log.cleaner.enable``), never the event loop. Each round it looks at every
compacted partition (``storage.cleaner.cleanable``) and cleans the filthiest one whose dirty
ratio reaches ``min.cleanable.dirty.ratio``, whose oldest dirty record is older than
``max.compaction.lag.ms``, or whose kept tombstones reached their delete horizon; when none
qualifies it sleeps ``log.cleaner.backoff.ms`` (woken early by ``wake`` and ``stop``). A pass
(``storage.cleaner.clean``) reads segment files with its own descriptors and swaps the cleaned
segments in under the partition log's segment-list locks, so the event loop's appends and
fetches and the retention worker keep going meanwhile.

A pass that fails is logged with the partition and skipped until the next round; a storage error
takes the log directory offline as any write error does (``storage/log_dir.py``) and the
cleaner stops with the broker. The earliest delete horizon of each partition is kept in memory
(after a restart, tombstones go at the next pass the dirty ratio triggers).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker.clock import Clock
from broker.config import BrokerConfig
from storage.cleaner import MAP_ENTRY_BYTES, Cleanable, CleanerStats, clean, cleanable
from storage.log import LogError
from storage.segment_log import PartitionLog

if TYPE_CHECKING:
    from broker.log.manager import LogManager

log = logging.getLogger("shoal.cleaner")

TopicPartition = tuple[str, int]


class LogCleaner:
    def __init__(self, logs: LogManager, config: BrokerConfig, clock: Clock,
                 stats: CleanerStats | None = None) -> None:
        self._logs = logs
        self._config = config
        self._clock = clock
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._horizons: dict[TopicPartition, int] = {}
        # Logs whose segments do not parse (a topic re-created under the name is a new log).
        self._uncleanable: weakref.WeakSet[PartitionLog] = weakref.WeakSet()
        # Totals over every pass (read by metrics; plain ints, written by the cleaner thread).
        self.stats = stats if stats is not None else CleanerStats()
        # The first offset a pass must not reach per partition (its last stable offset while a
        # transaction is ongoing there; broker/log/txn_log.py), None for no limit. Called from the
        # cleaner thread.
        self.stable_limit: Callable[[str, int], int | None] | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="shoal-log-cleaner",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the thread (blocking: a group being rewritten is finished or abandoned first)."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def wake(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        while not self._stopping:
            try:
                cleaned = self.clean_filthiest()
            except Exception:
                log.exception("log cleaner round failed; retrying after log.cleaner.backoff.ms")
                cleaned = False
            if not cleaned and not self._stopping:
                self._wake.wait(self._config.get("log.cleaner.backoff.ms") / 1000)
                self._wake.clear()

    def clean_filthiest(self) -> bool:
        """Clean the partition that needs it most, once. Returns whether one was cleaned."""
        if self._logs.log_dir.offline:
            return False
        now = self._clock.now_ms()
        best: tuple[float, TopicPartition, Cleanable] | None = None
        for tp, lg in self._logs.items():
            cfg = lg.config
            if not cfg.compact_policy or lg.closed or lg in self._uncleanable:
                continue
            try:
                limit = self.stable_limit(*tp) if self.stable_limit is not None else None
                hw_of = self._logs.high_watermark_of
                if hw_of is not None:
                    # A replica cleans only what every in-sync replica has (Kafka's cleaner
                    # stops at the last stable offset, which the high watermark bounds).
                    hw = hw_of(tp[0], tp[1], lg)
                    limit = hw if limit is None else min(limit, hw)
                c = cleanable(lg, now, limit)
            except (OSError, LogError) as exc:
                log.warning("cannot inspect %s-%d for cleaning: %s", *tp, exc)
                continue
            if c is None:
                continue
            horizon = self._horizons.get(tp)
            due = horizon is not None and horizon <= now
            dirty = c.first_dirty < c.first_uncleanable
            if not (due or (dirty and (c.must_clean or
                                       c.dirty_ratio >= cfg.min_cleanable_ratio))):
                continue
            score = c.dirty_ratio + (1.0 if c.must_clean or due else 0.0)
            if best is None or score > best[0]:
                best = (score, tp, c)
        if best is None:
            return False
        _, tp, c = best
        entries = max(1, int(self._config.get("log.cleaner.dedupe.buffer.size")) // MAP_ENTRY_BYTES)
        try:
            result = clean(c, now, entries, lambda: self._stopping)
        except LogError as exc:
            # Kafka marks such a partition uncleanable: skipped until the broker restarts.
            self._uncleanable.add(c.log)
            log.error("cleaning %s-%d failed: %s; the partition is not cleaned again until "
                      "the broker restarts (its segments are left as they were)", *tp, exc)
            return False
        except OSError as exc:
            log.error("cleaning %s-%d failed: %s; it is retried in a later round", *tp, exc)
            return False
        s = result.stats
        self.stats.passes += 1
        self.stats.bytes_read += s.bytes_read
        self.stats.bytes_written += s.bytes_written
        self.stats.records_read += s.records_read
        self.stats.swaps += s.swaps
        if result.end_offset is None:
            return False
        if result.next_horizon_ms is not None:
            self._horizons[tp] = result.next_horizon_ms
        else:
            self._horizons.pop(tp, None)
        log.info("cleaned %s-%d up to offset %d (dirty ratio %.2f): %d -> %d bytes in %d "
                 "segment(s)", *tp, result.end_offset, c.dirty_ratio, s.bytes_read,
                 s.bytes_written, s.swaps)
        return True
