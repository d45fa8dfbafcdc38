"""The control pair of the hostile bench (scenario h): what a well-behaved client sees.

``control_worker`` produces one record every ``1/rate`` s (acks=all) and consumes it with an
assigned ``confluent_kafka`` consumer in the same process, and reports each record's send time
and round trip; ``control_figures`` turns them into p50/p99/max for a time window (a record
that never arrived counts as lost, with its wait until the end).
"""

from __future__ import annotations

import struct
import time
import traceback
from array import array
from typing import Any


def control_worker(p: dict[str, Any], out: Any, ready: Any, stop: Any) -> None:
    """Produce one record every 1/rate s (acks=all) and consume it with an assigned consumer;
    each record's round trip is produce() to its arrival from poll(). Reports
    (send time, round trip ms or -1 if it never arrived) pairs."""
    from bench.clients import _watch_parent

    _watch_parent()
    try:
        from confluent_kafka import Consumer, Producer, TopicPartition

        topic = p["topic"]
        prod = Producer({"bootstrap.servers": p["bootstrap"], "acks": "all", "linger.ms": 0,
                         "client.id": "hostile-control-producer", "log_level": 3})
        cons = Consumer({"bootstrap.servers": p["bootstrap"], "group.id": "hostile-control",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                         "fetch.min.bytes": 1, "client.id": "hostile-control-consumer",
                         "log_level": 3})
        cons.assign([TopicPartition(topic, 0, 0)])
        prod.list_topics(topic, timeout=30)
        sent = array("d")
        got = array("d")
        interval = 1.0 / p["rate"]
        seq = 0
        next_at = time.monotonic()
        ready_set = False
        while not stop.is_set():
            now = time.monotonic()
            if now >= next_at:
                t = time.monotonic()
                prod.produce(topic, struct.pack(">qd", seq, t), partition=0)
                prod.poll(0)
                sent.append(t)
                got.append(-1.0)
                seq += 1
                next_at += interval
                if next_at < now:  # we fell behind (the broker stalled us): do not burst
                    next_at = now + interval
            # poll(), not consume(n): consume waits for n records or the whole timeout.
            msg = cons.poll(max(0.0, min(0.05, next_at - time.monotonic())))
            if msg is not None and msg.error() is None and msg.value() is not None \
                    and len(msg.value()) == 16:
                arrived = time.monotonic()
                i, _t = struct.unpack(">qd", msg.value())
                if 0 <= i < len(got) and got[i] < 0:
                    got[i] = (arrived - sent[i]) * 1000
                    if not ready_set:
                        ready.set()
                        ready_set = True
        # Let records in flight arrive (bounded).
        deadline = time.monotonic() + p.get("drain_s", 5.0)
        while time.monotonic() < deadline and any(v < 0 for v in got[-200:]):
            msg = cons.poll(0.1)
            if msg is not None and msg.error() is None and msg.value() is not None \
                    and len(msg.value()) == 16:
                i, _t = struct.unpack(">qd", msg.value())
                if 0 <= i < len(got) and got[i] < 0:
                    got[i] = (time.monotonic() - sent[i]) * 1000
        prod.flush(5)
        cons.close()
        out.put({"ok": True, "sent": sent.tobytes(), "rtt_ms": got.tobytes()})
    except Exception:  # noqa: BLE001
        out.put({"ok": False, "error": traceback.format_exc(limit=5)})


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    k = min(len(values) - 1, max(0, int(round(q / 100 * len(values) + 0.5)) - 1))
    return values[k]


def control_figures(sent: list[float], rtt: list[float], t0: float, t1: float,
                    end: float) -> dict[str, Any]:
    """Round trips of the records sent in [t0, t1); a lost record counts as ``end - sent``."""
    vals = []
    lost = 0
    for ts, ms in zip(sent, rtt, strict=True):
        if t0 <= ts < t1:
            if ms < 0:
                lost += 1
                ms = (end - ts) * 1000
            vals.append(ms)
    vals.sort()
    p50, p99 = _percentile(vals, 50), _percentile(vals, 99)
    return {"round_trips": len(vals), "lost": lost,
            "p50_ms": None if p50 is None else round(p50, 2),
            "p99_ms": None if p99 is None else round(p99, 2),
            "max_ms": round(vals[-1], 2) if vals else None}
