"""A ``client.ShareConsumer`` run on an event loop in a thread of its own, driven synchronously.

Spark calls the stream reader from a plain Python process (the driver's streaming-source
runner) that blocks on its socket between calls. The consumer must keep heartbeating and
renewing locks in those gaps, so it lives on a private event loop in a daemon thread. Every
call into the consumer runs on that loop; the reader gets ``concurrent.futures.Future``s back.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from client import AcknowledgeType, RawPartition, ShareConsumer
from client.errors import ShareConsumerError

log = logging.getLogger("pipeline.share_source")

T = TypeVar("T")

# Every blocking call gets this much longer than its own timeout before the reader gives up.
_SLACK_S = 30.0


@dataclass(slots=True)
class Cycle:
    """What one ``cycle`` did: acknowledgements the broker refused, then the records polled."""

    refused: dict[str, int] = field(default_factory=dict)  # "topic-partition" -> records
    # The polled partitions, undecoded: the executors decode them (pipeline/decode.py).
    records: list[RawPartition] = field(default_factory=list)
    # Whether the member had partitions assigned when the poll began: an empty poll only
    # means "nothing to read" if it did (a new member's first poll may predate its assignment).
    assigned: bool = False
    # ``prepare(records)``, computed on the consumer's thread right after the poll.
    prepared: Any = None


class ConsumerThread:
    """One explicit-acknowledgement share-group member, polled one micro-batch at a time.

    ``held`` is the batch this member holds, as undecoded partitions (``client.RawPartition``):
    acquired, renewed by the lock keeper, and not yet acknowledged. Acknowledging it covers
    every acquired offset (records and gaps). A ``cycle`` first acknowledges the held batch (if asked to) and then polls
    the next one; the caller takes the new batch with ``take``.
    """

    def __init__(self, bootstrap_servers: str, group_id: str, topics: tuple[str, ...], *,
                 max_records: int, renew_locks: bool, client_id: str,
                 security: Mapping[str, str] | None = None,
                 prepare: Callable[[list[RawPartition]], Any] | None = None,
                 wait: bool = True) -> None:
        """Start the consumer (connect, subscribe). ``wait=False`` returns at once: call
        ``wait_started`` before the first ``cycle`` (several members then start at once)."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever,
                                        name="shoal-share-source", daemon=True)
        self._thread.start()
        self._consumer = ShareConsumer(
            bootstrap_servers, group_id, acknowledgement_mode="explicit",
            max_poll_records=max_records, acquire_mode="record_limit", client_id=client_id,
            renew_locks=renew_locks, raw_records=True, config=security)
        self._prepare = prepare
        self.held: list[RawPartition] = []
        self.prepared: Any = None  # ``prepare(held)``
        self.pending: Future[Cycle] | None = None
        self._closed = False
        self._started: Future[None] | None = self._submit(self._start(topics))
        if wait:
            self.wait_started()

    def wait_started(self) -> None:
        """Wait for the consumer's start (raises what it raised)."""
        if self._started is not None:
            self._wait(self._started, 60)
            self._started = None

    async def _start(self, topics: tuple[str, ...]) -> None:
        await self._consumer.start()
        self._consumer.subscribe(topics)

    def _submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    @staticmethod
    def _wait(future: Future[T], timeout: float) -> T:
        return future.result(timeout + _SLACK_S)

    # -- the cycle ------------------------------------------------------------------------------

    def cycle(self, settle: AcknowledgeType | None, poll_timeout_ms: int | None) -> Future[Cycle]:
        """Start acknowledging the held batch with ``settle`` (None: keep it) and then polling
        (``poll_timeout_ms`` None: don't). Returns the future, also kept in ``pending``."""
        if self.pending is not None and not self.pending.done():
            raise RuntimeError("a cycle is already running on this member")
        records: list[RawPartition] = []
        if settle is not None:
            records, self.held, self.prepared = self.held, [], None
        elif self.held and poll_timeout_ms is not None:
            raise RuntimeError("poll while a batch is held: settle it first")
        self.pending = self._submit(self._cycle(records, settle, poll_timeout_ms))
        return self.pending

    @property
    def held_records(self) -> int:
        """Acquired offsets in the held batch."""
        return sum(p.count for p in self.held)

    async def _cycle(self, records: list[RawPartition], settle: AcknowledgeType | None,
                     poll_timeout_ms: int | None) -> Cycle:
        out = Cycle()
        if records and settle is not None:
            # ``records`` is exactly the consumer's current batch: the last getmany's records.
            self._consumer.acknowledge_all(settle)
            results = await self._consumer.commit_sync()
            for tp, err in results.items():
                if err is not None:
                    count = sum(p.count for p in records if p.topic_partition == tp)
                    out.refused[f"{tp.topic}-{tp.partition}"] = count
                    log.warning("share group broker refused %s of %d records of %s-%d: %s",
                                settle.name, count, tp.topic, tp.partition, err)
        if poll_timeout_ms is not None:
            out.assigned = bool(self._consumer.assignment())
            out.records = await self._consumer.getmany_raw(timeout_ms=poll_timeout_ms)
            if out.records and self._prepare is not None:
                out.prepared = self._prepare(out.records)
        return out

    def take(self, timeout: float) -> Cycle | None:
        """The finished cycle's result (its records become ``held``), or None if still running."""
        fut = self.pending
        if fut is None:
            return Cycle()
        try:
            result = fut.result(timeout)
        except TimeoutError:
            return None
        self.pending = None
        self.held, self.prepared = result.records, result.prepared
        return result

    # -- shutdown -------------------------------------------------------------------------------

    def close(self, timeout: float = 10.0) -> None:
        """Release what is held, leave the group and stop the thread. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.pending is not None:
                # A poll in flight may still hand records over: wait for it, then release them.
                try:
                    self.take(timeout)
                except (ShareConsumerError, OSError) as e:
                    log.info("last poll before close failed: %s", e)
            held, self.held, self.prepared = self.held, [], None
            self._wait(self._submit(self._close(held)), timeout)
        except (ShareConsumerError, TimeoutError, OSError, RuntimeError) as e:
            log.warning("closing the share consumer failed; its records return to the group "
                        "when their locks expire: %s", e)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)

    async def _close(self, held: list[RawPartition]) -> None:
        if held:
            self._consumer.acknowledge_all(AcknowledgeType.RELEASE)
        await self._consumer.close()
