"""py-spy one phase of scenario o or x on a fresh Shoal broker (issue 26's sitting).

``o``: RECORDS keyed records (1,000 keys, 100 B) are produced first, then py-spy samples the
broker only while 8 ShareConsumers read them with ``share.ordering=key`` (the unordered phase
and the produce are left out). ``x``: one untimed transaction, then py-spy samples the broker
while RECORDS records are produced in transactions of 1,000 (the idempotent phase is left out).

Prints the phase's rate and the broker's user/system CPU over it, and the top functions of the
event loop (``bench.profiling``); the raw samples stay in ``OUT.pyspy.txt``.

    .venv/bin/python -m bench.phase_profile o 300000 /tmp/ph_o
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench import key_ordering, transactions
from bench.clients import Admin
from bench.java_share import cpu_seconds
from bench.procs import ShoalBroker, remove_tree
from bench.profiling import find_py_spy, format_top, summarize_pyspy


def _phase(mode: str, bootstrap: str, n: int, spy: Any) -> tuple[float, Any]:
    """Prepare, start the profiler (``spy()``), run the measured phase; (rate, profiler)."""
    admin = Admin(bootstrap)
    topic = f"phase-{uuid.uuid4().hex[:8]}"
    if mode == "o":
        admin.create_topic(topic, 1)
        key_ordering.produce(bootstrap, topic, n, key_ordering.KEYS)
        group = f"{topic}-key"
        key_ordering.set_group(bootstrap, group, "key")
        proc = spy()
        out = key_ordering.consume(bootstrap, group, topic, n, key_ordering.CONSUMERS,
                                   timeout=300)
        return out["rate"], proc
    admin.create_topic(topic, transactions.PARTITIONS)
    p = transactions._producer(bootstrap, **{"transactional.id": f"{topic}-x"})
    p.init_transactions(30)
    p.begin_transaction()  # untimed: producer id, coordinator, first AddPartitionsToTxn
    transactions._produce(p, topic, transactions.TXN_RECORDS)
    p.commit_transaction(60)
    proc = spy()
    t0 = time.monotonic()
    for _ in range(0, n, transactions.TXN_RECORDS):
        p.begin_transaction()
        transactions._produce(p, topic, transactions.TXN_RECORDS)
        p.commit_transaction(60)
    return n / (time.monotonic() - t0), proc


def main() -> None:
    if len(sys.argv) != 4 or sys.argv[1] not in ("o", "x"):
        raise SystemExit("usage: python -m bench.phase_profile o|x RECORDS OUT_PREFIX")
    mode, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    exe = find_py_spy()
    if exe is None:
        raise SystemExit("no py-spy executable (pip install py-spy)")
    tmp = Path(tempfile.mkdtemp(prefix="shoal-phase-"))
    broker = ShoalBroker(tmp / "data", Path(out + ".broker.log"), {})
    broker.start()
    marks: dict[str, Any] = {}

    def spy() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([exe, "record", "--pid", str(broker.pid), "--rate", "200",
                                 "--format", "raw", "--function", "--nonblocking",
                                 "-o", out + ".pyspy.txt"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        marks["t0"], marks["c0"] = time.monotonic(), cpu_seconds(broker.pid)
        return proc

    try:
        rate, proc = _phase(mode, broker.bootstrap, n, spy)
        c1, wall = cpu_seconds(broker.pid), time.monotonic() - marks["t0"]
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    finally:
        broker.stop()
        remove_tree(tmp)
    c0 = marks["c0"]
    user, system = c1[0] - c0[0], c1[1] - c0[1]
    print(f"{mode}: {rate:,.0f} rec/s; broker user {user:.2f} s + system {system:.2f} s over "
          f"{wall:.2f} s ({100 * (user + system) / wall:.0f}% of a core, "
          f"{1e6 * (user + system) / n:.2f} us per record)")
    summary = summarize_pyspy(Path(out + ".pyspy.txt"))
    summary.update(profiler="py-spy", seconds=round(wall, 1))
    top = format_top(summary).splitlines()  # its first line names scenario (b): replaced
    print(f"Broker profile during {mode}'s measured phase: py-spy, {wall:.1f} s, "
          f"{summary['total_samples']} busy event-loop samples (loop idle "
          f"{summary.get('loop_idle_pct')}% of its samples)")
    print("\n".join(top[1:]))


if __name__ == "__main__":
    main()
