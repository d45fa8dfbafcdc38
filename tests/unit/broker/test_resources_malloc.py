"""``tune_malloc`` (broker/resources.py): large buffers are reused, not faulted in per use.

Each check runs in a fresh interpreter, since the setting is process-wide.
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT

_CHURN = """
import resource, sys
if sys.argv[1] == "tuned":
    from broker.resources import tune_malloc
    assert tune_malloc()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
warm = [bytes(1 << 20) for _ in range(3)]
del warm
before = faults()
for _ in range(100):  # what a 1 MiB fetch answer does: build it, copy it, drop both
    a = b"x" * (1 << 20)
    b = a + b"y"
    del a, b
print(faults() - before)
"""


def _faults(mode: str, env: dict[str, str] | None = None) -> int:
    out = subprocess.run([sys.executable, "-c", _CHURN, mode], cwd=ROOT, check=True,
                         capture_output=True, text=True, timeout=60, env=env)
    return int(out.stdout)


def test_tuned_broker_reuses_megabyte_buffers_instead_of_faulting_them_in() -> None:
    """200 MiB of 1 MiB buffers made and freed: the default glibc settings fault in tens of
    thousands of pages (each buffer fresh from the kernel); tuned, the same memory is reused."""
    assert _faults("default") > 10_000
    assert _faults("tuned") < 2_000


def test_malloc_environment_variables_win() -> None:
    """An operator's MALLOC_MMAP_THRESHOLD_ is left alone: with a 64 KiB threshold every 1 MiB
    buffer is mapped afresh again, as the variable asks."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(64 << 10))
    assert _faults("tuned", env) > 10_000
