"""Benchmark clients. Each ``*_worker`` runs in its own (spawned) process, uses the real
confluent_kafka clients, times itself with ``time.monotonic`` (one clock for every process on the
machine) and puts one result dict on its queue. The admin helpers run in the parent.
"""

from __future__ import annotations

import os
import struct
import threading
import time
import traceback
from array import array
from typing import Any

# Latency records start with: produce time (monotonic ns), sequence number, measured 1 / warmup 0
LAT_HEADER = struct.Struct(">qqB")

THROUGHPUT_PRODUCER = {
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "batch.num.messages": 10_000,
    "queue.buffering.max.messages": 500_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "compression.type": "none",
    "delivery.report.only.error": True,
}

LATENCY_PRODUCER = {
    "acks": "all",
    "linger.ms": 1,
    "compression.type": "none",
    "delivery.report.only.error": True,
}


def _watch_parent() -> None:
    """Exit if the benchmark process dies, so that no client outlives it."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                os._exit(3)
            time.sleep(0.5)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def payload(size: int) -> bytes:
    """A value of ``size`` bytes that does not compress to nothing (compression is off anyway)."""
    seed = os.urandom(64)
    return (seed * (size // 64 + 1))[:size]


# ---------------------------------------------------------------------------------------------
# Producer


def produce_worker(p: dict[str, Any], out: Any) -> None:
    """Produce ``count`` records of ``size`` bytes round-robin over ``partitions`` partitions.

    Reports the time from the first ``produce()`` to the end of ``flush()`` (every record acked).
    """
    _watch_parent()
    try:
        from confluent_kafka import KafkaException, Producer

        errors: list[str] = []

        def on_error(err: Any, _msg: Any) -> None:
            if err is not None and len(errors) < 1000:
                errors.append(str(err))

        conf = {"bootstrap.servers": p["bootstrap"], "client.id": f"bench-producer-{p['index']}",
                **THROUGHPUT_PRODUCER, **p.get("config", {})}
        prod = Producer(conf)
        topic, count, parts, value = p["topic"], p["count"], p["partitions"], payload(p["size"])
        # Metadata first: the clock starts when the producer knows where to send.
        prod.list_topics(topic, timeout=30)
        produce, poll = prod.produce, prod.poll
        start = time.monotonic()
        i = 0
        while i < count:
            try:
                produce(topic, value, partition=i % parts, on_delivery=on_error)
                i += 1
            except BufferError:
                poll(0.005)
            if i % 1000 == 0:
                poll(0)
        left = prod.flush(p.get("timeout", 300))
        end = time.monotonic()
        if left:
            raise KafkaException(f"{left} records still unacknowledged after flush")
        out.put({"ok": True, "records": count, "t_start": start, "t_end": end,
                 "seconds": end - start, "errors": len(errors), "first_error": errors[:1]})
    except Exception:  # noqa: BLE001 - reported to the parent
        out.put({"ok": False, "error": traceback.format_exc(limit=5)})


# ---------------------------------------------------------------------------------------------
# Share consumer


def share_consume_worker(p: dict[str, Any], counter: Any, ready: Any, seen: Any, go: Any,
                         stop: Any, out: Any) -> None:
    """A confluent_kafka.ShareConsumer (``p['mode']``: implicit or explicit acknowledgement).

    ``counter`` (shared) counts first deliveries (delivery count 1) over all consumers; the
    consumer that brings it to ``p['target']`` sets ``stop``. ``ready`` counts created consumers;
    ``seen[index]`` is this consumer's number of deliveries. The consumer is created before
    ``go`` is set and subscribes after, so every member of the group joins at the same time.
    With ``p['latency']`` each record's produce time (in its value) is subtracted from the time
    ``poll()`` returned it.
    """
    _watch_parent()
    consumer = None
    try:
        from confluent_kafka import AcknowledgeType, ShareConsumer

        explicit = p["mode"] == "explicit"
        conf = {"bootstrap.servers": p["bootstrap"], "group.id": p["group"],
                "client.id": f"bench-share-{p['index']}",
                "share.acknowledgement.mode": p["mode"],
                "log_level": 3,  # not the "share consumer is in Preview" warning per process
                **p.get("config", {})}
        consumer = ShareConsumer(conf)
        with ready.get_lock():
            ready.value += 1
        idx, target, latency = p["index"], p["target"], p.get("latency", False)
        if not go.wait(p.get("go_timeout", 120)):
            raise TimeoutError("never told to start")
        t_go = time.monotonic()
        consumer.subscribe([p["topic"]])
        deadline = t_go + p["timeout"]
        accept = AcknowledgeType.ACCEPT
        fresh_total = redelivered = errors = deliveries = 0
        first_error = None
        t_first = t_last = None
        lat = array("q")
        unpack = LAT_HEADER.unpack_from
        polls = 0
        while not stop.is_set():
            now = time.monotonic()
            if now > deadline:
                break
            msgs = consumer.poll(0.1)
            polls += 1
            if not msgs:
                continue
            recv_ns = time.monotonic_ns()
            fresh = 0
            for msg in msgs:
                if msg.error() is not None:
                    errors += 1
                    if first_error is None:
                        first_error = str(msg.error())
                    continue
                dc = msg.delivery_count()
                if latency:
                    ts, _seq, measured = unpack(msg.value() or bytes(LAT_HEADER.size))
                    if measured:
                        if dc is None or dc <= 1:
                            fresh += 1
                            lat.append(recv_ns - ts)
                        else:
                            redelivered += 1
                elif dc is None or dc <= 1:
                    fresh += 1
                else:
                    redelivered += 1
                if explicit:
                    consumer.acknowledge(msg, accept)
            deliveries += len(msgs)
            seen[idx] = deliveries
            t_last = recv_ns / 1e9
            if t_first is None:
                t_first = t_last
            if fresh:
                fresh_total += fresh
                with counter.get_lock():
                    counter.value += fresh
                    total = counter.value
                if total >= target:
                    stop.set()
        t_stop = time.monotonic()
        if explicit:
            try:
                consumer.commit_sync(10)
            except Exception:  # noqa: BLE001 - the figures are taken already
                pass
        consumer.close()
        consumer = None
        out.put({"ok": True, "index": idx, "records": fresh_total, "redelivered": redelivered,
                 "deliveries": deliveries, "errors": errors, "first_error": first_error,
                 "t_go": t_go, "t_first": t_first, "t_last": t_last, "t_stop": t_stop,
                 "t_closed": time.monotonic(), "polls": polls,
                 "latencies_ns": lat.tobytes() if latency else None})
    except Exception:  # noqa: BLE001
        out.put({"ok": False, "index": p.get("index"), "error": traceback.format_exc(limit=5)})
    finally:
        if consumer is not None:
            try:
                consumer.close()
            except Exception:  # noqa: BLE001
                pass


# ---------------------------------------------------------------------------------------------
# Fixed-rate producer for the end-to-end latency scenario


def latency_produce_worker(p: dict[str, Any], seen: Any, out: Any) -> None:
    """Produce at ``p['rate']`` records/s: warmup records until every consumer has received one
    (at least ``warmup_min`` s, at most ``warmup_max`` s), then ``rate * duration`` measured
    records. Each value starts with LAT_HEADER (its produce time is taken just before
    ``produce()``)."""
    _watch_parent()
    try:
        from confluent_kafka import Producer

        errors: list[str] = []

        def on_error(err: Any, _msg: Any) -> None:
            if err is not None and len(errors) < 1000:
                errors.append(str(err))

        conf = {"bootstrap.servers": p["bootstrap"], "client.id": "bench-latency-producer",
                **LATENCY_PRODUCER, **p.get("config", {})}
        prod = Producer(conf)
        topic, rate, size = p["topic"], float(p["rate"]), p["size"]
        pad = payload(size - LAT_HEADER.size)
        prod.list_topics(topic, timeout=30)
        n_consumers = p["consumers"]
        total = int(rate * p["duration"])

        def send(seq: int, measured: int) -> None:
            while True:
                try:
                    value = LAT_HEADER.pack(time.monotonic_ns(), seq, measured) + pad
                    prod.produce(topic, value, partition=seq % p["partitions"],
                                 on_delivery=on_error)
                    return
                except BufferError:
                    prod.poll(0.001)

        # Warmup at the same rate until all consumers have joined and received records.
        t0 = time.monotonic()
        sent = 0
        warm_ok = False
        while True:
            now = time.monotonic()
            elapsed = now - t0
            if elapsed >= p["warmup_min"] and all(seen[i] > 0 for i in range(n_consumers)):
                warm_ok = True
                break
            if elapsed >= p["warmup_max"]:
                break
            due = int(elapsed * rate)
            while sent < due:
                send(sent, 0)
                sent += 1
            prod.poll(0)
            time.sleep(0.0005)
        warmup_records = sent
        # Measured phase.
        t1 = time.monotonic()
        i = 0
        while i < total:
            due = min(total, int((time.monotonic() - t1) * rate) + 1)
            while i < due:
                send(sent, 1)
                sent += 1
                i += 1
            prod.poll(0)
            time.sleep(0.0005)
        t2 = time.monotonic()
        prod.flush(60)
        out.put({"ok": True, "measured": total, "warmup_records": warmup_records,
                 "t_measure": t1, "t_end": t2,
                 "warmup_s": t1 - t0, "warmup_all_consumers": warm_ok,
                 "seconds": t2 - t1, "achieved_rate": total / (t2 - t1) if t2 > t1 else None,
                 "errors": len(errors), "first_error": errors[:1]})
    except Exception:  # noqa: BLE001
        out.put({"ok": False, "error": traceback.format_exc(limit=5)})


# ---------------------------------------------------------------------------------------------
# Admin (in the parent process)


class Admin:
    """Topic and group-config set-up through confluent_kafka's AdminClient (any Kafka broker)."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka.admin import AdminClient

        self.bootstrap = bootstrap
        self.client = AdminClient({"bootstrap.servers": bootstrap})
        self.created: list[str] = []
        self.groups: list[str] = []

    def create_topic(self, name: str, partitions: int, timeout: float = 30.0) -> None:
        from confluent_kafka.admin import NewTopic

        fut = self.client.create_topics([NewTopic(name, partitions, 1)],
                                        operation_timeout=timeout)[name]
        try:
            fut.result(timeout)
        except Exception as exc:
            raise RuntimeError(f"could not create topic {name} ({partitions} partitions) on "
                               f"{self.bootstrap}: {exc!r}") from exc
        self.created.append(name)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            md = self.client.list_topics(name, timeout=5).topics.get(name)
            if (md is not None and md.error is None and len(md.partitions) == partitions
                    and all(pm.leader >= 0 for pm in md.partitions.values())):
                return
            time.sleep(0.1)
        raise TimeoutError(f"topic {name} has no leaders after {timeout}s")

    def set_group_configs(self, group: str, configs: dict[str, str], timeout: float = 30.0) -> None:
        """IncrementalAlterConfigs SET on the share group (ConfigResource GROUP)."""
        from confluent_kafka.admin import (
            AlterConfigOpType,
            ConfigEntry,
            ConfigResource,
            ResourceType,
        )

        res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()])
        for fut in self.client.incremental_alter_configs([res]).values():
            try:
                fut.result(timeout)
            except Exception as exc:
                raise RuntimeError(f"could not set {configs} on share group {group} at "
                                   f"{self.bootstrap} (share groups enabled?): {exc!r}") from exc
        if group not in self.groups:
            self.groups.append(group)

    def close(self) -> None:
        """Drop the client (librdkafka destroys it), before its broker goes away."""
        self.client = None  # type: ignore[assignment]

    def delete_created(self, timeout: float = 30.0) -> None:
        """Delete the share groups and topics this run made (best effort)."""
        futs: dict[str, Any] = {}
        if self.groups:
            futs.update(self.client.delete_consumer_groups(self.groups, request_timeout=timeout))
        if self.created:
            futs.update(self.client.delete_topics(self.created, operation_timeout=timeout))
        for fut in futs.values():
            try:
                fut.result(timeout)
            except Exception:  # noqa: BLE001 - best effort clean-up
                pass
        self.created.clear()
        self.groups.clear()
