"""``InterBrokerRpc``: one request to another cluster member, its failure as a Kafka code.

The broker's client for the inter-broker RPCs other than the share-state ones (those are the
network persister's): transaction markers and verification (``broker/txn_remote.py``),
dead-letter appends (``broker/share/dead_letter_writer.py``) and the admin fan-out. It rides on
a ``client.pool.ConnectionPool`` (one connection per destination broker, opened on first use,
on the inter-broker listener and authenticated as the broker's own ``super.users`` login, see
``broker/inter_broker.py``), and finds a broker's endpoint on that listener in the
``ClusterMetadata``.

Contract of ``send``: ``(response, NONE, "")`` when the peer answered, else ``(None, code,
message)`` where the code says why there is no answer, naming the broker:

- COORDINATOR_NOT_AVAILABLE: the node has no endpoint on the listener (not live);
- NETWORK_EXCEPTION: it could not be reached or the connection broke (retry later);
- REQUEST_TIMED_OUT: no answer within ``timeout_ms`` (the connection stays usable);
- the code of a ``KafkaError`` (SASL refused the broker's login, no common version): a
  configuration problem, not worth retrying.

Nothing is raised for those; a broker that is down costs only the calls routed to it (the pool
connects to each node under its own lock).

Counters for metrics (``stats()``), by (API key, destination node): requests sent, requests
without an answer by code name, latency sum and count of the answered ones.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from client.errors import KafkaError
from cluster.metadata import NO_LEADER, ClusterMetadata

__all__ = ["InterBrokerRpc", "Transport"]

log = logging.getLogger("shoal.inter_broker")


class Transport(Protocol):
    """How requests reach another broker (``client.pool.ConnectionPool`` has this shape)."""

    async def request(self, node_id: int, host: str, port: int, api_key: int, lo: int, hi: int,
                      build: Callable[[int], Any],
                      timeout: float | None = None) -> tuple[int, Any]: ...

    async def close(self) -> None: ...


class InterBrokerRpc:
    """Requests to other brokers over ``transport`` (see the module doc)."""

    def __init__(self, metadata: ClusterMetadata, transport: Transport, *, listener: str,
                 request_timeout_ms: int = 30_000) -> None:
        self.metadata = metadata
        self.listener = listener
        self.request_timeout_ms = request_timeout_ms
        self._transport = transport
        self.requests: Counter[tuple[int, int]] = Counter()
        self.errors: Counter[tuple[int, int, str]] = Counter()
        self.latency_sum_s: defaultdict[tuple[int, int], float] = defaultdict(float)
        self.latency_count: Counter[tuple[int, int]] = Counter()

    @property
    def node_id(self) -> int:
        return self.metadata.node_id

    def leader(self, topic: str, partition: int) -> int | None:
        """The live broker leading ``topic``-``partition``, or None (unknown or offline)."""
        info = self.metadata.partition(topic, partition)
        if info is None or info.leader == NO_LEADER:
            return None
        return info.leader

    async def send(self, node_id: int, api_key: int, versions: tuple[int, int],
                   build: Callable[[int], Any], timeout_ms: int | None = None,
                   ) -> tuple[Any, ErrorCode, str]:
        """Send ``build(version)`` to broker ``node_id`` (see the module doc)."""
        key = (api_key, node_id)
        self.requests[key] += 1
        response, code, message = await self._send(node_id, api_key, versions, build, timeout_ms)
        if response is None:
            self.errors[(api_key, node_id, code.name.upper())] += 1
        return response, code, message

    async def _send(self, node_id: int, api_key: int, versions: tuple[int, int],
                    build: Callable[[int], Any], timeout_ms: int | None
                    ) -> tuple[Any, ErrorCode, str]:
        where = f"broker {node_id}"
        node = self.metadata.node(node_id, self.listener)
        if node is None:
            return (None, ErrorCode.coordinator_not_available,
                    f"{where} has no endpoint on listener {self.listener} (not live?)")
        where = f"broker {node_id} ({node.host}:{node.port})"
        timeout = timeout_ms if timeout_ms is not None else self.request_timeout_ms
        started = time.perf_counter()
        try:
            _v, response = await self._transport.request(
                node.node_id, node.host, node.port, api_key, versions[0], versions[1], build,
                timeout / 1000)
        except TimeoutError:
            return (None, ErrorCode.request_timed_out,
                    f"{where} did not answer API {api_key} within {timeout} ms")
        except KafkaError as e:  # SASL refused, no common version
            log.warning("inter-broker request (API %d) to %s refused: %s; check the "
                        "inter-broker listener's login and super.users", api_key, where, e)
            return None, e.code, f"{where}: {e}"
        except (ConnectionError, OSError) as e:
            return None, ErrorCode.network_exception, f"{where} is unreachable: {e}"
        self.latency_sum_s[(api_key, node_id)] += time.perf_counter() - started
        self.latency_count[(api_key, node_id)] += 1
        return response, ErrorCode.none, ""

    def stats(self) -> dict[str, dict[Any, Any]]:
        """A copy of the counters (module doc)."""
        return {"requests": dict(self.requests), "errors": dict(self.errors),
                "latency_sum_s": dict(self.latency_sum_s),
                "latency_count": dict(self.latency_count)}

    async def close(self) -> None:
        """Close every connection (idempotent)."""
        await self._transport.close()
