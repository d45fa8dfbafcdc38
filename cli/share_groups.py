"""``shoal share-groups``: kafka-share-groups.sh's verbs over the Kafka protocol.

    shoal share-groups --bootstrap-server B --list [--state [STATE]]
    shoal share-groups --bootstrap-server B --describe (--group G ... | --all-groups)
                       [--offsets | --members | --state] [--verbose]
    shoal share-groups --bootstrap-server B --reset-offsets --group G
                       (--topic T[:P,P...] ... | --all-topics)
                       (--to-earliest | --to-latest | --to-datetime DT | --to-offset N)
                       [--dry-run | --execute]
    shoal share-groups --bootstrap-server B --reset-offsets --group G --from-file PLAN.csv
                       [--dry-run | --execute]
    shoal share-groups --bootstrap-server B --delete-offsets --group G --topic T ...
    shoal share-groups --bootstrap-server B --delete (--group G ... | --all-groups)

Columns are Kafka's: ``GROUP TOPIC PARTITION START-OFFSET LAG`` (``LEADER-EPOCH`` with
--verbose; plus Shoal's ``IN-FLIGHT OLDEST-UNACKED-S DRAIN-ETA-S SINCE-PROGRESS-S`` when the
broker's metrics endpoint is known, cli/share_figures.py), ``GROUP CONSUMER-ID HOST CLIENT-ID
#PARTITIONS ASSIGNMENT`` (``MEMBER-EPOCH``),
``GROUP COORDINATOR (ID) STATE #MEMBERS`` (``GROUP-EPOCH ASSIGNMENT-EPOCH``), ``GROUP TOPIC
PARTITION NEW-OFFSET`` and ``TOPIC STATUS``. An unknown start offset or lag prints ``-``.
``--output json`` prints the same rows as JSON objects.

RPCs: ListGroups (every broker), ShareGroupDescribe, DescribeShareGroupOffsets,
AlterShareGroupOffsets, DeleteShareGroupOffsets and DeleteGroups (the group coordinator),
Metadata and ListOffsets (partition leaders) for resets. A reset, like Kafka's, needs an inactive
group (Empty or not existing); without --execute it is a dry run. A group that does not exist
yet is created by the reset (AlterShareGroupOffsets), so its first consumer starts there.

``--from-file`` reads a reset plan in Kafka's CSV format (KAFKA-20524, as kafka-consumer-groups.sh
``--export`` writes it): one ``topic,partition,offset`` line per partition, or
``group,topic,partition,offset`` lines of which those of ``--group`` are used. Blank lines and
``#`` comments are skipped. Every topic and partition must exist; an offset outside the log is
moved to the log start or end, with a warning on stderr, as ``--to-offset`` does.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from cli import new_parser, open_cluster, run_command
from cli import share_figures as sf
from cli.group_tools import (
    add_scope_options,
    add_view_options,
    assignment_text,
    delete_groups,
    print_idle,
    resolve_topics,
)
from cli.output import Cell, emit, print_json
from cli.share_reset import clamped_plan, hinted, plan_scope, read_reset_plan, reset_targets
from client.admin_groups import list_groups
from client.admin_wire import CliError, Cluster, Connection, Node, error_text
from protocol.codec import request_module

SHARE_GROUP_DESCRIBE = 77
DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS = 90, 91, 92

SHARE = "share"
STATES = ("Empty", "Stable", "Dead")
UNKNOWN = -1

# --------------------------------------------------------------------------- arguments


def add_parser(sub: Any) -> None:
    p = new_parser(sub, "share-groups", "list, describe, reset and delete share groups",
                   "Manage KIP-932 share groups on any Kafka-protocol broker "
                   "(like kafka-share-groups.sh).")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list share groups")
    action.add_argument("--describe", action="store_true", help="describe share groups")
    action.add_argument("--reset-offsets", action="store_true",
                        help="reset the start offsets of an inactive group")
    action.add_argument("--delete-offsets", action="store_true",
                        help="delete a group's offsets of whole topics")
    action.add_argument("--delete", action="store_true", help="delete inactive share groups")
    add_scope_options(p, "share")
    p.add_argument("--state", nargs="?", const="", default=None, metavar="STATE",
                   help="--list: show (or filter by) state; --describe: the group state view")
    add_view_options(p, "--describe: offsets (default)")
    p.add_argument("--metrics-url", metavar="URL",
                   help="--describe: read the in-flight, oldest-unacked-age and drain-ETA "
                        "columns from this Prometheus endpoint (default: the coordinator's "
                        "metrics.listen, when it serves metrics)")
    to = p.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", action="store_true",
                    help="--reset-offsets: to the log start offset")
    to.add_argument("--to-latest", action="store_true",
                    help="--reset-offsets: to the log end offset")
    to.add_argument("--to-datetime", metavar="YYYY-MM-DDThh:mm:ss.sss",
                    help="--reset-offsets: to the first record at or after this local time")
    to.add_argument("--to-offset", type=int, metavar="N",
                    help="--reset-offsets: to offset N (clamped to the log)")
    to.add_argument("--from-file", metavar="PLAN.csv",
                    help="--reset-offsets: a CSV reset plan, topic,partition,offset per line")
    run = p.add_mutually_exclusive_group()
    run.add_argument("--dry-run", action="store_true",
                     help="--reset-offsets: print the plan only (the default)")
    run.add_argument("--execute", action="store_true",
                     help="--reset-offsets: apply the plan")
    p.set_defaults(run=lambda args: run_command(p.prog, main, args), usage_error=p.error)


def _check(args: argparse.Namespace) -> None:
    """Kafka's option rules; a violation is a usage error (exit 2)."""
    err = args.usage_error
    groups = bool(args.group) or args.all_groups
    if args.group and args.all_groups:
        err("use --group or --all-groups, not both")
    if args.list:
        if groups:
            err("--list takes no --group")
        if args.state and args.state.lower() not in {s.lower() for s in STATES}:
            err(f"invalid state {args.state!r}; use one of {', '.join(STATES)}")
    elif args.describe:
        if not groups:
            err("--describe needs --group or --all-groups")
        if sum([args.offsets, args.members, args.state is not None]) > 1:
            err("use one of --offsets, --members and --state")
        if args.state:
            err("--describe --state takes no value")
    elif args.reset_offsets:
        if len(args.group) != 1:
            err("--reset-offsets needs exactly one --group")
        if args.from_file is not None:
            if args.topic or args.all_topics:
                err("--from-file names its own topics; drop --topic and --all-topics")
        elif bool(args.topic) == args.all_topics:
            err("--reset-offsets needs --topic or --all-topics")
        if not (args.to_earliest or args.to_latest or args.to_datetime is not None
                or args.to_offset is not None or args.from_file is not None):
            err("--reset-offsets needs one of --to-earliest, --to-latest, --to-datetime, "
                "--to-offset, --from-file")
    elif args.delete_offsets:
        if len(args.group) != 1 or not args.topic:
            err("--delete-offsets needs one --group and at least one --topic")
        with_partitions = [t for t in args.topic if ":" in t]
        if with_partitions:  # a topic name never holds ':'; TOPIC:P,P is the reset form
            err(f"--delete-offsets deletes a share group's offsets of whole topics; give "
                f"--topic {with_partitions[0].partition(':')[0]} (not {with_partitions[0]})")
    elif args.delete and not groups:
        err("--delete needs --group or --all-groups")


def main(args: argparse.Namespace) -> int:
    _check(args)
    with open_cluster(args) as cluster:
        if args.list:
            return _list(cluster, args)
        if args.describe:
            return _describe(cluster, args)
        if args.reset_offsets:
            return _reset(cluster, args)
        if args.delete_offsets:
            return _delete_offsets(cluster, args)
        return _delete(cluster, args)


# --------------------------------------------------------------------------- list


def list_share_groups(cluster: Cluster, states: Sequence[str] = ()) -> list[tuple[str, str]]:
    """(group id, state) of every share group, from every broker, sorted by id."""
    return [(g.group_id, g.state) for g in list_groups(cluster, (SHARE,), states)]


def _list(cluster: Cluster, args: argparse.Namespace) -> int:
    states = (args.state,) if args.state else ()
    groups = list_share_groups(cluster, states)
    if args.state is None:
        if args.output == "json":
            print_json([{"group": g} for g, _ in groups])
        else:
            for g, _ in groups:
                print(g)
    else:
        emit(args.output, ["GROUP", "STATE"], [[g, s or None] for g, s in groups])
    return 0


# --------------------------------------------------------------------------- describe


def describe_group(cluster: Cluster, group_id: str) -> tuple[Any, Node] | None:
    """ShareGroupDescribe of one group and its coordinator; None if it does not exist."""
    node, conn = cluster.coordinator(group_id)
    _, resp = conn.call(SHARE_GROUP_DESCRIBE, "ShareGroupDescribeRequest", group_ids=(group_id,),
                        include_authorized_operations=False)
    (g,) = resp.groups
    if g.error_code == ErrorCode.group_id_not_found and \
            "not a share group" not in (g.error_message or ""):
        return None
    if g.error_code != ErrorCode.none:  # e.g. Kafka: "Group x is not a share group."
        raise CliError(f"cannot describe share group {group_id!r}: "
                       f"{hinted(g.error_code, g.error_message)}")
    return g, node


def describe_offsets(conn: Connection, group_id: str,
                     topics: dict[str, Sequence[int]] | None = None) -> list[Any]:
    """DescribeShareGroupOffsets rows: (topic, partition entry), sorted.

    Raises:
        CliError: a group-level error.
    """
    m = request_module(DESCRIBE_OFFSETS, conn.version(DESCRIBE_OFFSETS))
    req_topics = None if topics is None else tuple(
        m.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=tuple(ps))
        for t, ps in topics.items())
    _, resp = conn.call(DESCRIBE_OFFSETS, "DescribeShareGroupOffsetsRequest", groups=(
        m.DescribeShareGroupOffsetsRequestGroup(group_id=group_id, topics=req_topics),))
    (g,) = resp.groups
    if g.error_code != ErrorCode.none:
        raise CliError(f"cannot describe the offsets of share group {group_id!r}: "
                       f"{hinted(g.error_code, g.error_message)}")
    rows = [(t.topic_name, p) for t in g.topics for p in t.partitions]
    return sorted(rows, key=lambda row: (row[0], row[1].partition_index))


def _described(cluster: Cluster, args: argparse.Namespace) -> list[tuple[str, Any, Node]]:
    ids = args.group if args.group else [g for g, _ in list_share_groups(cluster)]
    out = []
    for gid in dict.fromkeys(ids):
        found = describe_group(cluster, gid)
        if found is None:
            raise CliError(f"share group {gid!r} does not exist; list share groups with "
                           f"shoal share-groups --bootstrap-server {args.bootstrap_server} --list")
        out.append((gid, *found))
    return out


def _describe(cluster: Cluster, args: argparse.Namespace) -> int:
    groups = _described(cluster, args)
    if args.members:
        code = _describe_members(groups, args)
    elif args.state is not None:
        code = _describe_state(groups, args)
    else:
        code = _describe_offsets(cluster, groups, args)
    _warn_missing_topics(cluster, groups)
    return code


def _warn_missing_topics(cluster: Cluster, groups: list[tuple[str, Any, Node]]) -> None:
    """A warning on stderr for each topic members subscribe to that does not exist: such a
    subscription gets nothing, and nothing else would say why."""
    for gid, g, _node in groups:
        names = sorted({n for m in g.members for n in m.subscribed_topic_names})
        existing = cluster.existing_topics(names)
        for name in names:
            if name not in existing:
                print(f"shoal share-groups: warning: members of share group {gid!r} subscribe "
                      f"to topic {name!r}, which does not exist; they get no records from it "
                      "until it is created", file=sys.stderr)


def _figures(cluster: Cluster, groups: list[tuple[str, Any, Node]],
             args: argparse.Namespace) -> sf.Figures | None:
    """Age and drain figures of the groups' share-partitions (cli/share_figures.py),
    or None when no metrics endpoint is known."""
    wanted = {gid for gid, _g, _node in groups}
    timeout_s = max(1.0, args.timeout / 1000)
    if args.metrics_url:
        return sf.parse(sf.scrape(args.metrics_url, timeout_s), wanted)
    urls: dict[str, None] = {}
    asked: set[int] = set()  # one DescribeConfigs per coordinator, not per group
    for gid, _g, _node in groups:
        node, conn = cluster.coordinator(gid)
        if node.node_id in asked:
            continue
        asked.add(node.node_id)
        url = sf.discover_url(conn, node)
        if url is not None:
            urls[url] = None
    if not urls:
        return None
    out: sf.Figures = {}
    for url in urls:
        try:
            out.update(sf.parse(sf.scrape(url, timeout_s), wanted))
        except CliError as exc:
            print(f"shoal share-groups: note: {exc.message}; the age and drain columns are "
                  "left out (give --metrics-url)", file=sys.stderr)
            return None
    return out


def _describe_offsets(cluster: Cluster, groups: list[tuple[str, Any, Node]],
                      args: argparse.Namespace) -> int:
    header = ["GROUP", "TOPIC", "PARTITION"] + (["LEADER-EPOCH"] if args.verbose else []) + \
        ["START-OFFSET", "LAG"]
    figures = _figures(cluster, groups, args)
    if figures is not None:
        header += ["IN-FLIGHT", "OLDEST-UNACKED-S", "DRAIN-ETA-S", "SINCE-PROGRESS-S"]
    rows: list[list[Any]] = []
    empty: list[str] = []
    failed = 0
    for gid, _g, _node in groups:
        _, conn = cluster.coordinator(gid)
        found = describe_offsets(conn, gid)
        if not found:
            empty.append(gid)
        for topic, p in found:
            if p.error_code != ErrorCode.none:
                failed += 1
                print(f"shoal share-groups: cannot read the offset of {topic}-"
                      f"{p.partition_index} in group {gid!r}: "
                      f"{hinted(p.error_code, p.error_message)}", file=sys.stderr)
                continue
            epoch: list[Cell] = [_known(p.leader_epoch)] if args.verbose else []
            row: list[Any] = [gid, topic, p.partition_index, *epoch, _known(p.start_offset),
                              _known(getattr(p, "lag", UNKNOWN))]
            if figures is not None:
                f = figures.get((gid, topic, int(p.partition_index)), sf.PartitionFigures())
                seconds = sf.json_seconds if args.output == "json" else sf.fmt_seconds
                row += [f.in_flight, seconds(f.oldest_unacked_s), seconds(f.drain_eta_s),
                        seconds(f.since_progress_s)]
            rows.append(row)
    if args.output == "json" or rows:
        emit(args.output, header, rows)
    print_idle(args, empty, "Share group '{gid}' has no offset information.")
    return 1 if failed else 0


def _known(value: int) -> int | None:
    return None if value < 0 else int(value)


def _assignment(member: Any) -> tuple[int, str | None]:
    parts = sorted((tp.topic_name, sorted(tp.partitions))
                   for tp in member.assignment.topic_partitions)
    return sum(len(ps) for _, ps in parts), assignment_text(parts)


def _describe_members(groups: list[tuple[str, Any, Node]], args: argparse.Namespace) -> int:
    header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"] + \
        (["MEMBER-EPOCH"] if args.verbose else []) + ["ASSIGNMENT"]
    rows: list[list[Cell]] = []
    idle: list[str] = []
    for gid, g, _node in groups:
        if not g.members:
            idle.append(gid)
        for m in sorted(g.members, key=lambda m: m.member_id):
            count, text = _assignment(m)
            epoch: list[Cell] = [int(m.member_epoch)] if args.verbose else []
            rows.append([gid, m.member_id, m.client_host, m.client_id, count, *epoch, text])
    if args.output == "json" or rows:
        emit(args.output, header, rows)
    print_idle(args, idle, "Share group '{gid}' has no active members.")
    return 0


def _describe_state(groups: list[tuple[str, Any, Node]], args: argparse.Namespace) -> int:
    header = ["GROUP", "COORDINATOR (ID)", "STATE"] + \
        (["GROUP-EPOCH", "ASSIGNMENT-EPOCH"] if args.verbose else []) + ["#MEMBERS"]
    rows: list[list[Cell]] = []
    for gid, g, node in groups:
        epochs: list[Cell] = [int(g.group_epoch), int(g.assignment_epoch)] if args.verbose else []
        rows.append([gid, f"{node.address} ({node.node_id})", g.group_state, *epochs,
                     len(g.members)])
    emit(args.output, header, rows)
    return 0


# --------------------------------------------------------------------------- reset


def _reset_scope(cluster: Cluster, args: argparse.Namespace,
                 conn: Connection) -> dict[str, list[int]]:
    """Topic -> partitions to reset (from --topic specs, or the group's own with --all-topics)."""
    gid = args.group[0]
    if args.all_topics:
        scope: dict[str, list[int]] = {}
        for topic, p in describe_offsets(conn, gid):
            scope.setdefault(topic, []).append(int(p.partition_index))
        if not scope:
            raise CliError(f"share group {gid!r} has no offsets to reset; name the topics "
                           "with --topic")
        return scope
    specs: dict[str, list[int] | None] = {}
    for spec in args.topic:
        name, sep, plist = spec.partition(":")
        if not sep:
            specs[name] = None
            continue
        try:
            specs[name] = sorted({int(x) for x in plist.split(",") if x.strip()})
        except ValueError:
            raise CliError(f"invalid --topic {spec!r}; use TOPIC or TOPIC:0,1,2",
                           exit_code=2) from None
    return resolve_topics(cluster, specs, args.bootstrap_server, "fix the --topic list")


def _reset(cluster: Cluster, args: argparse.Namespace) -> int:
    gid = args.group[0]
    plan = read_reset_plan(args.from_file, gid) if args.from_file is not None else None
    found = describe_group(cluster, gid)
    if found is not None and found[0].members:
        g = found[0]
        raise CliError(f"share group {gid!r} is {g.group_state} with {len(g.members)} "
                       "member(s); stop its consumers before resetting offsets")
    _, conn = cluster.coordinator(gid)
    if plan is not None:
        targets = clamped_plan(cluster, plan, plan_scope(cluster, args, plan))
    else:
        scope = _reset_scope(cluster, args, conn)
        targets = reset_targets(cluster, args, scope)
    rows: list[list[Cell]] = [[gid, t, p, off] for (t, p), off in sorted(targets.items())]
    if not args.execute:
        if not args.dry_run and args.output != "json":
            print("shoal share-groups: no --execute, so this is a dry run; nothing was changed",
                  file=sys.stderr)
        emit(args.output, ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows)
        return 0
    m = request_module(ALTER_OFFSETS, conn.version(ALTER_OFFSETS))
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (t, p), off in sorted(targets.items()):
        by_topic.setdefault(t, []).append((p, off))
    _, resp = conn.call(ALTER_OFFSETS, "AlterShareGroupOffsetsRequest", group_id=gid, topics=tuple(
        m.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=tuple(
            m.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=off)
            for p, off in parts))
        for t, parts in by_topic.items()))
    if resp.error_code != ErrorCode.none:
        raise CliError(f"cannot reset the offsets of share group {gid!r}: "
                       f"{hinted(resp.error_code, resp.error_message)}")
    failed = [(t.topic_name, p) for t in resp.responses for p in t.partitions
              if p.error_code != ErrorCode.none]
    for topic, p in failed:
        print(f"shoal share-groups: cannot reset {topic}-{p.partition_index} of group {gid!r}: "
              f"{hinted(p.error_code, p.error_message)}", file=sys.stderr)
    bad = {(t, int(p.partition_index)) for t, p in failed}
    emit(args.output, ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
         [r for r in rows if (r[1], r[2]) not in bad])
    return 1 if failed else 0


# --------------------------------------------------------------------------- delete


def _delete_offsets(cluster: Cluster, args: argparse.Namespace) -> int:
    gid = args.group[0]
    topics = list(dict.fromkeys(args.topic))
    _, conn = cluster.coordinator(gid)
    m = request_module(DELETE_OFFSETS, conn.version(DELETE_OFFSETS))
    _, resp = conn.call(DELETE_OFFSETS, "DeleteShareGroupOffsetsRequest", group_id=gid,
                        topics=tuple(m.DeleteShareGroupOffsetsRequestTopic(topic_name=t)
                                     for t in topics))
    if resp.error_code != ErrorCode.none:
        raise CliError(f"cannot delete the offsets of share group {gid!r}: "
                       f"{hinted(resp.error_code, resp.error_message)}")
    rows: list[list[Cell]] = []
    failed = 0
    for t in resp.responses:
        if t.error_code == ErrorCode.none:
            rows.append([t.topic_name, "Successful"])
        else:
            failed += 1
            rows.append([t.topic_name, f"Error: {error_text(t.error_code, t.error_message)}"])
    emit(args.output, ["TOPIC", "STATUS"], rows)
    return 1 if failed else 0


def _delete(cluster: Cluster, args: argparse.Namespace) -> int:
    ids = list(dict.fromkeys(args.group)) if args.group else \
        [g for g, _ in list_share_groups(cluster)]
    return delete_groups(cluster, args, ids, noun="share", prog="shoal share-groups",
                         hinted=hinted)
