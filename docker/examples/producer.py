"""Example producer for a Shoal share-group demo: create a topic and write N records.

Every option can also come from the environment (handy in docker-compose):

    --bootstrap   SHOAL_BOOTSTRAP   (localhost:9092)
    --topic       SHOAL_TOPIC       (orders)
    --partitions  SHOAL_PARTITIONS  (3)   used only when the topic is created
    --count       SHOAL_COUNT       (1000)
    --timeout     SHOAL_TIMEOUT     (60)  seconds for the whole run, waiting for the broker included

Records have keys ``order-<n>`` and JSON values ``{"order": n}``. Prints one summary line and exits
0 once every record is acknowledged by the broker (acks=all), 1 on timeout or a delivery error.
Needs only ``confluent-kafka``; it runs the same inside the compose setup and against a broker
on the host (``python docker/examples/producer.py --bootstrap 127.0.0.1:9092``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", default=_env("SHOAL_BOOTSTRAP", "localhost:9092"))
    p.add_argument("--topic", default=_env("SHOAL_TOPIC", "orders"))
    p.add_argument("--partitions", type=int, default=int(_env("SHOAL_PARTITIONS", "3")))
    p.add_argument("--count", type=int, default=int(_env("SHOAL_COUNT", "1000")))
    p.add_argument("--timeout", type=float, default=float(_env("SHOAL_TIMEOUT", "60")))
    return p.parse_args(argv)


def ensure_topic(admin: AdminClient, topic: str, partitions: int, deadline: float) -> None:
    """Create the topic unless it exists, retrying while the broker is still starting.

    Raises:
        TimeoutError: the broker could not be reached before ``deadline``.
    """
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the broker did not answer in time")
        try:
            fut = admin.create_topics([NewTopic(topic, partitions, 1)],
                                      operation_timeout=min(10.0, remaining))[topic]
            fut.result(timeout=min(15.0, remaining))
            print(f"producer: created topic {topic} with {partitions} partition(s)", flush=True)
            return
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return
            if not err.retriable() and err.code() != KafkaError._TRANSPORT:
                raise
        except Exception:  # a future timing out while the broker starts: try again
            pass
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    deadline = time.monotonic() + args.timeout
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    try:
        ensure_topic(admin, args.topic, args.partitions, deadline)
    except (TimeoutError, KafkaException) as exc:
        print(f"producer: cannot create topic {args.topic}: {exc}", file=sys.stderr)
        return 1

    failures: list[str] = []
    delivered = 0

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        nonlocal delivered
        if err is not None:
            failures.append(str(err))
        else:
            delivered += 1

    producer = Producer({"bootstrap.servers": args.bootstrap, "acks": "all", "linger.ms": 5,
                         "enable.idempotence": True})
    for n in range(args.count):
        while True:
            try:
                producer.produce(args.topic, key=f"order-{n}".encode(),
                                 value=json.dumps({"order": n}).encode(), on_delivery=on_delivery)
                break
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.05)
        producer.poll(0)
    remaining = max(0.0, deadline - time.monotonic())
    left = producer.flush(remaining)
    if left or failures or delivered != args.count:
        print(f"producer: {delivered}/{args.count} records delivered to {args.topic} "
              f"({left} pending, {len(failures)} failed: {failures[:3]})", file=sys.stderr)
        return 1
    print(f"producer: delivered {delivered} records to {args.topic}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
