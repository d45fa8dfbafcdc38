"""Shared helpers for the share coordinator tests: a replaying test context and param builders."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from coordinator.runtime.result import CoordinatorResult
from coordinator.share.records import ShareRecord
from coordinator.share.shard import KeyState, ShareCoordinatorShard
from persister.api import (
    DeleteParams,
    InitializeParams,
    PersisterStateBatch,
    ReadParams,
    SharePartitionKey,
    WriteParams,
)

GROUP = "group1"
TOPIC = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
KEY = SharePartitionKey(GROUP, TOPIC, 0)
NOW = 1_700_000_000_000


def b(first: int, last: int, state: int, count: int) -> PersisterStateBatch:
    return PersisterStateBatch(first, last, state, count)


def init(state_epoch: int = 0, start_offset: int = -1, key: SharePartitionKey = KEY) -> tuple[str, Any]:
    return ("init", InitializeParams(key, state_epoch, start_offset))


def write(
    *batches: PersisterStateBatch,
    start_offset: int = 0,
    leader_epoch: int = 0,
    state_epoch: int = 0,
    delivery_complete_count: int = 0,
    key: SharePartitionKey = KEY,
) -> tuple[str, Any]:
    return (
        "write",
        WriteParams(key, state_epoch, leader_epoch, start_offset, delivery_complete_count, tuple(batches)),
    )


def read(leader_epoch: int = 0, key: SharePartitionKey = KEY) -> tuple[str, Any]:
    return ("read", ReadParams(key, leader_epoch))


def delete(key: SharePartitionKey = KEY) -> tuple[str, Any]:
    return ("delete", DeleteParams(key))


@dataclass
class ShardContext:
    """Runs ops against a shard, replays and commits every result, and keeps the emitted log."""

    shard: ShareCoordinatorShard
    now_ms: int = NOW
    log: list[tuple[int, ShareRecord]] = field(default_factory=list)
    on_replay: Callable[[int], None] | None = None

    def call(self, op: tuple[str, Any]) -> CoordinatorResult[ShareRecord, Any]:
        """Run the op without replaying (a write op must not mutate the shard)."""
        kind, params = op
        if kind == "init":
            return self.shard.initialize_state(params, now_ms=self.now_ms)
        if kind == "write":
            return self.shard.write_state(params, now_ms=self.now_ms)
        if kind == "read":
            return self.shard.read_state(params, now_ms=self.now_ms)
        if kind == "delete":
            return self.shard.delete_state(params)
        raise AssertionError(kind)

    def run(self, op: tuple[str, Any]) -> Any:
        before = dict(self.shard.states)
        result = self.call(op)
        assert dict(self.shard.states) == before, "a write op mutated the shard"
        assert result.response is not None
        if result.response.error is not ErrorCode.none:
            assert result.records == (), "a failed op emitted records"
        for record in result.records:
            offset = self.shard.end_offset
            self.shard.replay(offset, record.key, record.value)
            self.log.append((offset, record))
            if self.on_replay is not None:
                self.on_replay(offset)
        self.shard.commit(self.shard.end_offset)
        return result.response


def rebuild(log: list[tuple[int, ShareRecord]], **shard_kwargs: Any) -> ShareCoordinatorShard:
    shard = ShareCoordinatorShard(**shard_kwargs)
    for offset, record in log:
        shard.replay(offset, record.key, record.value)
    shard.commit(shard.end_offset)
    return shard


def states(shard: ShareCoordinatorShard) -> dict[SharePartitionKey, KeyState]:
    return dict(shard.states)
