"""Open-file limits: raise the soft limit at start, and refuse partitions the broker could not open.

Every open partition holds about ``FDS_PER_PARTITION`` descriptors (the active segment's ``.log``,
``.index`` and ``.timeindex``; sealed segments in use add a few more for a while). Kafka does not
check this and fails half way through with "Too many open files"; Shoal refuses a CreateTopics,
CreatePartitions or Metadata auto-creation that would leave fewer than ``reserve`` descriptors
for connections, sealed segments and sync duplicates (a quarter of the limit, at least 64), with
a message that says how to raise the limit.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger("shoal.broker")

FDS_PER_PARTITION = 3
_MIN_RESERVE = 64


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
