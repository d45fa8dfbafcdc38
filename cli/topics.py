"""``shoal topics``: create, list, describe, grow and delete topics (like kafka-topics.sh).

    shoal topics --bootstrap-server B --create --topic T [--partitions N]
                 [--replication-factor R] [--config NAME=VALUE ...] [--if-not-exists]
    shoal topics --bootstrap-server B --list [--exclude-internal]
    shoal topics --bootstrap-server B --describe [--topic T ...]
    shoal topics --bootstrap-server B --alter --topic T --partitions N
    shoal topics --bootstrap-server B --delete --topic T ... [--if-exists]

``--describe`` prints ``TOPIC TOPIC-ID PARTITIONS REPLICATION-FACTOR CONFIGS`` (configs set on
the topic) and then ``TOPIC PARTITION LEADER REPLICAS ISR``. RPCs: CreateTopics, Metadata,
DescribeConfigs, CreatePartitions, DeleteTopics.
"""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from cli import new_parser, open_cluster, run_command
from cli.output import Cell, emit, print_json, rows_as_json, table
from client.admin_wire import CliError, Cluster, error_text
from protocol.codec import request_module
from protocol.messages import make

CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS, CREATE_PARTITIONS = 19, 20, 32, 37
TOPIC_RESOURCE = 2
DYNAMIC_TOPIC_CONFIG = 1  # DescribeConfigs ConfigSource


def add_parser(sub: Any) -> None:
    p = new_parser(sub, "topics", "create, list, describe, alter and delete topics",
                   "Manage topics on any Kafka-protocol broker (like kafka-topics.sh).")
    action = p.add_mutually_exclusive_group(required=True)
    for name, text in (("create", "create --topic (with --partitions, --config)"),
                       ("list", "list topic names"),
                       ("describe", "show partitions, leaders and configs of topics"),
                       ("alter", "raise the partition count of --topic to --partitions"),
                       ("delete", "delete --topic")):
        action.add_argument(f"--{name}", action="store_true", help=text)
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC",
                   help="the topic (repeatable; --describe without it: every topic)")
    p.add_argument("--partitions", type=int, metavar="N",
                   help="partition count (--create: default the broker's num.partitions)")
    p.add_argument("--replication-factor", type=int, metavar="R",
                   help="--create: replicas per partition (a single broker has 1; default: the "
                   "broker's)")
    p.add_argument("--config", action="append", default=[], metavar="NAME=VALUE",
                   help="--create: a topic config (repeatable), e.g. cleanup.policy=compact")
    p.add_argument("--if-not-exists", action="store_true",
                   help="--create: succeed when the topic exists already")
    p.add_argument("--if-exists", action="store_true",
                   help="--delete: succeed when the topic does not exist")
    p.add_argument("--exclude-internal", action="store_true",
                   help="--list: leave out internal topics (__consumer_offsets, ...)")
    p.set_defaults(run=lambda args: run_command(p.prog, main, args), usage_error=p.error)


def _check(args: argparse.Namespace) -> None:
    err = args.usage_error
    if (args.create or args.alter) and len(args.topic) != 1:
        err(f"--{'create' if args.create else 'alter'} needs exactly one --topic")
    if args.alter and args.partitions is None:
        err("--alter needs --partitions")
    if args.delete and not args.topic:
        err("--delete needs --topic")
    if args.list and args.topic:
        err("--list takes no --topic")
    for c in args.config:
        if "=" not in c:
            err(f"invalid --config {c!r}; use NAME=VALUE")


def main(args: argparse.Namespace) -> int:
    _check(args)
    with open_cluster(args) as cluster:
        if args.create:
            return _create(cluster, args)
        if args.list:
            return _list(cluster, args)
        if args.describe:
            return _describe(cluster, args)
        if args.alter:
            return _alter(cluster, args)
        return _delete(cluster, args)


def _timeout(cluster: Cluster) -> timedelta:
    return timedelta(milliseconds=int(cluster.timeout_s * 1000))


def _create(cluster: Cluster, args: argparse.Namespace) -> int:
    name = args.topic[0]
    conn = cluster.any
    m = request_module(CREATE_TOPICS, conn.version(CREATE_TOPICS))
    configs = tuple(make(m.CreatableTopicConfig, name=k.strip(), value=v.strip())
                    for k, _, v in (c.partition("=") for c in args.config))
    topic = make(m.CreatableTopic, name=name,
                 num_partitions=args.partitions if args.partitions is not None else -1,
                 replication_factor=args.replication_factor or -1, assignments=(),
                 configs=configs)
    _, resp = conn.call(CREATE_TOPICS, "CreateTopicsRequest", topics=(topic,),
                        timeout=_timeout(cluster), validate_only=False)
    (r,) = resp.topics
    if r.error_code == ErrorCode.topic_already_exists and args.if_not_exists:
        return 0
    if r.error_code != ErrorCode.none:
        hint = "; use --if-not-exists to ignore" \
            if r.error_code == ErrorCode.topic_already_exists else ""
        raise CliError(f"cannot create topic {name!r}: "
                       f"{error_text(r.error_code, getattr(r, 'error_message', None))}{hint}")
    if args.output == "json":
        print_json({"topic": name, "created": True})
    else:
        print(f"Created topic {name}.")
    return 0


def _list(cluster: Cluster, args: argparse.Namespace) -> int:
    names = sorted(t.name for t in cluster.metadata(None).values()
                   if not (args.exclude_internal and (t.internal or t.name.startswith("__"))))
    if args.output == "json":
        print_json(names)
    else:
        for n in names:
            print(n)
    return 0


def _topic_configs(cluster: Cluster, names: list[str]) -> dict[str, str]:
    """Configs set on each topic (``name=value`` joined by commas), via DescribeConfigs."""
    if not names:
        return {}
    conn = cluster.any
    m = request_module(DESCRIBE_CONFIGS, conn.version(DESCRIBE_CONFIGS))
    _, resp = conn.call(DESCRIBE_CONFIGS, "DescribeConfigsRequest", resources=tuple(
        make(m.DescribeConfigsResource, resource_type=TOPIC_RESOURCE, resource_name=n,
             configuration_keys=None) for n in names),
        include_synonyms=False, include_documentation=False)
    out = {}
    for r in resp.results:
        if r.error_code != ErrorCode.none:
            continue
        out[r.resource_name] = ",".join(
            f"{c.name}={c.value}" for c in sorted(r.configs, key=lambda c: c.name)
            if getattr(c, "config_source", None) == DYNAMIC_TOPIC_CONFIG and not c.is_sensitive)
    return out


def _describe(cluster: Cluster, args: argparse.Namespace) -> int:
    meta = cluster.metadata(list(dict.fromkeys(args.topic)) if args.topic else None)
    missing = [t for t in args.topic if meta.get(t) is None or meta[t].error != ErrorCode.none]
    if missing:
        raise CliError(f"topic {missing[0]!r} does not exist; list topics with shoal topics "
                       f"--bootstrap-server {args.bootstrap_server} --list")
    topics = sorted(meta.values(), key=lambda t: t.name)
    configs = _topic_configs(cluster, [t.name for t in topics])
    head: list[list[Cell]] = []
    parts: list[list[Cell]] = []
    for t in topics:
        rf = max((len(p.replica_nodes) for p in t.partitions.values()), default=0)
        head.append([t.name, str(t.topic_id) if t.topic_id else None, len(t.partitions), rf,
                     configs.get(t.name) or None])
        for i, p in sorted(t.partitions.items()):
            parts.append([t.name, i, int(p.leader_id),
                          ",".join(str(n) for n in p.replica_nodes),
                          ",".join(str(n) for n in p.isr_nodes)])
    head_cols = ["TOPIC", "TOPIC-ID", "PARTITIONS", "REPLICATION-FACTOR", "CONFIGS"]
    part_cols = ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR"]
    if args.output == "json":
        print_json({"topics": rows_as_json(head_cols, head),
                    "partitions": rows_as_json(part_cols, parts)})
    else:
        print(table(head_cols, head) + "\n" + table(part_cols, parts), end="")
    return 0


def _alter(cluster: Cluster, args: argparse.Namespace) -> int:
    name = args.topic[0]
    conn = cluster.any
    m = request_module(CREATE_PARTITIONS, conn.version(CREATE_PARTITIONS))
    _, resp = conn.call(CREATE_PARTITIONS, "CreatePartitionsRequest", topics=(
        make(m.CreatePartitionsTopic, name=name, count=args.partitions, assignments=None),),
        timeout=_timeout(cluster), validate_only=False)
    (r,) = resp.results
    if r.error_code != ErrorCode.none:
        raise CliError(f"cannot add partitions to topic {name!r}: "
                       f"{error_text(r.error_code, r.error_message)}")
    if args.output == "json":
        print_json({"topic": name, "partitions": args.partitions})
    else:
        print(f"Topic {name} now has {args.partitions} partitions.")
    return 0


def _delete(cluster: Cluster, args: argparse.Namespace) -> int:
    names = list(dict.fromkeys(args.topic))
    conn = cluster.any
    version = conn.version(DELETE_TOPICS)
    m = request_module(DELETE_TOPICS, version)
    if version >= 6:
        fields: dict[str, Any] = {"topics": tuple(
            m.DeleteTopicState(name=n, topic_id=None) for n in names)}
    else:
        fields = {"topic_names": tuple(names)}
    _, resp = conn.call(DELETE_TOPICS, "DeleteTopicsRequest", timeout=_timeout(cluster),
                        **fields)
    rows: list[list[Cell]] = []
    failed = 0
    for r in resp.responses:
        if r.error_code == ErrorCode.none:
            rows.append([r.name, "Deleted"])
        elif r.error_code == ErrorCode.unknown_topic_or_partition and args.if_exists:
            rows.append([r.name, "Absent"])
        else:
            failed += 1
            rows.append([r.name, "Error: " + error_text(r.error_code,
                                                        getattr(r, "error_message", None))])
    emit(args.output, ["TOPIC", "STATUS"], rows)
    return 1 if failed else 0
