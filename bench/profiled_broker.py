"""``shoal broker`` under cProfile, switched on and off by signals (benchmark profile mode).

``python -m bench.profiled_broker broker --listen ... --data-dir ...`` takes the same arguments
as ``shoal``. SIGUSR1 starts profiling the event-loop thread; SIGUSR2 stops and writes the
stats (pstats format) to ``$SHOAL_BENCH_PROFILE``. The broker itself is unchanged.
"""

from __future__ import annotations

import cProfile
import os
import signal
import sys
from typing import Any

_profile = cProfile.Profile()


def _start(_signum: int, _frame: Any) -> None:
    _profile.enable()


def _stop(_signum: int, _frame: Any) -> None:
    _profile.disable()
    out = os.environ.get("SHOAL_BENCH_PROFILE")
    if out:
        tmp = out + ".tmp"
        _profile.dump_stats(tmp)
        os.replace(tmp, out)


def main() -> int:
    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _stop)
    from broker.main import main as shoal_main

    return shoal_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
