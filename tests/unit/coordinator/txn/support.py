"""A sans-IO context for ``TxnShard`` tests: runs ops as the runtime does (replay the records at
the next offsets, then commit), keeps the encoded log, and hears the prepared transactions."""

from __future__ import annotations

from typing import Any

from coordinator.runtime.result import CoordinatorResult
from coordinator.txn.metadata import TxnMetadata
from coordinator.txn.records import TxnRecordSerde
from coordinator.txn.shard import TxnShard

T0 = 1_700_000_000_000


class TxnContext:
    def __init__(self, now_ms: int = T0) -> None:
        self.now = now_ms
        self.prepared: list[TxnMetadata] = []
        self.serde = TxnRecordSerde()
        self.shard = TxnShard(0, on_prepared=lambda _p, meta: self.prepared.append(meta))
        self.shard.on_loaded(now_ms)
        self.log: list[tuple[bytes, bytes | None]] = []
        self._pid = 1000

    def next_pid(self) -> int:
        self._pid += 1
        return self._pid

    def run(self, result: CoordinatorResult[Any, Any]) -> Any:
        for record in result.records:
            key, value = self.serde.key_value(record)
            self.shard.replay(len(self.log), key, value)
            self.log.append(self.serde.encode(record))
        self.shard.commit(len(self.log))
        return result.response

    def init(self, txn_id: str = "t", timeout_ms: int = 60_000,
             expected: tuple[int, int] | None = None) -> Any:
        return self.run(self.shard.init_producer_id(txn_id, timeout_ms, expected, self.now,
                                                    self.next_pid))

    def add(self, txn_id: str, pid: int, epoch: int, *parts: tuple[str, int]) -> Any:
        return self.run(self.shard.add_partitions(txn_id, pid, epoch, frozenset(parts), self.now))

    def end(self, txn_id: str, pid: int, epoch: int, commit: bool) -> Any:
        return self.run(self.shard.end_txn(txn_id, pid, epoch, commit, self.now))

    def complete_prepared(self) -> None:
        """Act as the marker writer: complete every prepared transaction heard of."""
        while self.prepared:
            meta = self.prepared.pop(0)
            self.run(self.shard.complete(meta.transactional_id, meta.producer_id,
                                         meta.producer_epoch, meta.state, self.now))

    def sleep(self, ms: int) -> None:
        """Advance time and fire due shard timers (as the runtime would)."""
        self.now += ms
        deadline = self.shard.next_deadline()
        while deadline is not None and deadline <= self.now:
            self.run(self.shard.on_timer(self.now))
            nxt = self.shard.next_deadline()
            if nxt == deadline:
                break
            deadline = nxt

    def reloaded(self) -> TxnShard:
        """A fresh shard replaying this context's log (as a broker restart would)."""
        heard: list[TxnMetadata] = []
        shard = TxnShard(0, on_prepared=lambda _p, meta: heard.append(meta))
        for offset, (key, value) in enumerate(self.log):
            decoded = self.serde.decode(key, value)
            assert decoded is not None
            shard.replay(offset, decoded[0], decoded[1])
        shard.commit(len(self.log))
        shard.on_loaded(self.now)
        self.reload_heard = heard
        return shard
