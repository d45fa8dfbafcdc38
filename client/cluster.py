"""Bootstrap, metadata and one connection per broker.

``Cluster`` connects to the first reachable bootstrap address, asks Metadata (v10+, so topics
carry their topic ids, which every share RPC uses instead of names) and keeps:

- ``brokers``: node id -> (host, port);
- topic name <-> topic id, and each partition's leader;
- one ``BrokerConnection`` per node id, opened on first use.

It also finds the group coordinator (FindCoordinator, key type GROUP). The requests and the
reading of their answers are the client core's (``client/core/discovery.py``); this is the
asyncio shell's routing. Every request is bounded by ``timeout`` (``request_timeout_ms``) and
every connect by the same. Nothing here retries on its own: callers refresh metadata when a
broker says NOT_LEADER_OR_FOLLOWER or an unknown topic id shows up.
"""

from __future__ import annotations

import asyncio
import uuid

from client.connection import BrokerConnection
from client.core.discovery import (
    FIND_COORDINATOR,
    METADATA,
    find_coordinator_request,
    metadata_request,
    parse_bootstrap,
    parse_coordinator,
    parse_metadata,
)
from client.errors import error_for
from client.security import SecuritySettings

__all__ = ["Cluster", "parse_bootstrap"]


class Cluster:
    def __init__(self, bootstrap_servers: str | list[str], client_id: str,
                 request_timeout_ms: int = 30_000,
                 security: SecuritySettings | None = None) -> None:
        self._bootstrap = parse_bootstrap(bootstrap_servers)
        self._client_id = client_id
        self._security = security
        self.timeout = request_timeout_ms / 1000
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.topic_names: dict[uuid.UUID, str] = {}
        self.leaders: dict[tuple[str, int], int] = {}
        self._conns: dict[int, BrokerConnection] = {}
        self._any: BrokerConnection | None = None
        self._lock = asyncio.Lock()

    async def bootstrap(self) -> None:
        """Connect to a bootstrap broker and load the broker list.

        Raises:
            ConnectionError: no bootstrap address answered.
        """
        errors = []
        for host, port in self._bootstrap:
            conn = BrokerConnection(host, port, self._client_id, security=self._security,
                                    request_timeout=self.timeout)
            try:
                await conn.connect(self.timeout)
            except (TimeoutError, OSError) as e:
                errors.append(f"{host}:{port}: {e}")
                await conn.close()
                continue
            self._any = conn
            await self.refresh([])
            return
        raise ConnectionError(f"no bootstrap server reachable: {'; '.join(errors)}")

    async def any_connection(self) -> BrokerConnection:
        if self._any is None or self._any.closed:
            if self.brokers:
                self._any = await self.connection(next(iter(self.brokers)))
            else:
                await self.bootstrap()
        assert self._any is not None
        return self._any

    async def connection(self, node_id: int) -> BrokerConnection:
        """The (open) connection to a broker, opened if needed."""
        async with self._lock:
            conn = self._conns.get(node_id)
            if conn is not None and not conn.closed:
                return conn
            host, port = self.brokers[node_id]
            conn = BrokerConnection(host, port, self._client_id, node_id, self._security,
                                    request_timeout=self.timeout)
            await conn.connect(self.timeout)
            self._conns[node_id] = conn
            return conn

    async def refresh(self, topics: list[str] | None) -> None:
        """Reload brokers and the given topics (None: all topics) from Metadata."""
        conn = self._any if self._any is not None and not self._any.closed else None
        if conn is None:
            conn = await self.any_connection()
        version = conn.version(METADATA, 10, 12)
        resp = await conn.call(METADATA, version, metadata_request(version, topics))
        brokers, found = parse_metadata(resp)
        self.brokers = {n: (b.host, b.port) for n, b in brokers.items()}
        for t in found:
            if error_for(t.error) is not None or t.topic_id is None or t.name is None:
                continue
            self.topic_ids[t.name] = t.topic_id
            self.topic_names[t.topic_id] = t.name
            for index, p in t.partitions.items():
                self.leaders[(t.name, index)] = int(p.leader_id)

    async def find_coordinator(self, group_id: str) -> int:
        """Node id of the group coordinator.

        Raises:
            KafkaError: the broker answered with an error (e.g. COORDINATOR_NOT_AVAILABLE).
        """
        conn = await self.any_connection()
        version = conn.version(FIND_COORDINATOR, 4, 4)
        resp = await conn.call(FIND_COORDINATOR, version,
                               find_coordinator_request(version, group_id))
        node = parse_coordinator(version, resp)
        self.brokers.setdefault(node.node_id, (node.host, node.port))
        return node.node_id

    async def close(self) -> None:
        conns = list(self._conns.values())
        if self._any is not None and self._any not in conns:
            conns.append(self._any)
        self._conns.clear()
        self._any = None
        for c in conns:
            await c.close()
