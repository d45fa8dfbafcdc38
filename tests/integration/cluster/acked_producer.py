"""A producer process that records what was acknowledged (run inside a node's namespace).

    python -m tests.integration.cluster.acked_producer BOOTSTRAP TOPIC PARTITION PREFIX OUT

Produces ``PREFIX-0``, ``PREFIX-1``, ... to one partition with an idempotent, ``acks=all``
confluent-kafka producer, about 50 records/s, until SIGTERM; then it flushes (bounded) and
exits. Each record whose delivery was acknowledged is appended to OUT as one line, flushed at
once, so a reader always sees exactly the acknowledged values (never one that was not).
Delivery failures are counted on stderr; they are not acknowledgements.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

from confluent_kafka import Producer


def main(bootstrap: str, topic: str, partition: int, prefix: str, out_path: str) -> None:
    stop = False

    def on_term(*_: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    failed = 0
    with open(out_path, "a", buffering=1) as out:
        def on_delivery(err: Any, msg: Any) -> None:
            nonlocal failed
            if err is None:
                out.write(msg.value().decode() + "\n")
            else:
                failed += 1

        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 5, "message.timeout.ms": 300000,
                      "reconnect.backoff.max.ms": 1000})
        i = 0
        while not stop:
            p.produce(topic, f"{prefix}-{i}".encode(), partition=partition,
                      on_delivery=on_delivery)
            i += 1
            p.poll(0.02)
        left = p.flush(30)
    print(f"acked_producer: sent {i}, failed {failed}, unflushed {left}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
