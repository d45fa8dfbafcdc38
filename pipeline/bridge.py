"""A ``client.ShareConsumer`` run on an event loop in a thread of its own, driven synchronously.

Spark calls the stream reader from a plain Python process (the driver's streaming-source
runner) that blocks on its socket between calls. The consumer needs to keep heartbeating and
renewing locks in those gaps, so it lives on a private event loop in a daemon thread and the
reader calls into it with ``run_coroutine_threadsafe``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from client import AcknowledgeType, ShareConsumer, ShareRecord
from client.errors import ShareConsumerError

log = logging.getLogger("pipeline.share_source")

T = TypeVar("T")

# Every call gets this much longer than its own timeout before the reader gives up on it.
_SLACK_S = 30.0


class ConsumerThread:
    """One explicit-acknowledgement share-group member, polled one micro-batch at a time.

    The records of the last ``poll`` stay acquired (and, with ``renew_locks``, renewed) until
    ``settle`` accepts or releases all of them; only then may the next ``poll`` run.
    """

    def __init__(self, bootstrap_servers: str, group_id: str, topics: tuple[str, ...], *,
                 max_records: int, renew_locks: bool, client_id: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="shoal-share-source",
                                        daemon=True)
        self._thread.start()
        self._consumer = ShareConsumer(
            bootstrap_servers, group_id, acknowledgement_mode="explicit",
            max_poll_records=max_records, acquire_mode="record_limit", client_id=client_id,
            renew_locks=renew_locks)
        self.held: list[ShareRecord] = []
        self._closed = False
        self.call(self._start(topics), timeout=60)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    async def _start(self, topics: tuple[str, ...]) -> None:
        await self._consumer.start()
        self._consumer.subscribe(topics)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout + _SLACK_S)

    def poll(self, timeout_ms: int) -> list[ShareRecord]:
        """Fetch up to ``max_records`` records; they are held until ``settle``."""
        if self.held:
            raise RuntimeError("poll() while a batch is held: settle() it first")
        batch = self.call(self._consumer.getmany(timeout_ms=timeout_ms), timeout_ms / 1000)
        self.held = [r for records in batch.values() for r in records]
        return self.held

    def settle(self, kind: AcknowledgeType) -> dict[str, int]:
        """Acknowledge every held record with ``kind`` and wait for the broker's answer.

        Returns ``{"topic-partition": records}`` for partitions whose acknowledgement the
        broker refused (their locks had lapsed), empty when all went through.
        """
        if not self.held:
            return {}
        records, self.held = self.held, []
        for r in records:
            self._consumer.acknowledge(r, kind)
        results = self.call(self._consumer.commit_sync(), 60)
        refused: dict[str, int] = {}
        for tp, err in results.items():
            if err is not None:
                count = sum(1 for r in records if r.topic_partition == tp)
                refused[f"{tp.topic}-{tp.partition}"] = count
                log.warning("share group broker refused %s of %d records of %s-%d: %s",
                            kind.name, count, tp.topic, tp.partition, err)
        return refused

    def close(self, timeout: float = 10.0) -> None:
        """Release what is held, leave the group and stop the thread. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.held:
                for r in self.held:
                    self._consumer.acknowledge(r, AcknowledgeType.RELEASE)
                self.held = []
            self.call(self._consumer.close(), timeout)
        except (ShareConsumerError, TimeoutError, OSError, RuntimeError) as e:
            log.warning("closing the share consumer failed; its records return to the group "
                        "when their locks expire: %s", e)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)
