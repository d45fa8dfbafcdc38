"""Process resources at start: the open-file limit, and glibc malloc's thresholds.

Open files: raise the soft limit at start, and refuse partitions the broker could not open.

Every open partition holds about ``FDS_PER_PARTITION`` descriptors (the active segment's ``.log``,
``.index`` and ``.timeindex``; sealed segments in use add a few more for a while). Kafka does not
check this and fails half way through with "Too many open files"; Shoal refuses a CreateTopics,
CreatePartitions or Metadata auto-creation that would leave fewer than ``reserve`` descriptors
for connections, sealed segments and sync duplicates (a quarter of the limit, at least 64), with
a message that says how to raise the limit.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import resource

log = logging.getLogger("shoal.broker")

FDS_PER_PARTITION = 3
_MIN_RESERVE = 64

# glibc mallopt parameters (malloc.h) and the environment variables that set them.
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
MALLOC_SETTINGS = (
    # Buffers up to 32 MiB (fetch answers, read log spans, encoded responses) come from the
    # heap rather than from a fresh mmap each time ...
    (_M_MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_", 32 << 20),
    # ... and freed heap memory up to 64 MiB stays mapped for the next one (with 16 MiB of
    # slack on each growth), instead of being handed back and faulted in again page by page.
    (_M_TRIM_THRESHOLD, "MALLOC_TRIM_THRESHOLD_", 64 << 20),
    (_M_TOP_PAD, "MALLOC_TOP_PAD_", 16 << 20),
)


def raise_open_file_limit() -> tuple[int, int]:
    """Raise ``RLIMIT_NOFILE``'s soft limit to the hard limit (as far as the OS lets us) and log
    the result. Returns the (soft, hard) limits now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        # An unlimited hard limit is not a valid soft limit for descriptors: Linux caps it at
        # fs.nr_open (macOS at kern.maxfilesperproc).
        targets = [hard] if hard != resource.RLIM_INFINITY else [_nr_open(), 1 << 20, 1 << 16]
        for target in targets:
            if target <= soft:
                continue
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            except (ValueError, OSError):
                continue
            soft = target
            break
        else:
            log.warning("could not raise the open-file limit from %d to %s; the broker can open "
                        "about %d partitions", soft, _fmt(hard), partition_capacity(soft))
            return soft, hard
    log.info("open-file limit: %s (hard %s): room for about %d partitions; raise it with "
             "ulimit -n / LimitNOFILE for more", _fmt(soft), _fmt(hard), partition_capacity(soft))
    return soft, hard


def open_file_limit() -> int | None:
    """The soft open-file limit, or None when unlimited."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def reserve(limit: int) -> int:
    return max(_MIN_RESERVE, limit // 4)


def partition_capacity(limit: int | None) -> int:
    """How many partitions fit under ``limit`` descriptors in all (beside the reserve)."""
    if limit is None or limit == resource.RLIM_INFINITY:
        return 1 << 62
    return max(0, (limit - reserve(limit)) // FDS_PER_PARTITION)


def partition_budget_problem(open_partitions: int, new_partitions: int,
                             limit: int | None = None) -> str | None:
    """Why ``new_partitions`` more cannot be opened next to ``open_partitions``, or None."""
    if limit is None:
        limit = open_file_limit()
    capacity = partition_capacity(limit)
    if open_partitions + new_partitions <= capacity:
        return None
    return (f"{new_partitions} more partition(s) would need about "
            f"{new_partitions * FDS_PER_PARTITION} file descriptors; with {open_partitions} "
            f"partition(s) open, the open-file limit of {limit} leaves room for "
            f"{max(0, capacity - open_partitions)} more. Raise the broker's limit (ulimit -n, "
            "systemd LimitNOFILE) and restart it, or ask for fewer partitions")


def _nr_open() -> int:
    try:
        with open("/proc/sys/fs/nr_open", encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return 1 << 20


def _fmt(value: int) -> str:
    return "unlimited" if value == resource.RLIM_INFINITY else str(value)


def tune_malloc() -> bool:
    """Keep glibc malloc from returning and re-faulting the broker's large buffers.

    A ShareFetch or Fetch answer of 1 MiB goes through several buffers of that size (the log
    read, the response's records, the encoded frame). With glibc's defaults each is a fresh
    mmap, or heap memory trimmed back to the OS when freed, so every answer faults its pages in
    again: measured with the Java share consumer (bench/java_share.py), 0.7 page faults per
    1 KiB record and more than half of the broker's CPU in the kernel. The thresholds in
    ``MALLOC_SETTINGS`` keep up to 64 MiB of freed memory for reuse. A setting whose
    ``MALLOC_*_`` environment variable is present is left to that variable. Returns whether
    glibc took the settings; False (and nothing changed) on another C library.
    """
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    ok = True
    for param, env, value in MALLOC_SETTINGS:
        if env not in os.environ:
            ok = bool(mallopt(param, value)) and ok
    if not ok:
        log.warning("could not set malloc's thresholds; large responses may cost more CPU")
    return ok
