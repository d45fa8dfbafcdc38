"""What ``shoal share-groups`` (``cli/share_groups.py``) and ``shoal consumer-groups``
(``cli/consumer_groups.py``) share: the options naming groups, topics and the describe view,
the check of the topics and partitions a reset names, the assignment column, and deleting groups
one DeleteGroups call per group with Kafka's tool output.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence

from kio.schema.errors import ErrorCode

from cli.output import print_json
from client.admin_wire import CliError, Cluster, error_text

DELETE_GROUPS = 42


def add_scope_options(p: argparse.ArgumentParser, noun: str) -> None:
    """``--group``, ``--all-groups``, ``--topic`` and ``--all-topics`` (``noun``: share,
    consumer)."""
    p.add_argument("--group", action="append", default=[], metavar="GROUP",
                   help=f"the {noun} group to act on (repeatable for --describe and --delete)")
    p.add_argument("--all-groups", action="store_true",
                   help=f"every {noun} group (--describe, --delete, --reset-offsets)")
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P...]",
                   help="a topic, or some of its partitions (orders:0,1); repeatable")
    p.add_argument("--all-topics", action="store_true",
                   help="--reset-offsets: every topic the group has offsets for")


def add_view_options(p: argparse.ArgumentParser, offsets_help: str) -> None:
    """``--offsets``, ``--members`` and ``--verbose`` of ``--describe``."""
    p.add_argument("--offsets", action="store_true", help=offsets_help)
    p.add_argument("--members", action="store_true", help="--describe: members")
    p.add_argument("--verbose", action="store_true", help="--describe: more columns")


def resolve_topics(cluster: Cluster, wanted: Mapping[str, Sequence[int] | None],
                   bootstrap_server: str, fix: str) -> dict[str, list[int]]:
    """Topic -> partitions (all of the topic's for None), in ``wanted``'s order.

    Raises:
        CliError: a topic does not exist, or has no such partition (the message ends with
            ``fix``, what to correct).
    """
    meta = cluster.existing_topics(wanted)
    out: dict[str, list[int]] = {}
    for name, parts in wanted.items():
        t = meta.get(name)
        if t is None:
            raise CliError(f"topic {name!r} does not exist; check the name with shoal topics "
                           f"--bootstrap-server {bootstrap_server} --list")
        bad = [p for p in parts or () if p not in t.partitions]
        if bad:
            raise CliError(f"topic {name!r} has no partition {bad[0]} (it has "
                           f"{len(t.partitions)}); {fix}")
        out[name] = list(parts) if parts is not None else sorted(t.partitions)
    return out


def assignment_text(assignment: Iterable[tuple[str, Iterable[int]]]) -> str | None:
    """``topic:0,1;other:2`` of (topic, partitions) pairs in order; None when empty."""
    text = ";".join(f"{t}:{','.join(str(p) for p in ps)}" for t, ps in assignment)
    return text or None


def delete_groups(cluster: Cluster, args: argparse.Namespace, ids: Sequence[str], *, noun: str,
                  prog: str, hinted: Callable[[ErrorCode, str | None], str],
                  refused: Mapping[str, str] | None = None) -> int:
    """Delete the groups ``ids`` (DeleteGroups on each one's coordinator) and print Kafka's
    lines (or JSON); ``refused`` maps ids not to send to why (GROUP_ID_NOT_FOUND with that
    message); ``hinted(code, message)`` says why a group was not deleted. Returns the exit
    code: 1 if any group was not deleted."""
    if not ids:
        print(f"There are no {noun} groups to delete.")
        return 0
    results: dict[str, tuple[ErrorCode, str | None]] = {}
    for gid in ids:
        if refused and gid in refused:
            results[gid] = (ErrorCode.group_id_not_found, refused[gid])
            continue
        _, conn = cluster.coordinator(gid)
        _, resp = conn.call(DELETE_GROUPS, "DeleteGroupsRequest", groups_names=(gid,))
        for r in resp.results:
            results[r.group_id] = (ErrorCode(int(r.error_code)),
                                   getattr(r, "error_message", None))
    ok = [g for g in ids if results.get(g, (ErrorCode.unknown_server_error, None))[0]
          == ErrorCode.none]
    failed = [g for g in ids if g not in ok]
    if args.output == "json":
        print_json([{"group": g, "error": None if g in ok else error_text(*results.get(
            g, (ErrorCode.unknown_server_error, "no answer")))} for g in ids])
    else:
        if ok:
            names = ", ".join(f"'{g}'" for g in ok)
            print(f"Deletion of requested {noun} groups ({names}) was successful.")
        for gid in failed:
            code, message = results.get(gid, (ErrorCode.unknown_server_error, "no answer"))
            print(f"{prog}: {noun} group {gid!r} could not be deleted: {hinted(code, message)}",
                  file=sys.stderr)
    return 1 if failed else 0


def print_idle(args: argparse.Namespace, idle: Iterable[str], line: str) -> None:
    """``line`` (with ``{gid}``) for each group in ``idle``, unless the output is JSON."""
    if args.output != "json":
        for gid in idle:
            print(line.format(gid=gid))
