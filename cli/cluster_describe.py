"""``shoal cluster describe``: brokers, controller, partition placement and offline partitions,
over the Kafka protocol only.

    shoal cluster describe [--bootstrap-server HOST:PORT] [--json | --output json]

RPCs: DescribeCluster (cluster id, controller, brokers with their racks), then Metadata for
every topic and, by name, the internal topics (``__consumer_offsets``, ``__share_group_state``,
``__transaction_state``; a broker that has not created one yet leaves it out). Works against
any Kafka-protocol broker: a single Shoal broker is one broker and its own controller.

A partition is offline when it has no leader (leader -1; LEADER_NOT_AVAILABLE), as Kafka's
``--unavailable-partitions`` has it. The table output is three sections (brokers, placement,
offline partitions; each broker with the number of partitions it leads); the JSON output is one
document with the same facts (``cluster_id``,
``controller_id``, ``brokers``, ``partitions``, ``offline_partitions``).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from cli import new_parser, open_cluster, run_command
from cli.output import print_json, table
from client.admin_wire import CliError, Cluster, error_text
from client.core.discovery import METADATA, metadata_request, parse_metadata

DESCRIBE_CLUSTER = 60
BROKERS_ENDPOINT = 1
INTERNAL_TOPICS = ("__consumer_offsets", "__share_group_state", "__transaction_state")
NO_LEADER = -1
DEFAULT = "127.0.0.1:9092"


def add_parser(sub: Any) -> None:
    """``shoal cluster describe`` on the ``cluster`` subparsers."""
    p = new_parser(sub, "describe", "show brokers, controller, placement and offline partitions",
                   "Show a cluster's brokers, its controller, where each partition (internal "
                   "topics included) is placed, and which partitions are offline; over the "
                   "Kafka protocol (DescribeCluster, Metadata).", bootstrap_default=DEFAULT)
    p.add_argument("--json", dest="output", action="store_const", const="json",
                   help="print JSON (the same as --output json)")
    p.add_argument("--exclude-internal", action="store_true",
                   help="leave the internal topics (__consumer_offsets, __share_group_state, "
                   "__transaction_state) out of the placement")
    p.set_defaults(run=lambda args: run_command(p.prog, main, args))


@dataclass(frozen=True)
class BrokerRow:
    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True)
class PartitionRow:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    internal: bool

    @property
    def offline(self) -> bool:
        return self.leader == NO_LEADER


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerRow, ...]
    partitions: tuple[PartitionRow, ...]

    @property
    def offline(self) -> tuple[PartitionRow, ...]:
        return tuple(p for p in self.partitions if p.offline)

    def leader_counts(self) -> dict[int, int]:
        """Broker id -> how many of the partitions it leads."""
        counts: dict[int, int] = {}
        for p in self.partitions:
            if not p.offline:
                counts[p.leader] = counts.get(p.leader, 0) + 1
        return counts

    def without_internal(self) -> ClusterDescription:
        return ClusterDescription(self.cluster_id, self.controller_id, self.brokers,
                                  tuple(p for p in self.partitions if not p.internal))


# ---------------------------------------------------------------------------- reading answers


def brokers_from_describe_cluster(resp: Any) -> tuple[str | None, int, tuple[BrokerRow, ...]]:
    """(cluster id, controller id, brokers by id) of a DescribeCluster response.

    Raises:
        CliError: the response carries an error code.
    """
    if resp.error_code != ErrorCode.none:
        raise CliError(f"DescribeCluster failed: {error_text(resp.error_code, resp.error_message)}")
    brokers = tuple(sorted((BrokerRow(int(b.broker_id), b.host, int(b.port), b.rack)
                            for b in resp.brokers), key=lambda b: b.node_id))
    return resp.cluster_id, int(resp.controller_id), brokers


def partitions_from_metadata(resp: Any) -> tuple[PartitionRow, ...]:
    """Every partition of the topics a Metadata response names without an error; topics that
    do not exist (an internal topic not created yet) are left out."""
    _, topics = parse_metadata(resp)
    rows = []
    for t in topics:
        if t.error != ErrorCode.none:
            continue
        internal = t.internal or t.name in INTERNAL_TOPICS
        for i, p in t.partitions.items():
            rows.append(PartitionRow(t.name, i, int(p.leader_id),
                                     int(getattr(p, "leader_epoch", -1)),
                                     tuple(int(n) for n in p.replica_nodes),
                                     tuple(int(n) for n in p.isr_nodes), internal))
    return tuple(rows)


def describe(cluster: Cluster) -> ClusterDescription:
    """Ask the bootstrap broker (DescribeCluster, then Metadata twice).

    Raises:
        CliError: a broker cannot be reached, does not serve DescribeCluster, or refused it.
    """
    conn = cluster.any
    _, resp = conn.call(DESCRIBE_CLUSTER, "DescribeClusterRequest",
                        include_cluster_authorized_operations=False,
                        endpoint_type=BROKERS_ENDPOINT, include_fenced_brokers=False)
    cluster_id, controller, brokers = brokers_from_describe_cluster(resp)
    version = conn.version(METADATA)
    listed = partitions_from_metadata(conn.request(METADATA, version,
                                                   metadata_request(version, None)))
    names = {p.topic for p in listed}
    wanted = [t for t in INTERNAL_TOPICS if t not in names]
    internal = partitions_from_metadata(conn.request(METADATA, version,
                                                     metadata_request(version, wanted))
                                        ) if wanted else ()
    parts = tuple(sorted(listed + internal, key=lambda p: (p.topic, p.partition)))
    return ClusterDescription(cluster_id, controller, brokers, parts)


# ---------------------------------------------------------------------------- rendering (pure)


def _ids(nodes: tuple[int, ...]) -> str:
    return ",".join(str(n) for n in nodes)


def render_table(d: ClusterDescription) -> str:
    """The three sections as aligned text."""
    controller = d.controller_id if d.controller_id >= 0 else "none"
    head = f"Cluster id: {d.cluster_id or '-'}\nController: {controller}\n\n"
    leaders = d.leader_counts()
    brokers = table(["BROKER", "HOST:PORT", "RACK", "CONTROLLER", "LEADERS"],
                    [[b.node_id, f"{b.host}:{b.port}", b.rack,
                      "yes" if b.node_id == d.controller_id else None,
                      leaders.get(b.node_id, 0)] for b in d.brokers])
    placement = table(["TOPIC", "PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR"],
                      [[p.topic, p.partition, "none" if p.offline else p.leader,
                        p.leader_epoch, _ids(p.replicas), _ids(p.isr)] for p in d.partitions])
    if d.offline:
        offline = "Offline partitions:\n" + table(
            ["TOPIC", "PARTITION", "REPLICAS"],
            [[p.topic, p.partition, _ids(p.replicas)] for p in d.offline])
    else:
        offline = "Offline partitions: none\n"
    return head + brokers + "\n" + placement + "\n" + offline


def as_json(d: ClusterDescription) -> dict[str, Any]:
    """The JSON document (keys in snake case, node lists as arrays)."""
    def partition(p: PartitionRow) -> dict[str, Any]:
        doc = asdict(p)
        doc["replicas"], doc["isr"] = list(p.replicas), list(p.isr)
        doc["offline"] = p.offline
        return doc

    leader_counts = d.leader_counts()
    return {"cluster_id": d.cluster_id, "controller_id": d.controller_id,
            "brokers": [{**asdict(b), "leaders": leader_counts.get(b.node_id, 0)}
                        for b in d.brokers],
            "partitions": [partition(p) for p in d.partitions],
            "offline_partitions": [{"topic": p.topic, "partition": p.partition,
                                    "replicas": list(p.replicas)} for p in d.offline]}


def main(args: argparse.Namespace) -> int:
    with open_cluster(args) as cluster:
        d = describe(cluster)
    if args.exclude_internal:
        d = d.without_internal()
    if args.output == "json":
        print_json(as_json(d))
    else:
        print(render_table(d), end="")
    return 0
