"""Example share consumer (KIP-932) for Shoal, with confluent_kafka.ShareConsumer.

Run several with the same group: each record goes to one of them. Options, also from the
environment:

    --bootstrap     SHOAL_BOOTSTRAP     (localhost:9092)
    --topic         SHOAL_TOPIC         (orders)
    --group         SHOAL_GROUP         (orders-workers)
    --count         SHOAL_COUNT         (0)    exit after this many records; 0: no limit
    --idle-timeout  SHOAL_IDLE_TIMEOUT  (10)   exit after this many seconds without a record
                                               (when no --count is given)
    --timeout       SHOAL_TIMEOUT       (60)   exit after this many seconds in any case
    --mode          SHOAL_ACK_MODE      (implicit) or explicit (ACCEPT each record, commit)
    --reset         SHOAL_RESET         (earliest) share.auto.offset.reset set on the group
                                               before joining; "keep" leaves it alone
    --client-id     SHOAL_CLIENT_ID     (share-consumer)
    --quiet                             do not print one line per record

Prints ``record <partition> <offset> <delivery count> <key> <value>`` per record and a final
summary line ``{"client": ..., "received": n}`` (JSON). Exit status 0 when ``--count`` records
arrived or, with no count, when the stream went idle (several consumers share the records, so
one may get none); 1 when ``--timeout`` ran out first.
SIGTERM/SIGINT end the run cleanly: the consumer is closed, which commits its acknowledgements
and leaves the group.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from typing import Any

from confluent_kafka import AcknowledgeType, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin import ResourceType


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", default=_env("SHOAL_BOOTSTRAP", "localhost:9092"))
    p.add_argument("--topic", default=_env("SHOAL_TOPIC", "orders"))
    p.add_argument("--group", default=_env("SHOAL_GROUP", "orders-workers"))
    p.add_argument("--count", type=int, default=int(_env("SHOAL_COUNT", "0")))
    p.add_argument("--idle-timeout", type=float, default=float(_env("SHOAL_IDLE_TIMEOUT", "10")))
    p.add_argument("--timeout", type=float, default=float(_env("SHOAL_TIMEOUT", "60")))
    p.add_argument("--mode", choices=("implicit", "explicit"),
                   default=_env("SHOAL_ACK_MODE", "implicit"))
    p.add_argument("--reset", default=_env("SHOAL_RESET", "earliest"),
                   help="share.auto.offset.reset for the group (earliest, latest, by_duration:"
                        "PT1H) or 'keep'")
    p.add_argument("--client-id", default=_env("SHOAL_CLIENT_ID", "share-consumer"))
    p.add_argument("--quiet", action="store_true")
    return p.parse_args(argv)


def set_group_offset_reset(bootstrap: str, group: str, value: str, deadline: float) -> None:
    """Set the group's share.auto.offset.reset (a group config, IncrementalAlterConfigs).

    It only matters for share-partitions the group has never consumed: with the default,
    ``latest``, a consumer that starts after the producer would see none of its records.

    Raises:
        TimeoutError: the broker did not accept the change before ``deadline``.
    """
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", value,
                    incremental_operation=AlterConfigOpType.SET)])
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            for fut in admin.incremental_alter_configs([resource]).values():
                fut.result(timeout=max(0.1, min(10.0, deadline - time.monotonic())))
            return
        except Exception as exc:  # the broker may still be starting: retry until the deadline
            last = exc
            time.sleep(0.5)
    raise TimeoutError(f"could not set share.auto.offset.reset on group {group}: {last}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    deadline = started + args.timeout
    stop = False

    def on_signal(_signum: int, _frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    if args.reset != "keep":
        try:
            set_group_offset_reset(args.bootstrap, args.group, args.reset, deadline)
        except TimeoutError as exc:
            print(f"{args.client_id}: {exc}", file=sys.stderr)
            return 1

    consumer = ShareConsumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": args.client_id,
        "share.acknowledgement.mode": args.mode,
    })
    consumer.subscribe([args.topic])
    received = 0
    errors = 0
    last_record = started
    done = False
    try:
        while not stop and not done:
            now = time.monotonic()
            if now >= deadline:
                break
            if not args.count and now - last_record >= args.idle_timeout:
                done = True
                break
            acked = False
            for msg in consumer.poll(0.5):
                err = msg.error()
                if err is not None:
                    errors += 1
                    print(f"{args.client_id}: error: {err}", file=sys.stderr, flush=True)
                    continue
                received += 1
                last_record = time.monotonic()
                if not args.quiet:
                    key = (msg.key() or b"").decode(errors="replace")
                    value = (msg.value() or b"").decode(errors="replace")
                    print(f"record {msg.partition()} {msg.offset()} {msg.delivery_count()} "
                          f"{key} {value}", flush=True)
                if args.mode == "explicit":
                    consumer.acknowledge(msg, AcknowledgeType.ACCEPT)
                    acked = True
                if args.count and received >= args.count:
                    done = True
            if acked:
                consumer.commit_async()
        if args.mode == "explicit":
            consumer.commit_sync(10)
    finally:
        consumer.close()  # implicit mode: acknowledges the last batch, then leaves the group
    print(json.dumps({"client": args.client_id, "group": args.group, "received": received,
                      "errors": errors, "seconds": round(time.monotonic() - started, 2)}),
          flush=True)
    return 0 if done or stop else 1


if __name__ == "__main__":
    sys.exit(main())
