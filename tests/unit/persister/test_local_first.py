"""LocalFirstPersister: local keys in process, the rest (and a local NOT_COORDINATOR) remote."""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from persister.api import ReadParams, ReadResult, SharePartitionKey, WriteParams, WriteResult
from persister.local_first import LocalFirstPersister

LOCAL = SharePartitionKey("g", uuid.UUID(int=1), 0)
REMOTE = SharePartitionKey("g", uuid.UUID(int=1), 1)


class Recorder:
    def __init__(self, name: str, error: ErrorCode = ErrorCode.none) -> None:
        self.name, self.error, self.calls = name, error, []

    async def write(self, params: WriteParams) -> WriteResult:
        self.calls.append(params.key)
        return WriteResult(self.error)

    async def read(self, params: ReadParams) -> ReadResult:
        self.calls.append(params.key)
        return ReadResult(self.error, state_epoch=7 if self.name == "remote" else 3)

    def stats(self) -> dict[str, Any]:
        return {"requests": {(85, 2): 1}}


def _write(key: SharePartitionKey) -> WriteParams:
    return WriteParams(key, 0, 0, 0, -1, ())


async def test_local_keys_stay_in_process_and_others_go_over_the_wire() -> None:
    local, remote = Recorder("local"), Recorder("remote")
    p = LocalFirstPersister(local, remote, lambda k: k == LOCAL)  # type: ignore[arg-type]
    assert (await p.write(_write(LOCAL))).error == ErrorCode.none
    assert (await p.write(_write(REMOTE))).error == ErrorCode.none
    assert local.calls == [LOCAL] and remote.calls == [REMOTE]
    assert p.stats() == {"requests": {(85, 2): 1}}


async def test_a_local_not_coordinator_falls_back_to_the_network() -> None:
    local, remote = Recorder("local", ErrorCode.not_coordinator), Recorder("remote")
    p = LocalFirstPersister(local, remote, lambda k: True)  # type: ignore[arg-type]
    read = await p.read(ReadParams(LOCAL, 0))
    assert (read.error, read.state_epoch) == (ErrorCode.none, 7)
    assert local.calls == [LOCAL] and remote.calls == [LOCAL]


async def test_other_local_errors_are_the_answer() -> None:
    local, remote = Recorder("local", ErrorCode.fenced_state_epoch), Recorder("remote")
    p = LocalFirstPersister(local, remote, lambda k: True)  # type: ignore[arg-type]
    assert (await p.write(_write(LOCAL))).error == ErrorCode.fenced_state_epoch
    assert remote.calls == []
