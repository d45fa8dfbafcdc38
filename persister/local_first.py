"""A cluster member's persister: its own share coordinator in process for the keys whose
``__share_group_state`` partition it leads, the share-state RPCs for the rest.

Kafka's persister always goes through the RPCs, to itself too. In-process is the same
coordinator code without encoding, a socket and the batching round trip: a third of the keys of
a 3-broker cluster are local. A local answer of NOT_COORDINATOR (leadership moved, or the
partition is still loading) falls back to the network path, which retries and routes by the
current leader; so does a key whose partition another broker leads. A key's calls take one path
while leadership stays, so they keep their order.

Contract: the ``Persister`` protocol (``persister/api.py``); ``stats()`` and ``close()`` are the
network persister's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from persister.api import (
    DeleteParams,
    InitializeParams,
    Persister,
    ReadParams,
    ReadResult,
    SharePartitionKey,
    SummaryResult,
    WriteParams,
    WriteResult,
)
from persister.network_persister import NetworkPersister

__all__ = ["LocalFirstPersister"]


class LocalFirstPersister:
    """See the module doc. ``is_local(key)``: whether this broker leads the key's share-state
    partition now."""

    def __init__(self, local: Persister, remote: NetworkPersister,
                 is_local: Callable[[SharePartitionKey], bool]) -> None:
        self.local = local
        self.remote = remote
        self._is_local = is_local

    async def initialize(self, params: InitializeParams) -> WriteResult:
        if self._is_local(params.key):
            out = await self.local.initialize(params)
            if out.error != ErrorCode.not_coordinator:
                return out
        return await self.remote.initialize(params)

    async def read(self, params: ReadParams) -> ReadResult:
        if self._is_local(params.key):
            out = await self.local.read(params)
            if out.error != ErrorCode.not_coordinator:
                return out
        return await self.remote.read(params)

    async def write(self, params: WriteParams) -> WriteResult:
        if self._is_local(params.key):
            out = await self.local.write(params)
            if out.error != ErrorCode.not_coordinator:
                return out
        return await self.remote.write(params)

    async def delete(self, params: DeleteParams) -> WriteResult:
        if self._is_local(params.key):
            out = await self.local.delete(params)
            if out.error != ErrorCode.not_coordinator:
                return out
        return await self.remote.delete(params)

    async def read_summary(self, params: ReadParams) -> SummaryResult:
        if self._is_local(params.key):
            out = await self.local.read_summary(params)
            if out.error != ErrorCode.not_coordinator:
                return out
        return await self.remote.read_summary(params)

    def stats(self) -> dict[str, dict[Any, Any]]:
        """The network persister's counters (local calls are not inter-broker requests)."""
        return self.remote.stats()

    async def close(self) -> None:
        await self.remote.close()
