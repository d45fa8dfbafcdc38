"""The offsets a ``shoal share-groups --reset-offsets`` sets, and its reset plans.

``list_offsets`` asks each partition's leader (ListOffsets) for the earliest, the latest or the
first offset at a time; ``reset_targets`` turns ``--to-earliest``, ``--to-latest``,
``--to-datetime`` or ``--to-offset`` (clamped into the log) into (topic, partition) -> offset.
``read_reset_plan`` reads a ``--from-file`` CSV plan (format in ``cli/share_groups.py``),
``plan_scope`` checks its partitions exist and ``clamped_plan`` moves offsets outside the log to
its start or end, warning on stderr. Failures are ``CliError`` (exit code 2 for usage errors).
``consumer-groups`` reuses ``list_offsets``.
"""

from __future__ import annotations

import argparse
import csv
import sys
from datetime import datetime, timedelta

from kio.schema.errors import ErrorCode

from client.admin_wire import CliError, Cluster, error_text
from protocol.codec import request_module
from protocol.messages import make

LIST_OFFSETS = 2
EARLIEST, LATEST = -2, -1

HINTS = {
    ErrorCode.non_empty_group: "stop its consumers first",
    ErrorCode.group_id_not_found: "list share groups with --list",
    ErrorCode.unknown_topic_or_partition: "check the topic with shoal topics --list",
    ErrorCode.coordinator_not_available: "retry shortly",
    ErrorCode.coordinator_load_in_progress: "retry shortly",
    ErrorCode.not_coordinator: "retry shortly",
    ErrorCode.unsupported_version: "the broker has share groups disabled or too old",
}


def hinted(code: ErrorCode | int, message: str | None) -> str:
    hint = HINTS.get(ErrorCode(int(code)))
    return error_text(code, message) + (f"; {hint}" if hint else "")


def parse_datetime(text: str) -> int:
    """Epoch ms of ``YYYY-MM-DDThh:mm:ss[.sss][zone]`` (local time without a zone)."""
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise CliError(f"invalid --to-datetime {text!r}; use YYYY-MM-DDThh:mm:ss.sss, for "
                       "example 2026-01-31T12:00:00.000", exit_code=2) from None


def list_offsets(cluster: Cluster, scope: dict[str, list[int]],
                 timestamp: int) -> dict[tuple[str, int], int]:
    """ListOffsets at ``timestamp`` (-2 earliest, -1 latest) from each partition's leader;
    -1 for a timestamp after the last record.

    Raises:
        CliError: a partition has no leader or answers an error.
    """
    meta = cluster.existing_topics(scope)
    by_leader: dict[int, dict[str, list[int]]] = {}
    for topic, parts in scope.items():
        for p in parts:
            leader = int(meta[topic].partitions[p].leader_id)
            if leader < 0:
                raise CliError(f"partition {topic}-{p} has no leader; retry shortly")
            by_leader.setdefault(leader, {}).setdefault(topic, []).append(p)
    out: dict[tuple[str, int], int] = {}
    for leader, topics in sorted(by_leader.items()):
        conn = cluster.node(leader)
        m = request_module(LIST_OFFSETS, conn.version(LIST_OFFSETS))
        req_topics = tuple(
            make(m.ListOffsetsTopic, name=t, partitions=tuple(
                make(m.ListOffsetsPartition, partition_index=p, current_leader_epoch=-1,
                     timestamp=timestamp, max_num_offsets=1) for p in ps))
            for t, ps in topics.items())
        _, resp = conn.call(LIST_OFFSETS, "ListOffsetsRequest", replica_id=-1,
                            isolation_level=0, topics=req_topics,
                            timeout=timedelta(milliseconds=int(cluster.timeout_s * 1000)))
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code != ErrorCode.none:
                    raise CliError(f"cannot read the offsets of {t.name}-{p.partition_index}: "
                                   f"{hinted(p.error_code, None)}")
                out[(t.name, int(p.partition_index))] = int(p.offset)
    return out


def reset_targets(cluster: Cluster, args: argparse.Namespace,
             scope: dict[str, list[int]]) -> dict[tuple[str, int], int]:
    if args.to_earliest:
        return list_offsets(cluster, scope, EARLIEST)
    latest = list_offsets(cluster, scope, LATEST)
    if args.to_latest:
        return latest
    if args.to_datetime is not None:
        found = list_offsets(cluster, scope, parse_datetime(args.to_datetime))
        # No record at or after the time: start after the last one (as Kafka's tool does).
        return {tp: off if off >= 0 else latest[tp] for tp, off in found.items()}
    earliest = list_offsets(cluster, scope, EARLIEST)
    return {tp: min(max(args.to_offset, earliest[tp]), latest[tp]) for tp in latest}


MAX_PLAN_LINES = 100_000


def read_reset_plan(path: str, group_id: str) -> dict[tuple[str, int], int]:
    """(topic, partition) -> offset from a CSV reset plan (module doc for the format).

    Raises:
        CliError: the file cannot be read, a line is malformed, a partition appears twice,
            or no line applies to ``group_id`` (exit code 2, a usage error).
    """
    try:
        with open(path, newline="", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise CliError(f"cannot read the reset plan {path}: {exc.strerror or exc}",
                       exit_code=2) from None
    if len(lines) > MAX_PLAN_LINES:
        raise CliError(f"the reset plan {path} has {len(lines)} lines; at most "
                       f"{MAX_PLAN_LINES} are accepted", exit_code=2)
    plan: dict[tuple[str, int], int] = {}
    for n, row in enumerate(csv.reader(lines), start=1):
        fields = [f.strip() for f in row]
        if not fields or not any(fields) or fields[0].startswith("#"):
            continue
        if len(fields) == 4:
            if fields[0] != group_id:
                continue  # another group's line in a multi-group plan
            fields = fields[1:]
        if len(fields) != 3 or not fields[0]:
            raise CliError(f"{path} line {n}: expected topic,partition,offset (or "
                           f"group,topic,partition,offset), got {','.join(row)!r}", exit_code=2)
        topic, partition, offset = fields
        try:
            p, off = int(partition), int(offset)
        except ValueError:
            raise CliError(f"{path} line {n}: partition and offset must be integers, got "
                           f"{partition!r} and {offset!r}", exit_code=2) from None
        if p < 0 or off < 0:
            raise CliError(f"{path} line {n}: partition and offset must not be negative",
                           exit_code=2)
        if (topic, p) in plan:
            raise CliError(f"{path} line {n}: {topic}-{p} appears twice in the plan",
                           exit_code=2)
        plan[(topic, p)] = off
    if not plan:
        raise CliError(f"the reset plan {path} has no line for group {group_id!r}",
                       exit_code=2)
    return plan


def plan_scope(cluster: Cluster, args: argparse.Namespace,
                plan: dict[tuple[str, int], int]) -> dict[str, list[int]]:
    """The plan's partitions by topic, each checked to exist."""
    scope: dict[str, list[int]] = {}
    for t, p in sorted(plan):
        scope.setdefault(t, []).append(p)
    meta = cluster.existing_topics(scope)
    for name, parts in scope.items():
        t = meta.get(name)
        if t is None:
            raise CliError(f"topic {name!r} in {args.from_file} does not exist; check the "
                           f"name with shoal topics --bootstrap-server {args.bootstrap_server} "
                           "--list")
        bad = [p for p in parts if p not in t.partitions]
        if bad:
            raise CliError(f"topic {name!r} in {args.from_file} has no partition {bad[0]} "
                           f"(it has {len(t.partitions)}); fix the plan")
    return scope


def clamped_plan(cluster: Cluster, plan: dict[tuple[str, int], int],
                  scope: dict[str, list[int]]) -> dict[tuple[str, int], int]:
    """The plan with every offset moved into [log start, log end], warning for each."""
    earliest = list_offsets(cluster, scope, EARLIEST)
    latest = list_offsets(cluster, scope, LATEST)
    out = {}
    for (t, p), off in sorted(plan.items()):
        lo, hi = earliest[(t, p)], latest[(t, p)]
        if off < lo:
            print(f"shoal share-groups: warning: offset {off} of {t}-{p} is below the log "
                  f"start offset {lo}; using {lo}", file=sys.stderr)
        elif off > hi:
            print(f"shoal share-groups: warning: offset {off} of {t}-{p} is past the log end "
                  f"offset {hi}; using {hi}", file=sys.stderr)
        out[(t, p)] = min(max(off, lo), hi)
    return out
