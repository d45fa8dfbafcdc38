"""Writes the dead-letter records of share-partitions to their group's DLQ topic (KIP-1191 shell).

The sans-IO share-partition moves records to ARCHIVING and hands them out
(``SharePartition.take_dead_letters``); this writer, one asyncio task per share-partition with
work, resolves the group's DLQ topic, builds the dead-letter records
(``broker/share/dead_letter.py``), appends them to partition ``source % partitions`` of
the DLQ topic exactly as a Produce would (``broker/log/append.py``: validated,
page cache, then an fsync when the DLQ topic's flush policy asks for one; on a cluster member
whose DLQ partition another broker leads, as a Produce with acks=all to that leader,
``broker/share/dead_letter_remote.py``), and only then calls
``complete_dead_letters``, whose state write moves the records to ARCHIVED at the share
coordinator. A page-cache append survives SIGKILL, like an acks=all produce answered under the
same flush policy.

Failure handling:
- no usable DLQ topic (the group config was cleared, the name no longer has the broker's prefix,
  the topic does not exist and ``errors.deadletterqueue.auto.create.topics.enable`` is false,
  the topic lacks ``errors.deadletterqueue.group.enable=true``, or the dead-letter batch is
  refused): the records are archived without a dead-letter record, as without a DLQ, counted in
  ``shoal_share_dead_letter_skipped_records_total`` and logged (at most once a minute per
  share-partition) with the group, topic, partition, DLQ topic and what to do;
- the append or its fsync fails (KAFKA_STORAGE_ERROR: the log directory is offline; or, to a
  remote leader, the leader moved, is offline or unreachable): the records stay ARCHIVING and
  are retried after ``RETRY_MS`` (finding the leader again); a restart retries them anyway.

Authorization: the broker writes the dead-letter record itself, so the consumer needs no ACL on
the DLQ topic (KIP-1191: that is why the topic must opt in with
``errors.deadletterqueue.group.enable`` and the name must carry the prefix).

Test hook: ``SHOAL_TEST_DLQ_STATE_WRITE_DELAY_MS`` (read once at start) sleeps that long between
a durable dead-letter append and the ARCHIVED state write, so a test can SIGKILL the broker
inside that window. Unset in production, it costs one attribute test per append.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.config import topic_config_value
from broker.log.append import append_partition
from broker.log.topics import Topic
from broker.share.dead_letter_remote import RETRIABLE_APPEND_ERRORS, append_remote, remote_leader
from broker.share.dead_letter import (
    DeadLetterRun,
    dlq_partition,
    dlq_topic_name_problem,
    encode_dead_letters,
    source_records,
    split_runs,
)
from protocol.record_batch import iter_batches
from storage.log import OffsetOutOfRangeError

if TYPE_CHECKING:
    from broker.app import Broker
    from broker.share.partition import SharePartition
    from broker.share.partition_manager import SharePartitionManager

log = logging.getLogger("shoal.share.dlq")

#: How long records whose dead-letter append failed wait before it is tried again.
RETRY_MS = 1000
#: A skipped (no usable DLQ topic) share-partition is logged at most this often.
WARN_INTERVAL_MS = 60_000
_TEST_DELAY_ENV = "SHOAL_TEST_DLQ_STATE_WRITE_DELAY_MS"
_GROUP_ENABLE = "errors.deadletterqueue.group.enable"


class DeadLetterWriter:
    """One drain task per share-partition with ARCHIVING records (module doc)."""

    def __init__(self, broker: Broker, manager: SharePartitionManager) -> None:
        self._broker = broker
        self._manager = manager
        self._tasks: dict[Any, asyncio.Task[None]] = {}
        self._warned: dict[Any, int] = {}
        delay = os.environ.get(_TEST_DELAY_ENV)
        self._test_delay_s = int(delay) / 1000 if delay else 0.0

    def kick(self, sp: SharePartition) -> None:
        """Start draining ``sp``'s dead letters unless that is already under way."""
        if sp.key in self._tasks or not sp.has_dead_letters:
            return
        task = asyncio.get_running_loop().create_task(self._drain(sp))
        self._tasks[sp.key] = task
        task.add_done_callback(lambda _t, key=sp.key: self._tasks.pop(key, None))

    async def stop(self) -> None:
        tasks = list(self._tasks.values())
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------------ draining

    async def _drain(self, sp: SharePartition) -> None:
        manager = self._manager
        try:
            while sp.has_dead_letters and manager.get_loaded(sp.key) is sp:
                runs = sp.take_dead_letters()
                while runs:
                    runs = await self._write(sp, runs)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug here must not leave the records ARCHIVING until a restart
            log.exception("dead-lettering records of share-partition %s failed", sp.key)

    async def _write(self, sp: SharePartition, runs: list[DeadLetterRun]) -> list[DeadLetterRun]:
        """Dead-letter some of ``runs`` (all, or as many as fit one batch); the rest."""
        b = self._broker
        key = sp.key
        names = self._manager.source_name(key)
        if names is None or self._manager.get_loaded(key) is not sp:
            return []  # unloaded meanwhile (reset, topic deleted): the next load retries
        source_topic, source_partition = names
        cfg = b.group_configs.get(key.group_id) if b.group_configs is not None else None
        dlq_name = cfg.dlq_topic if cfg is not None else ""
        target, problem = await self._target(dlq_name)
        if target is not None and target.name == source_topic:
            # Writing a topic's rejects back into it would deliver them to the group again.
            target, problem = None, (f"the DLQ topic is the consumed topic {source_topic} "
                                     "itself; name another topic")
        if target is None:
            self._skip(sp, runs, source_topic, source_partition, dlq_name, problem)
            return []
        payloads = (self._payloads(source_topic, source_partition, runs)
                    if cfg is not None and cfg.dlq_copy_record else None)
        dlq_p = dlq_partition(source_partition, target.partitions)
        batch, n, payloads = self._encode(key.group_id, source_topic, source_partition, runs,
                                          payloads, target)
        leader = remote_leader(b, target.name, dlq_p)
        if leader is None:
            out = append_partition(b, target.name, target.configs, dlq_p, batch)
        else:
            assert b.links is not None
            out = await append_remote(b.links.rpc, leader, target.name, dlq_p, batch)
        done, rest = split_runs(runs, n)
        if out.error in RETRIABLE_APPEND_ERRORS:
            return await self._retry(sp, runs, f"appending to {target.name}-{dlq_p} failed: "
                                     f"{out.error.name} {out.message or ''}")
        if out.error != ErrorCode.none:
            self._skip(sp, done, source_topic, source_partition, target.name,
                       f"the dead-letter batch was refused by {target.name}-{dlq_p}: "
                       f"{out.error.name} {out.message or ''}")
            return rest
        try:
            if leader is None:  # a remote leader answered after its own flush policy
                await b.logs.flush_if_needed(target.name, dlq_p)
        except OSError as exc:
            return await self._retry(sp, runs, f"syncing {target.name}-{dlq_p} failed: {exc}")
        if self._test_delay_s:
            await asyncio.sleep(self._test_delay_s)
        follow = sp.complete_dead_letters(done, b.clock.now_ms(), written=True)
        log.debug("dead-lettered %d record(s) of group %s %s-%d to %s-%d at offset %d", n,
                  key.group_id, source_topic, source_partition, target.name, dlq_p,
                  out.base_offset)
        self._manager.after_dead_letters(sp, follow)
        return rest

    async def _target(self, name: str) -> tuple[Topic | None, str]:
        """The DLQ topic to write to, or None and why not (creating it when allowed)."""
        b = self._broker
        if not name:
            return None, ("the group no longer has errors.deadletterqueue.topic.name; records "
                          "that were waiting for it are archived without a copy")
        problem = dlq_topic_name_problem(name, b.config.get(
            "errors.deadletterqueue.topic.name.prefix"))
        if problem:
            return None, problem
        topic = b.topics.get(name)
        if topic is None:
            if not b.config.get("errors.deadletterqueue.auto.create.topics.enable"):
                return None, (f"DLQ topic {name} does not exist; create it with "
                              f"{_GROUP_ENABLE}=true (or set the broker config "
                              "errors.deadletterqueue.auto.create.topics.enable=true)")
            try:
                # CreateTime pinned (as Kafka 4.4 creates it): a dead-letter record's timestamp
                # is when it was dead-lettered, whatever log.message.timestamp.type says.
                topic = await b.admin_create_topic(
                    name, b.config.get("num.partitions"),
                    {_GROUP_ENABLE: True, "message.timestamp.type": "CreateTime"})
            except Exception as exc:  # TopicError, or it was created meanwhile by another path
                topic = b.topics.get(name)
                if topic is None:
                    return None, f"creating DLQ topic {name} failed: {exc}"
            else:
                log.info("created DLQ topic %s (errors.deadletterqueue.auto.create.topics."
                         "enable)", name)
        if not topic.configs.get(_GROUP_ENABLE, False):
            return None, (f"DLQ topic {name} does not allow share groups to write to it; set "
                          f"its topic config {_GROUP_ENABLE}=true")
        return topic, ""

    def _encode(self, group: str, topic: str, partition: int, runs: list[DeadLetterRun],
                payloads: dict[int, tuple[bytes | None, bytes | None]] | None, target: Topic
                ) -> tuple[bytes, int, dict[int, tuple[bytes | None, bytes | None]] | None]:
        """The dead-letter batch for as many records of ``runs`` as fit the DLQ topic's
        max.message.bytes (at least one; a lone record too large loses its payload)."""
        limit = int(topic_config_value("max.message.bytes", target.configs,
                                       self._broker.config))
        now = self._broker.clock.now_ms()
        most = sum(r.size for r in runs)
        while True:
            batch, n = encode_dead_letters(group, topic, partition, runs, now, payloads, most)
            if len(batch) <= limit or (n == 1 and payloads is None):
                return batch, n, payloads
            if n == 1:
                payloads = None  # the original alone is too large: headers only
            else:
                most = max(1, n // 2)

    def _payloads(self, topic: str, partition: int, runs: list[DeadLetterRun]
                  ) -> dict[int, tuple[bytes | None, bytes | None]]:
        """Original key and value of the offsets of ``runs`` still in the log."""
        lg = self._broker.logs.get(topic, partition)
        out: dict[int, tuple[bytes | None, bytes | None]] = {}
        if lg is None:
            return out
        for run in runs:
            pos = max(run.first_offset, lg.log_start_offset)
            while pos <= run.last_offset and pos < lg.log_end_offset:
                try:
                    data = lg.read(pos, 1 << 20, lg.log_end_offset).data
                except (OffsetOutOfRangeError, OSError):
                    break
                last = max((h.last_offset for _p, h in iter_batches(data)), default=-1)
                if last < pos:
                    break
                out.update(source_records(data, pos, run.last_offset))
                pos = last + 1
        return out

    async def _retry(self, sp: SharePartition, runs: list[DeadLetterRun], why: str
                     ) -> list[DeadLetterRun]:
        key = sp.key
        log.warning("dead-lettering %d record(s) of group %s partition %d failed (%s); they "
                    "stay ARCHIVING and are retried in %d ms", sum(r.size for r in runs),
                    key.group_id, key.partition, why, RETRY_MS)
        sp.retry_dead_letters(runs)
        await asyncio.sleep(RETRY_MS / 1000)
        return []

    def _skip(self, sp: SharePartition, runs: list[DeadLetterRun], topic: str, partition: int,
              dlq: str, why: str) -> None:
        b = self._broker
        now = b.clock.now_ms()
        follow = sp.complete_dead_letters(runs, now, written=False)
        count = sum(r.size for r in runs)
        last = self._warned.get(sp.key)
        if last is None or now - last >= WARN_INTERVAL_MS:
            if len(self._warned) > 10_000:
                self._warned.clear()
            self._warned[sp.key] = now
            log.warning("%d record(s) of share group %s %s-%d were archived without a "
                        "dead-letter record (DLQ topic %r): %s. Further records of this "
                        "share-partition are counted in "
                        "shoal_share_dead_letter_skipped_records_total", count,
                        sp.key.group_id, topic, partition, dlq or "", why,
                        extra={"event": "dead_letter_skipped", "group": sp.key.group_id,
                               "topic": topic, "partition": partition})
        self._manager.after_dead_letters(sp, follow)
