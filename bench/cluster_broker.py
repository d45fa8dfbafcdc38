"""``shoal broker`` with the cluster benchmark's counters on ``/metrics`` (``bench/cluster.py``).

``python -m bench.cluster_broker broker ...`` takes the same arguments as ``shoal``. Before the
broker starts, it wraps two functions at run time (the product code is unchanged) and adds a
collector to the broker's metric registry with what they count:

- ``shoal_bench_share_fetch_with_acks_total`` and ``shoal_bench_share_acknowledge_with_acks_total``:
  ShareFetch and ShareAcknowledge requests carrying acknowledgements, i.e. acknowledgement
  batches (librdkafka piggybacks a poll's acknowledgements on its next ShareFetch; the broker's
  own metrics count requests with and without them together);
- ``shoal_bench_state_flushes_total{op}``: flushes of the network persister (one
  ``StateBatcher.sends`` call that put at least one request of that op on the wire);
- ``shoal_bench_state_flush_requests_total{op}``, ``shoal_bench_state_flush_keys_total{op}``:
  the requests those flushes sent and the share-partition keys they carried;
- ``shoal_bench_state_flush_over_one_total{op}``: flushes that sent more than one request of
  that op to one destination broker (the issue's batching target is that this stays 0 for
  WriteShareGroupState);
- ``shoal_bench_state_flush_max_per_destination{op}``: the most requests of that op one flush
  sent to one destination.

Each count is a dict update per request or per flush, nothing per record, so the CPU figures
of a broker run this way stay comparable with a plain one (the single-broker baseline of the
cluster benchmark runs the same way).

With ``SHOAL_BENCH_CLUSTER_PROFILE=DIR`` in its environment the broker also installs cProfile
switched by signals, as ``bench/profiled_broker.py``: SIGUSR1 starts it, SIGUSR2 stops it and
writes ``DIR/broker-<pid>.pstats`` (``bench/cluster.py`` signals around each measured phase).
``SHOAL_BENCH_CLUSTER_PROFILE_CLOCK=thread`` makes it count the event loop thread's CPU time
rather than wall time.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterable
from typing import Any

COUNTS: Counter[str] = Counter()
MAX_PER_DEST: Counter[str] = Counter()


def _install() -> None:
    from broker import broker_metrics
    from broker.handlers import share_acknowledge, share_fetch
    from broker.metrics import Family
    from persister.network_batcher import StateBatcher

    def counting(handler: Any, name: str) -> Any:
        async def run(ctx: Any, req: Any) -> Any:
            if any(p.acknowledgement_batches for t in req.topics for p in t.partitions):
                COUNTS[name] += 1
            return await handler(ctx, req)
        return run

    share_fetch._share_fetch = counting(share_fetch._share_fetch,  # type: ignore[assignment]
                                        "share_fetch_with_acks")
    share_acknowledge._share_acknowledge = counting(  # type: ignore[assignment]
        share_acknowledge._share_acknowledge, "share_acknowledge_with_acks")

    sends = StateBatcher.sends

    def counting_sends(self: StateBatcher, now_ms: int) -> list[Any]:
        out = sends(self, now_ms)
        if out:
            per: Counter[tuple[str, int]] = Counter((s.op.name, s.node_id) for s in out)
            for op in {op for op, _ in per}:
                COUNTS[f"flushes:{op}"] += 1
                most = max(n for (o, _), n in per.items() if o == op)
                COUNTS[f"over_one:{op}"] += most > 1
                MAX_PER_DEST[op] = max(MAX_PER_DEST[op], most)
            for s in out:
                COUNTS[f"requests:{s.op.name}"] += 1
                COUNTS[f"keys:{s.op.name}"] += len(s.call_ids)
        return out

    StateBatcher.sends = counting_sends  # type: ignore[method-assign]

    def collect() -> Iterable[Family]:
        yield Family("shoal_bench_share_fetch_with_acks_total", "counter",
                     "ShareFetch requests carrying acknowledgements (bench wrapper).",
                     samples=[((), COUNTS["share_fetch_with_acks"])])
        yield Family("shoal_bench_share_acknowledge_with_acks_total", "counter",
                     "ShareAcknowledge requests carrying acknowledgements (bench wrapper).",
                     samples=[((), COUNTS["share_acknowledge_with_acks"])])
        for name, kind, help_ in (
                ("flushes", "state_flushes_total", "Persister flushes sending this op."),
                ("requests", "state_flush_requests_total", "Requests those flushes sent."),
                ("keys", "state_flush_keys_total", "Share-partition keys in those requests."),
                ("over_one", "state_flush_over_one_total",
                 "Flushes with more than one request of this op to one destination.")):
            fam = Family(f"shoal_bench_{kind}", "counter", help_, ("op",))
            for key, n in sorted(COUNTS.items()):
                if key.startswith(name + ":"):
                    fam.add((key.split(":", 1)[1],), n)
            yield fam
        fam = Family("shoal_bench_state_flush_max_per_destination", "gauge",
                     "Most requests of this op one flush sent to one destination.", ("op",))
        for op, n in sorted(MAX_PER_DEST.items()):
            fam.add((op,), n)
        yield fam

    init = broker_metrics.BrokerMetrics.__init__

    def init_with_bench(self: Any, broker: Any) -> None:
        init(self, broker)
        self.registry.add_collector(collect)

    broker_metrics.BrokerMetrics.__init__ = init_with_bench  # type: ignore[method-assign]


def _install_profiler(out_dir: str) -> None:
    import cProfile
    import os
    import signal
    import time

    # Wall time by default. SHOAL_BENCH_CLUSTER_PROFILE_CLOCK=thread counts the event loop's
    # CPU time instead: three brokers on two cores are preempted inside their syscalls, which
    # a wall clock bills to whatever call was running (a socket write waking a consumer).
    clock = os.environ.get("SHOAL_BENCH_CLUSTER_PROFILE_CLOCK", "wall")
    profile = (cProfile.Profile(time.thread_time) if clock == "thread"
               else cProfile.Profile())

    def stop(_signum: int, _frame: Any) -> None:
        profile.disable()
        out = os.path.join(out_dir, f"broker-{os.getpid()}.pstats")
        profile.dump_stats(out + ".tmp")
        os.replace(out + ".tmp", out)

    signal.signal(signal.SIGUSR1, lambda _s, _f: profile.enable())
    signal.signal(signal.SIGUSR2, stop)


def main() -> int:
    import os

    _install()
    if os.environ.get("SHOAL_BENCH_CLUSTER_PROFILE"):
        _install_profiler(os.environ["SHOAL_BENCH_CLUSTER_PROFILE"])
    from broker.main import main as shoal_main

    return shoal_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
