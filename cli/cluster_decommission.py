"""``shoal cluster decommission --node N``: move every replica off broker N, over the wire.

    shoal cluster decommission --node N [--dry-run] [--bootstrap-server HOST:PORT] [--output json]

RPCs: DescribeCluster and Metadata (``cluster_describe.describe``) for the brokers and each
partition's replicas, then AlterPartitionReassignments (CLUSTER ALTER) for every partition that
has a replica on N. Each such partition's target is its replica list with N replaced by the
broker that holds the fewest replicas (counting the moves planned so far) among those not
holding one of that partition, preferring a rack the other replicas do not use; the order is
kept, so a partition N preferred to lead prefers its replacement. A partition whose every other
broker already holds a replica cannot move and is reported (add a broker, or lower its
replication factor with a reassignment).

The moves complete in the background: the new replicas copy the data from the leaders, join the
ISR, and the controller then drops N (moving leaderships it had). Until then
ListPartitionReassignments lists them; ``--status`` prints that list. Exit status 0 when every
partition's move started (or none was needed), 1 otherwise.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from cli import new_parser, open_cluster, run_command
from cli.cluster_describe import BrokerRow, PartitionRow, describe
from cli.output import emit
from client.admin_wire import CliError, error_text
from protocol.codec import request_module

ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS = 45, 46
DEFAULT = "127.0.0.1:9092"
CHUNK = 10_000  # the broker's bound on partitions per request


def add_parser(sub: Any) -> None:
    """``shoal cluster decommission`` on the ``cluster`` subparsers."""
    p = new_parser(sub, "decommission", "move every replica off one broker",
                   "Move every partition replica off broker N (AlterPartitionReassignments), "
                   "so it can be removed; the moves complete once the new replicas are in "
                   "sync. --status lists the moves still running.", bootstrap_default=DEFAULT)
    p.add_argument("--node", type=int, metavar="N",
                   help="the broker to empty (required unless --status)")
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.add_argument("--status", action="store_true",
                   help="list the partition moves in progress (ListPartitionReassignments)")
    p.set_defaults(run=lambda args: run_command(p.prog, main, args))


@dataclass(frozen=True)
class Move:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    target: tuple[int, ...] | None  # None: no broker can take the replica


def plan(node: int, brokers: Sequence[BrokerRow], partitions: Sequence[PartitionRow]
         ) -> list[Move]:
    """The moves that empty ``node`` (module doc); pure."""
    racks = {b.node_id: b.rack for b in brokers}
    load = {b.node_id: 0 for b in brokers if b.node_id != node}
    for p in partitions:
        for r in p.replicas:
            if r in load:
                load[r] += 1
    moves = []
    for p in partitions:
        if node not in p.replicas:
            continue
        others = [r for r in p.replicas if r != node]
        used = {racks.get(r) for r in others}
        free = [b for b in load if b not in p.replicas]
        if not free:
            moves.append(Move(p.topic, p.partition, p.replicas, None))
            continue
        pick = min(free, key=lambda b: (racks.get(b) is not None and racks.get(b) in used,
                                        load[b], b))
        load[pick] += 1
        moves.append(Move(p.topic, p.partition, p.replicas,
                          tuple(pick if r == node else r for r in p.replicas)))
    return moves


def _ids(nodes: Sequence[int] | None) -> str:
    return "-" if nodes is None else ",".join(map(str, nodes))


def _alter(cluster: Any, moves: Sequence[Move]) -> dict[tuple[str, int], str]:
    """Send the moves; (topic, partition) -> "started" or the broker's error text."""
    out: dict[tuple[str, int], str] = {}
    conn = cluster.any
    for i in range(0, len(moves), CHUNK):
        chunk = moves[i:i + CHUNK]
        by_topic: dict[str, list[Move]] = {}
        for m in chunk:
            by_topic.setdefault(m.topic, []).append(m)
        rm = request_module(ALTER_REASSIGNMENTS, conn.version(ALTER_REASSIGNMENTS))
        _, resp = conn.call(ALTER_REASSIGNMENTS, "AlterPartitionReassignmentsRequest",
                            timeout=cluster_timeout(cluster), topics=tuple(
                                rm.ReassignableTopic(name=t, partitions=tuple(
                                    rm.ReassignablePartition(partition_index=m.partition,
                                                             replicas=m.target) for m in ms))
                                for t, ms in by_topic.items()))
        if resp.error_code != ErrorCode.none:
            raise CliError("AlterPartitionReassignments failed: "
                           f"{error_text(resp.error_code, resp.error_message)}")
        for t in resp.responses:
            for p in t.partitions:
                out[(t.name, int(p.partition_index))] = (
                    "started" if p.error_code == ErrorCode.none
                    else error_text(p.error_code, p.error_message))
    return out


def cluster_timeout(cluster: Any) -> timedelta:
    return timedelta(seconds=cluster.timeout_s)


def status(cluster: Any) -> list[list[Any]]:
    """The running moves: rows of topic, partition, replicas, adding, removing."""
    _, resp = cluster.any.call(LIST_REASSIGNMENTS, "ListPartitionReassignmentsRequest",
                               timeout=cluster_timeout(cluster), topics=None)
    if resp.error_code != ErrorCode.none:
        raise CliError("ListPartitionReassignments failed: "
                       f"{error_text(resp.error_code, resp.error_message)}")
    return [[t.name, int(p.partition_index), _ids(p.replicas), _ids(p.adding_replicas),
             _ids(p.removing_replicas)] for t in resp.topics for p in t.partitions]


def main(args: argparse.Namespace) -> int:
    with open_cluster(args) as cluster:
        if args.status:
            emit(args.output, ["TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"],
                 status(cluster))
            return 0
        if args.node is None:
            raise CliError("give --node N (the broker to empty), or --status", exit_code=2)
        d = describe(cluster)
        moves = plan(args.node, d.brokers, d.partitions)
        if not moves:
            print(f"broker {args.node} holds no replica; nothing to move")
            return 0
        movable = [m for m in moves if m.target is not None]
        results = {} if args.dry_run else _alter(cluster, movable)
    rows = []
    for m in moves:
        if m.target is None:
            result = "cannot move: every other broker holds a replica already"
        else:
            result = "planned" if args.dry_run else results.get((m.topic, m.partition), "?")
        rows.append([m.topic, m.partition, _ids(m.replicas), _ids(m.target), result])
    emit(args.output, ["TOPIC", "PARTITION", "REPLICAS", "TARGET", "RESULT"], rows)
    ok = all(r[4] in ("started", "planned") for r in rows)
    if ok and not args.dry_run:
        print(f"the moves complete once the new replicas are in sync; follow them with "
              f"`shoal cluster decommission --status`, then stop broker {args.node}")
    return 0 if ok else 1
