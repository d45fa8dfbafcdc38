"""Benchmark: share-consume rate with per-key ordering (share.ordering=key) next to none.

One partition, ``--records`` records of 100 bytes with ``--keys`` distinct keys (round-robin, so
every key has records all along the partition), consumed by ``--consumers`` confluent_kafka
ShareConsumers (explicit mode, every record ACCEPTed, acknowledgements sent with the next poll),
each polling in its own thread of one process. Two share groups on the same topic, one per
ordering, run one after the other against the same broker. The rate counts from the first record
received to the last first delivery of the run; the run also checks, for ``key``, that no record
of a key reached a consumer while another record of that key was still un-acknowledged by its
consumer, and that a key's records were first delivered in offset order (``violations``, must
be 0), and that every record was delivered.

Target (issue 16): key >= 50% of none.

    .venv/bin/python bench/key_ordering.py                     # fresh Shoal broker, 1,000,000 records (~25 s)
    .venv/bin/python bench/key_ordering.py --records 100000 --bootstrap localhost:9092
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import report  # noqa: E402 - after the path set-up, so the file also runs as a script


def produce(bootstrap: str, topic: str, n: int, keys: int, batch: int = 10_000) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                  "batch.num.messages": batch})
    value = b"x" * 100
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, key=f"key-{i % keys}".encode(), partition=0)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(60) == 0


def set_group(bootstrap: str, group: str, ordering: str) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest",
                    incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("share.ordering", ordering, incremental_operation=AlterConfigOpType.SET)])
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result(30)


def consume(bootstrap: str, group: str, topic: str, n: int, consumers: int,
            timeout: float, commit_async: bool = False) -> dict[str, Any]:
    from confluent_kafka import AcknowledgeType, ShareConsumer

    lock = threading.Lock()
    seen: set[int] = set()
    held: dict[bytes, int] = {}  # key -> consumer holding an un-acknowledged record of it
    first_at: dict[bytes, int] = {}  # key -> highest offset of it delivered so far
    times = {"first": 0.0, "last": 0.0}
    violations = [0]
    stop = threading.Event()

    def worker(idx: int) -> None:
        c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                           "share.acknowledgement.mode": "explicit"})
        c.subscribe([topic])
        mine: list[bytes] = []
        try:
            while not stop.is_set():
                with lock:
                    for k in mine:  # acknowledged: the acks go out with this poll
                        if held.get(k) == idx:
                            del held[k]
                    mine = []
                msgs = c.poll(0.5)
                with lock:
                    now = time.monotonic()
                    for m in msgs:
                        if m.error() is not None:
                            continue
                        k = m.key()
                        if k in held:
                            violations[0] += 1
                        held[k] = idx
                        mine.append(k)
                        if m.offset() not in seen:
                            if m.offset() < first_at.get(k, -1):
                                violations[0] += 1  # a key's first deliveries out of order
                            first_at[k] = m.offset()
                            if not seen:
                                times["first"] = now
                            seen.add(m.offset())
                            times["last"] = now
                    if len(seen) >= n:
                        stop.set()
                for m in msgs:
                    if m.error() is None:
                        c.acknowledge(m, AcknowledgeType.ACCEPT)
                if msgs and commit_async:
                    c.commit_async()
        finally:
            c.close()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(consumers)]
    started = time.monotonic()
    for t in threads:
        t.start()
    stop.wait(timeout)
    stop.set()
    for t in threads:
        t.join(30)
    span = max(times["last"] - times["first"], 1e-9)
    return {"records": len(seen), "rate": len(seen) / span, "seconds": span,
            "incl_join_seconds": times["last"] - started, "violations": violations[0]}


def run(bootstrap: str, records: int, keys: int, consumers: int,
        producer_batch: int = 10_000) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"bench-keyorder-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    time.sleep(0.5)
    produce(bootstrap, topic, records, keys, producer_batch)
    out: dict[str, Any] = {"records": records, "keys": keys, "consumers": consumers,
                           "producer_batch": producer_batch}
    for ordering in ("none", "key"):
        group = f"{topic}-{ordering}"
        set_group(bootstrap, group, ordering)
        out[ordering] = consume(bootstrap, group, topic, records, consumers, timeout=300)
    out["key_over_none"] = out["key"]["rate"] / max(out["none"]["rate"], 1e-9)
    return out


KEYS = 1_000
CONSUMERS = 8
TARGET = 0.5


def scenario_o(settings: Any, system: Any) -> dict[str, Any]:
    """Scenario ``o`` of ``make bench``: ``run`` against the bench's broker with 1,000 keys and 8
    consumers on ``settings.records()`` records (500,000 at scale 1)."""
    out = run(system.bootstrap, settings.records(), KEYS, CONSUMERS)
    return {"records": out["records"], "keys": KEYS, "consumers": CONSUMERS,
            "none_rate": out["none"]["rate"], "key_rate": out["key"]["rate"],
            "key_over_none": round(out["key_over_none"], 3),
            "violations": out["key"]["violations"], "target": TARGET}


def brief(fig: dict[str, Any]) -> str:
    return (f"none {fig.get('none_rate') or 0:,.0f} rec/s, key {fig.get('key_rate') or 0:,.0f} "
            f"rec/s, key/none {fig.get('key_over_none')} (target >= {TARGET}), "
            f"{fig.get('violations')} key violations")


def _g(key: str) -> Any:
    return lambda d: d.get("o", {}).get(key) if isinstance(d.get("o"), dict) else None


O_TITLE = (f"(o) share.ordering=key vs none, 1 partition x {CONSUMERS} consumers, {KEYS:,} keys, "
           f"explicit ACCEPT")
REPORT_ROWS = [
    report.Row("o", O_TITLE, "share.ordering=none", "rec/s", _g("none_rate")),
    report.Row("o", O_TITLE, "share.ordering=key", "rec/s", _g("key_rate")),
    report.Row("o", O_TITLE, "key / none (target >= 0.5)", "ratio", _g("key_over_none"),
               digits=2),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=1_000)
    ap.add_argument("--consumers", type=int, default=8)
    ap.add_argument("--producer-batch", type=int, default=10_000,
                    help="the producer's batch.num.messages (librdkafka's default 10000): log "
                         "batch size, which batch-optimized acquisition hands out whole")
    ap.add_argument("--bootstrap", help="use this broker instead of starting Shoal")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    broker = None
    if args.bootstrap is None:
        from bench.procs import ShoalBroker

        tmp = Path(tempfile.mkdtemp(prefix="shoal-bench-keyorder-"))
        broker = ShoalBroker(tmp / "data", tmp / "broker.log")
        broker.start()
        bootstrap = broker.bootstrap
    else:
        bootstrap = args.bootstrap
    try:
        res = run(bootstrap, args.records, args.keys, args.consumers, args.producer_batch)
    finally:
        if broker is not None:
            broker.stop()
    none, key = res["none"], res["key"]
    print(f"key ordering: {args.records:,} x 100 B, {args.keys:,} keys, producer batches of up "
          f"to {args.producer_batch:,}, 1 partition, "
          f"{args.consumers} confluent ShareConsumers, explicit ACCEPT: "
          f"none {none['rate']:,.0f} rec/s ({none['records']:,} in {none['seconds']:.1f} s) | "
          f"key {key['rate']:,.0f} rec/s ({key['records']:,} in {key['seconds']:.1f} s, "
          f"{key['violations']} key violations) | key/none {res['key_over_none']:.0%} "
          f"(target >= 50%)")
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
