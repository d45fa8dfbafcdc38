"""Share-consume rate of ``client.ShareConsumer`` next to ``confluent_kafka.ShareConsumer`` (issue 7).

One scenario, both clients: N pre-produced 1 KiB records on a topic with ``--partitions``
partitions, one consumer in a new share group (``share.auto.offset.reset=earliest``), implicit
acknowledgement. The rate counts from the first record received to the last (first deliveries
only); ``incl. join`` counts from subscribe. Each client runs in its own process, one after the
other, against the same broker and topic.

    .venv/bin/python -m bench.client_share                    # fresh Shoal broker, 200,000 records
    .venv/bin/python -m bench.client_share --records 20000 --bootstrap localhost:9092
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

CTX = mp.get_context("spawn")


def _produce(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                  "batch.num.messages": 10000})
    value = b"x" * 1024
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(60) == 0


def _confluent(bootstrap: str, group: str, topic: str, n: int, out: Any) -> None:
    from confluent_kafka import ShareConsumer

    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "implicit"})
    t_sub = time.monotonic()
    c.subscribe([topic])
    seen: set[tuple[int, int]] = set()
    first = last = 0.0
    deadline = t_sub + 300
    while len(seen) < n and time.monotonic() < deadline:
        for m in c.poll(0.5):
            if m.error() is None:
                if not seen:
                    first = time.monotonic()
                seen.add((m.partition(), m.offset()))
        last = time.monotonic()
    c.close()
    out.put({"records": len(seen), "first": first, "last": last, "subscribed": t_sub})


async def _ours_async(bootstrap: str, group: str, topic: str, n: int) -> dict[str, Any]:
    from client import ShareConsumer

    async with ShareConsumer(bootstrap, group) as c:
        t_sub = time.monotonic()
        c.subscribe([topic])
        seen: set[tuple[int, int]] = set()
        first = last = 0.0
        deadline = t_sub + 300
        while len(seen) < n and time.monotonic() < deadline:
            for records in (await c.getmany(timeout_ms=500)).values():
                if records and not seen:
                    first = time.monotonic()
                seen.update((r.partition, r.offset) for r in records)
            last = time.monotonic()
    return {"records": len(seen), "first": first, "last": last, "subscribed": t_sub}


def _ours(bootstrap: str, group: str, topic: str, n: int, out: Any) -> None:
    try:
        import uvloop
        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run
    out.put(runner(_ours_async(bootstrap, group, topic, n)))


def _run(target: Any, *args: Any) -> dict[str, Any]:
    q = CTX.Queue()
    proc = CTX.Process(target=target, args=(*args, q))
    proc.start()
    try:
        res: dict[str, Any] = q.get(timeout=400)
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.kill()
    span = max(res["last"] - res["first"], 1e-9)
    res["rate"] = res["records"] / span
    res["rate_incl_join"] = res["records"] / max(res["last"] - res["subscribed"], 1e-9)
    return res


def _set_group(bootstrap: str, group: str) -> None:
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
                    incremental_operation=AlterConfigOpType.SET)])
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result(30)


def run(bootstrap: str, records: int, partitions: int) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"bench-client-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    time.sleep(0.5)
    _produce(bootstrap, topic, records, partitions)
    out: dict[str, Any] = {"records": records, "partitions": partitions}
    for name, target in (("confluent_kafka.ShareConsumer", _confluent),
                         ("client.ShareConsumer", _ours)):
        group = f"{topic}-{name.split('.')[0]}"
        _set_group(bootstrap, group)
        out[name] = _run(target, bootstrap, group, topic, records)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--bootstrap", help="use this broker instead of starting Shoal")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    broker = None
    if args.bootstrap is None:
        from bench.procs import ShoalBroker

        tmp = Path(tempfile.mkdtemp(prefix="shoal-bench-client-"))
        broker = ShoalBroker(tmp / "data", tmp / "broker.log")
        broker.start()
        bootstrap = broker.bootstrap
    else:
        bootstrap = args.bootstrap
    try:
        res = run(bootstrap, args.records, args.partitions)
    finally:
        if broker is not None:
            broker.stop()
    ours, theirs = res["client.ShareConsumer"], res["confluent_kafka.ShareConsumer"]
    print(f"share-consume {args.records:,} x 1 KiB, {args.partitions} partition(s), 1 consumer, "
          f"implicit: client.ShareConsumer {ours['rate']:,.0f} rec/s "
          f"(incl. join {ours['rate_incl_join']:,.0f}) | confluent_kafka.ShareConsumer "
          f"{theirs['rate']:,.0f} rec/s (incl. join {theirs['rate_incl_join']:,.0f}); "
          f"received {ours['records']:,} / {theirs['records']:,}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
