"""``shoal consumer-groups``: kafka-consumer-groups.sh's verbs over the Kafka protocol.

    shoal consumer-groups --bootstrap-server B --list [--type [TYPE,...]] [--state [STATE,...]]
    shoal consumer-groups --bootstrap-server B --describe (--group G ... | --all-groups)
                          [--offsets | --members | --state] [--verbose]
    shoal consumer-groups --bootstrap-server B --reset-offsets --group G
                          (--topic T[:P,P...] ... | --all-topics | --from-file PLAN.csv)
                          (--to-earliest | --to-latest | --to-current | --to-offset N
                           | --shift-by N | --to-datetime DT | --by-duration PnDTnHnMnS
                           | --from-file PLAN.csv)
                          [--dry-run | --execute] [--export]
    shoal consumer-groups --bootstrap-server B --delete-offsets --group G --topic T[:P,P...] ...
    shoal consumer-groups --bootstrap-server B --delete (--group G ... | --all-groups)

``--list`` lists every group the brokers coordinate, classic, consumer (KIP-848) and share groups
alike; ``--type`` adds the TYPE column (and with values filters by it), ``--state`` the STATE
column (and filters). The other verbs act on classic and consumer groups; a share group's id is
refused with a pointer to ``shoal share-groups``.

Columns are Kafka's: ``GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST
CLIENT-ID`` (``LEADER-EPOCH`` after PARTITION with --verbose; LAG = log end - committed offset),
``GROUP CONSUMER-ID GROUP-INSTANCE-ID HOST CLIENT-ID #PARTITIONS`` (``MEMBER-EPOCH ASSIGNMENT
TARGET-ASSIGNMENT`` with --verbose), ``GROUP COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE
#MEMBERS`` (``GROUP-EPOCH TARGET-ASSIGNMENT-EPOCH`` with --verbose), ``GROUP TOPIC PARTITION
NEW-OFFSET`` and ``TOPIC PARTITION STATUS``. Unknown values print ``-`` (``null`` in JSON).

RPCs (the group calls are ``client/admin_groups.py``): ListGroups v5 (types and states filters;
every broker), FindCoordinator, then on the coordinator ConsumerGroupDescribe (when the broker
serves it; a classic group is described with DescribeGroups), OffsetFetch, OffsetCommit
(generation -1, no member: an admin commit, which the broker allows only while the group has no
members), OffsetDelete and DeleteGroups; Metadata and ListOffsets on partition leaders. Resets
follow kafka-consumer-groups.sh (``cli/reset_plan.py``): only an inactive group (Empty,
or not existing yet), new offsets clamped to the log, and a dry run unless --execute.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from cli import new_parser, open_cluster, run_command
from cli import reset_plan as rp
from cli.group_tools import (
    add_scope_options,
    add_view_options,
    assignment_text,
    delete_groups,
    print_idle,
    resolve_topics,
)
from cli.output import Cell, emit, print_json
from cli.share_reset import EARLIEST, LATEST, list_offsets
from client.admin_groups import (
    CLASSIC,
    CONSUMER,
    GROUP_TYPES,
    OFFSET_DELETE,
    SHARE,
    STATES,
    TYPE_NAMES,
    Group,
    WrongGroupType,
    commit_offsets,
    describe_group,
    fetch_offsets,
    hinted,
    list_groups,
)
from client.admin_wire import CliError, Cluster
from protocol.codec import request_module
from protocol.messages import make

PROG = "shoal consumer-groups"

# --------------------------------------------------------------------------- arguments


def add_parser(sub: Any) -> None:
    p = new_parser(sub, "consumer-groups", "list, describe, reset and delete consumer groups",
                   "Manage classic and KIP-848 consumer groups and their committed offsets on "
                   "any Kafka-protocol broker (like kafka-consumer-groups.sh); --list shows "
                   "share groups too.")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list groups (every type)")
    action.add_argument("--describe", action="store_true", help="describe consumer groups")
    action.add_argument("--reset-offsets", action="store_true",
                        help="reset the committed offsets of an inactive group")
    action.add_argument("--delete-offsets", action="store_true",
                        help="delete a group's committed offsets of topics or partitions")
    action.add_argument("--delete", action="store_true", help="delete inactive consumer groups")
    add_scope_options(p, "consumer")
    p.add_argument("--type", action="append", nargs="?", const="", default=None,
                   metavar="TYPE[,TYPE]",
                   help="--list: show the group type (classic, consumer, share), or filter by it")
    p.add_argument("--state", action="append", nargs="?", const="", default=None,
                   metavar="STATE[,STATE]",
                   help="--list: show (or filter by) state; --describe: the group state view")
    add_view_options(p, "--describe: offsets and lag (default)")
    to = p.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", action="store_true", help="reset to the log start offset")
    to.add_argument("--to-latest", action="store_true", help="reset to the log end offset")
    to.add_argument("--to-current", action="store_true",
                    help="reset to the committed offset (the log end without one)")
    to.add_argument("--to-offset", type=int, metavar="N", help="reset to N (clamped to the log)")
    to.add_argument("--shift-by", type=int, metavar="N",
                    help="move the committed offset by N (negative: back)")
    to.add_argument("--to-datetime", metavar="YYYY-MM-DDThh:mm:ss.sss",
                    help="reset to the first record at or after this time")
    to.add_argument("--by-duration", metavar="PnDTnHnMnS",
                    help="reset to the first record at or after now minus this duration")
    to.add_argument("--from-file", metavar="PLAN.csv",
                    help="reset to the offsets of a CSV plan: topic,partition,offset lines")
    run = p.add_mutually_exclusive_group()
    run.add_argument("--dry-run", action="store_true", help="print the plan only (default)")
    run.add_argument("--execute", action="store_true", help="commit the new offsets")
    p.add_argument("--export", action="store_true",
                   help="--reset-offsets: print the plan as CSV (what --from-file reads)")
    p.set_defaults(run=lambda args: run_command(PROG, main, args), usage_error=p.error)


def _values(raw: list[str] | None) -> list[str]:
    """Values of a repeatable, comma-separated option (``--type a,b --type c``)."""
    return [v.strip() for item in raw or () for v in item.split(",") if v.strip()]


def _check(args: argparse.Namespace) -> None:
    """kafka-consumer-groups.sh's option rules; a violation is a usage error (exit 2)."""
    err = args.usage_error
    groups = bool(args.group) or args.all_groups
    rules = [args.to_earliest, args.to_latest, args.to_current, args.to_offset is not None,
             args.shift_by is not None, args.to_datetime is not None,
             args.by_duration is not None, args.from_file is not None]
    if args.group and args.all_groups:
        err("use --group or --all-groups, not both")
    if not args.reset_offsets and (any(rules) or args.export or args.dry_run or args.execute):
        err("--to-*, --shift-by, --by-duration, --from-file, --dry-run, --execute and --export "
            "go with --reset-offsets")
    if args.type is not None and not args.list:
        err("--type goes with --list")
    if args.list:
        if groups:
            err("--list takes no --group")
        for t in _values(args.type):
            if t.lower() not in GROUP_TYPES:
                err(f"invalid group type {t!r}; use one of {', '.join(GROUP_TYPES)}")
        for s in _values(args.state):
            if s.lower() not in {x.lower() for x in STATES}:
                err(f"invalid state {s!r}; use one of {', '.join(STATES)}")
    elif args.describe:
        if not groups:
            err("--describe needs --group or --all-groups")
        if sum([args.offsets, args.members, args.state is not None]) > 1:
            err("use one of --offsets, --members and --state")
        if _values(args.state):
            err("--describe --state takes no value")
    elif args.reset_offsets:
        if len(args.group) != 1:
            err("--reset-offsets needs exactly one --group")
        if sum(rules) != 1:
            err("--reset-offsets needs one of --to-earliest, --to-latest, --to-current, "
                "--to-offset, --shift-by, --to-datetime, --by-duration, --from-file")
        if args.from_file is not None:
            if args.topic or args.all_topics:
                err("--from-file names its partitions; leave out --topic and --all-topics")
        elif bool(args.topic) == args.all_topics:
            err("--reset-offsets needs --topic or --all-topics")
        if args.to_offset is not None and args.to_offset < 0:
            err("--to-offset must not be negative")
    elif args.delete_offsets:
        if len(args.group) != 1 or not args.topic:
            err("--delete-offsets needs one --group and at least one --topic")
    elif args.delete and not groups:
        err("--delete needs --group or --all-groups")
    if args.state is not None and not (args.list or args.describe):
        err("--state goes with --list or --describe")


def main(args: argparse.Namespace) -> int:
    _check(args)
    # A reset rule is read (and a plan file parsed) before connecting: bad input is a usage
    # error whether or not a broker answers.
    rule = _rule(args, args.group[0]) if args.reset_offsets else None
    with open_cluster(args) as cluster:
        if args.list:
            return _list(cluster, args)
        if args.describe:
            return _describe(cluster, args)
        if rule is not None:
            return _reset(cluster, args, rule)
        if args.delete_offsets:
            return _delete_offsets(cluster, args)
        return _delete(cluster, args)


# --------------------------------------------------------------------------- list


def _list(cluster: Cluster, args: argparse.Namespace) -> int:
    groups = list_groups(cluster, _values(args.type), _values(args.state))
    show_type, show_state = args.type is not None, args.state is not None
    if not show_type and not show_state:
        if args.output == "json":
            print_json([{"group": g.group_id} for g in groups])
        else:
            for g in groups:
                print(g.group_id)
        return 0
    header = ["GROUP"] + (["TYPE"] if show_type else []) + (["STATE"] if show_state else [])
    rows: list[list[Cell]] = []
    for g in groups:
        row: list[Cell] = [g.group_id]
        if show_type:
            row.append(TYPE_NAMES.get(g.group_type, g.group_type))
        if show_state:
            row.append(g.state or None)
        rows.append(row)
    emit(args.output, header, rows)
    return 0


# --------------------------------------------------------------------------- describe


def _described(cluster: Cluster, gid: str) -> Group | None:
    """``describe_group``; an id of another type is refused with what to use instead."""
    try:
        return describe_group(cluster, gid)
    except WrongGroupType as exc:
        if exc.group_type == SHARE:
            raise CliError(f"group {gid!r} is a share group; use shoal share-groups "
                           f"--bootstrap-server {cluster.any.address} --describe --group "
                           f"{gid}") from None
        raise


def _must_exist(cluster: Cluster, gid: str, args: argparse.Namespace) -> Group:
    found = _described(cluster, gid)
    if found is None:
        raise CliError(f"consumer group {gid!r} does not exist; list groups with {PROG} "
                       f"--bootstrap-server {args.bootstrap_server} --list")
    return found


def log_end_offsets(cluster: Cluster, partitions: Sequence[tuple[str, int]]
                    ) -> dict[tuple[str, int], int]:
    """Log end offsets of the partitions that exist (deleted topics are left out)."""
    meta = cluster.existing_topics(t for t, _ in partitions)
    scope: dict[str, list[int]] = {}
    for t, p in partitions:
        if t in meta and p in meta[t].partitions:
            scope.setdefault(t, []).append(p)
    return list_offsets(cluster, scope, LATEST) if scope else {}


def _groups_to_describe(cluster: Cluster, args: argparse.Namespace) -> list[Group]:
    ids = args.group if args.group else [
        g.group_id for g in list_groups(cluster, (CLASSIC, CONSUMER))]
    return [_must_exist(cluster, gid, args) for gid in dict.fromkeys(ids)]


def _describe(cluster: Cluster, args: argparse.Namespace) -> int:
    groups = _groups_to_describe(cluster, args)
    if args.members:
        return _describe_members(groups, args)
    if args.state is not None:
        return _describe_state(groups, args)
    return _describe_offsets(cluster, groups, args)


def _describe_offsets(cluster: Cluster, groups: list[Group], args: argparse.Namespace) -> int:
    header = ["GROUP", "TOPIC", "PARTITION"] + (["LEADER-EPOCH"] if args.verbose else []) + \
        ["CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    rows: list[list[Cell]] = []
    idle: list[str] = []
    for g in groups:
        committed = fetch_offsets(g.conn, g.group_id)
        owner = {(t, p): m for m in g.members for t, ps in m.assignment.items() for p in ps}
        partitions = sorted(set(committed) | set(owner))
        ends = log_end_offsets(cluster, partitions)
        if not g.members:
            idle.append(g.group_id)
        for tp in partitions:
            offset, epoch = committed.get(tp, (None, None))
            end = ends.get(tp)
            lag = max(0, end - offset) if end is not None and offset is not None else None
            m = owner.get(tp)
            extra: list[Cell] = [epoch if epoch is not None and epoch >= 0 else None] \
                if args.verbose else []
            rows.append([g.group_id, tp[0], tp[1], *extra, offset, end, lag,
                         m.member_id if m else None, m.host if m else None,
                         m.client_id if m else None])
        for m in g.members:  # members without partitions, as Kafka's tool shows them
            if not m.assignment:
                extra = [None] if args.verbose else []
                rows.append([g.group_id, None, None, *extra, None, None, None, m.member_id,
                             m.host, m.client_id])
    if args.output == "json" or rows:
        emit(args.output, header, rows)
    print_idle(args, idle, "Consumer group '{gid}' has no active members.")
    return 0


def _assignment_text(assignment: dict[str, list[int]] | None) -> str | None:
    return assignment_text(sorted((assignment or {}).items()))


def _describe_members(groups: list[Group], args: argparse.Namespace) -> int:
    header = ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS"] + \
        (["MEMBER-EPOCH", "ASSIGNMENT", "TARGET-ASSIGNMENT"] if args.verbose else [])
    rows: list[list[Cell]] = []
    idle: list[str] = []
    for g in groups:
        if not g.members:
            idle.append(g.group_id)
        for m in g.members:
            count = sum(len(ps) for ps in m.assignment.values())
            extra: list[Cell] = [m.epoch, _assignment_text(m.assignment),
                                 _assignment_text(m.target)] if args.verbose else []
            rows.append([g.group_id, m.member_id, m.instance_id, m.host, m.client_id, count,
                         *extra])
    if args.output == "json" or rows:
        emit(args.output, header, rows)
    print_idle(args, idle, "Consumer group '{gid}' has no active members.")
    return 0


def _describe_state(groups: list[Group], args: argparse.Namespace) -> int:
    header = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE"] + \
        (["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"] if args.verbose else []) + ["#MEMBERS"]
    rows: list[list[Cell]] = []
    for g in groups:
        epochs: list[Cell] = [g.group_epoch, g.assignment_epoch] if args.verbose else []
        rows.append([g.group_id, f"{g.coordinator.address} ({g.coordinator.node_id})",
                     g.strategy or None, g.state, *epochs, len(g.members)])
    emit(args.output, header, rows)
    return 0


# --------------------------------------------------------------------------- reset


def _usage(exc: rp.PlanError) -> CliError:
    return CliError(str(exc), exit_code=2)


def _rule(args: argparse.Namespace, gid: str) -> rp.Rule:
    try:
        if args.to_earliest:
            return rp.Rule(rp.EARLIEST)
        if args.to_latest:
            return rp.Rule(rp.LATEST)
        if args.to_current:
            return rp.Rule(rp.CURRENT)
        if args.to_offset is not None:
            return rp.Rule(rp.TO_OFFSET, args.to_offset)
        if args.shift_by is not None:
            return rp.Rule(rp.SHIFT_BY, args.shift_by)
        if args.to_datetime is not None:
            return rp.Rule(rp.TIMESTAMP, rp.parse_datetime(args.to_datetime))
        if args.by_duration is not None:
            # The CLI is a shell: reading the wall clock here is its job.
            now_ms = int(time.time() * 1000)
            return rp.Rule(rp.TIMESTAMP, now_ms - rp.parse_duration(args.by_duration))
        try:
            with open(args.from_file, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise CliError(f"cannot read --from-file {args.from_file}: "
                           f"{exc.strerror or exc}", exit_code=2) from None
        return rp.Rule(rp.FROM_FILE, rp.parse_plan_csv(text, gid, f"--from-file "
                                                                 f"{args.from_file}"))
    except rp.PlanError as exc:
        raise _usage(exc) from None


def _scope(cluster: Cluster, args: argparse.Namespace, rule: rp.Rule,
           committed: dict[tuple[str, int], tuple[int, int]]) -> list[tuple[str, int]]:
    gid = args.group[0]
    if args.all_topics:
        meta = cluster.existing_topics(t for t, _ in committed)
        live = sorted(tp for tp in committed
                      if tp[0] in meta and tp[1] in meta[tp[0]].partitions)
        for t, p in sorted(set(committed) - set(live)):
            print(f"{PROG}: warning: {t}-{p} no longer exists; its offset is left as it is",
                  file=sys.stderr)
        if not live:
            raise CliError(f"consumer group {gid!r} has no committed offsets to reset; name "
                           "the topics with --topic")
        return live
    if rule.kind == rp.FROM_FILE:
        assert isinstance(rule.value, dict)
        wanted: dict[str, list[int] | None] = {}
        for t, p in rule.value:
            parts = wanted.setdefault(t, [])
            assert parts is not None
            parts.append(p)
    else:
        try:
            wanted = rp.parse_topic_specs(args.topic)
        except rp.PlanError as exc:
            raise _usage(exc) from None
    scope = resolve_topics(cluster, wanted, args.bootstrap_server,
                           "fix the partitions to reset")
    return sorted({(name, p) for name, parts in scope.items() for p in parts})


def _reset(cluster: Cluster, args: argparse.Namespace, rule: rp.Rule) -> int:
    gid = args.group[0]
    group = _described(cluster, gid)
    if group is not None and not group.inactive:
        raise CliError(f"consumer group {gid!r} is {group.state} with {len(group.members)} "
                       "member(s); offsets can only be reset while the group is inactive: stop "
                       "its consumers first")
    _, conn = cluster.coordinator(gid)
    committed = fetch_offsets(conn, gid)
    scope = _scope(cluster, args, rule, committed)
    by_topic: dict[str, list[int]] = {}
    for t, p in scope:
        by_topic.setdefault(t, []).append(p)
    earliest = list_offsets(cluster, by_topic, EARLIEST)
    latest = list_offsets(cluster, by_topic, LATEST)
    at_time = None
    if rule.kind == rp.TIMESTAMP:
        assert isinstance(rule.value, int)
        at_time = list_offsets(cluster, by_topic, rule.value)
    try:
        planned = rp.plan(rule, scope, committed={tp: o for tp, (o, _) in committed.items()},
                          earliest=earliest, latest=latest, at_time=at_time)
    except rp.PlanError as exc:
        raise CliError(f"cannot plan the reset of group {gid!r}: {exc}") from None
    for note in planned.clamped:
        print(f"{PROG}: warning: {note}", file=sys.stderr)
    header = ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    rows: list[list[Cell]] = [[gid, t, p, off] for (t, p), off in sorted(planned.offsets.items())]
    if not args.execute:
        if not (args.dry_run or args.export) and args.output != "json":
            print(f"{PROG}: no --execute, so this is a dry run; nothing was changed",
                  file=sys.stderr)
        _print_plan(args, header, rows, planned.offsets)
        return 0
    results = commit_offsets(conn, gid, planned.offsets)
    failed = {tp: r for tp, r in results.items() if r[0] != ErrorCode.none}
    for (t, p), (code, message) in sorted(failed.items()):
        print(f"{PROG}: cannot reset {t}-{p} of group {gid!r}: {hinted(code, message)}",
              file=sys.stderr)
    done = {tp: off for tp, off in planned.offsets.items() if tp not in failed}
    _print_plan(args, header, [r for r in rows if (r[1], r[2]) not in failed], done)
    return 1 if failed else 0


def _print_plan(args: argparse.Namespace, header: list[str], rows: list[list[Cell]],
                offsets: dict[tuple[str, int], int]) -> None:
    if args.export:
        sys.stdout.write(rp.format_plan_csv(offsets))
    else:
        emit(args.output, header, rows)


# --------------------------------------------------------------------------- delete


def _delete_offsets(cluster: Cluster, args: argparse.Namespace) -> int:
    gid = args.group[0]
    try:
        specs = rp.parse_topic_specs(args.topic)
    except rp.PlanError as exc:
        raise _usage(exc) from None
    meta = cluster.existing_topics(specs)
    for name in specs:
        if name not in meta:
            raise CliError(f"topic {name!r} does not exist; check the name with shoal topics "
                           f"--bootstrap-server {args.bootstrap_server} --list")
    missing = {(t, p) for t, parts in specs.items() for p in parts or ()
               if p not in meta[t].partitions}
    _, conn = cluster.coordinator(gid)
    m = request_module(OFFSET_DELETE, conn.version(OFFSET_DELETE))
    topics = tuple(make(m.OffsetDeleteRequestTopic, name=t, partitions=tuple(
        make(m.OffsetDeleteRequestPartition, partition_index=p)
        for p in (parts if parts is not None else sorted(meta[t].partitions))))
        for t, parts in specs.items())
    _, resp = conn.call(OFFSET_DELETE, "OffsetDeleteRequest", group_id=gid, topics=topics)
    if resp.error_code == ErrorCode.group_id_not_found:
        raise CliError(f"consumer group {gid!r} does not exist; list groups with {PROG} "
                       f"--bootstrap-server {args.bootstrap_server} --list")
    if resp.error_code != ErrorCode.none:
        raise CliError(f"cannot delete the offsets of group {gid!r}: {hinted(resp.error_code)}")
    rows: list[list[Cell]] = []
    failed = 0
    for t in resp.topics:
        for p in sorted(t.partitions, key=lambda p: p.partition_index):
            if (t.name, p.partition_index) in missing:  # whatever a broker answers for it
                failed += 1
                rows.append([t.name, int(p.partition_index),
                             f"Error: topic {t.name!r} has no partition {p.partition_index} "
                             f"(it has {len(meta[t.name].partitions)})"])
            elif p.error_code == ErrorCode.none:
                rows.append([t.name, int(p.partition_index), "Successful"])
            else:
                failed += 1
                rows.append([t.name, int(p.partition_index),
                             f"Error: {hinted(p.error_code)}"])
    emit(args.output, ["TOPIC", "PARTITION", "STATUS"], rows)
    return 1 if failed else 0


def _delete(cluster: Cluster, args: argparse.Namespace) -> int:
    listed = {g.group_id: g for g in list_groups(cluster)}
    ids = list(dict.fromkeys(args.group)) if args.group else [
        gid for gid, g in listed.items() if g.group_type in (CLASSIC, CONSUMER)]
    refused = {gid: "it is a share group; delete it with shoal share-groups --delete"
               for gid in ids if gid in listed and listed[gid].group_type == SHARE}
    return delete_groups(cluster, args, ids, noun="consumer", prog=PROG, hinted=_delete_text,
                         refused=refused)


def _delete_text(code: ErrorCode, message: str | None) -> str:
    """Why a group was not deleted: a share group's refusal as it is, else with a hint."""
    if code == ErrorCode.group_id_not_found and message and "share group" in message:
        return message
    return hinted(code, message)
