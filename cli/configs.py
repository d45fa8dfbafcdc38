"""``shoal configs``: describe and alter group, topic and broker configs (like kafka-configs.sh).

    shoal configs --bootstrap-server B --entity-type groups --entity-name G --describe [--all]
    shoal configs --bootstrap-server B --entity-type groups --entity-name G --alter
                  [--add-config NAME=VALUE[,NAME=[V1,V2]...]] [--delete-config NAME[,NAME...]]

Entity types: ``groups`` (ConfigResource GROUP, the KIP-932 ``share.*`` configs), ``topics``,
``brokers`` (entity name = broker id), and ``users`` for SCRAM credentials
(``--add-config 'SCRAM-SHA-256=[iterations=8192,password=...]'``, ``--delete-config
SCRAM-SHA-256``; ``--describe`` without ``--entity-name`` lists every user; see
``cli/users.py``). ``--alter`` sends one IncrementalAlterConfigs with SET for
each added and DELETE for each deleted config, all or nothing. ``--describe`` prints
``NAME VALUE SOURCE`` for the configs set on the entity (all of them with ``--all``).
"""

from __future__ import annotations

import argparse
from typing import Any

from kio.schema.errors import ErrorCode

from cli import new_parser, open_cluster, run_command, users
from cli.output import Cell, emit, print_json
from client.admin_wire import CliError, Connection, error_text
from protocol.codec import request_module
from protocol.messages import make

DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 44
RESOURCE_TYPES = {"topics": 2, "brokers": 4, "groups": 32}
ENTITY_NAMES = {"topics": "topic", "brokers": "broker", "groups": "group"}
SET, DELETE = 0, 1
# DescribeConfigs ConfigSource ids.
SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
           3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
           6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}
ENTITY_SOURCES = {"topics": {1}, "brokers": {2, 3}, "groups": {8}}


def add_parser(sub: Any) -> None:
    p = new_parser(sub, "configs", "describe and alter group, topic and broker configs",
                   "Describe and alter configs on any Kafka-protocol broker "
                   "(like kafka-configs.sh).")
    p.add_argument("--entity-type", required=True, choices=sorted([*RESOURCE_TYPES, "users"]),
                   help="what the configs belong to: groups (share.* group configs), topics, "
                   "brokers, or users (SCRAM credentials)")
    p.add_argument("--entity-name", metavar="NAME",
                   help="the group, topic, broker id or user name")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true",
                        help="print NAME VALUE SOURCE of the configs set on the entity")
    action.add_argument("--alter", action="store_true",
                        help="apply --add-config and --delete-config, all or nothing")
    p.add_argument("--add-config", action="append", default=[],
                   metavar="NAME=VALUE[,NAME=VALUE...]",
                   help="set configs (repeatable); a value with commas goes in brackets: "
                   "cleanup.policy=[compact,delete]")
    p.add_argument("--delete-config", action="append", default=[], metavar="NAME[,NAME...]",
                   help="remove configs, back to their defaults (repeatable)")
    p.add_argument("--all", action="store_true", help="--describe: every config, not only "
                   "the ones set on the entity")
    p.set_defaults(run=lambda args: run_command(p.prog, main, args), usage_error=p.error)


def _pairs(items: list[str]) -> list[str]:
    return [x.strip() for item in items for x in item.split(",") if x.strip()]


def parse_add_config(items: list[str]) -> list[tuple[str, str]]:
    """``--add-config`` values as kafka-configs.sh reads them: ``NAME=VALUE`` pairs separated by
    commas, a value holding commas in brackets (``cleanup.policy=[compact,delete]`` sets
    ``compact,delete``).

    Raises:
        CliError: an item that is not ``NAME=VALUE`` (exit code 2); when it follows a pair, the
        message shows the bracket form of the value it probably belongs to.
    """
    pairs: list[tuple[str, str]] = []
    for item in (p for raw in items for p in users.split_outside_brackets(raw)):
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            hint = "use NAME=VALUE"
            if pairs:
                prev, prev_value = pairs[-1]
                hint = (f"a value with commas goes in brackets, as in kafka-configs.sh: "
                        f"'{prev}=[{prev_value},{item}]'")
            raise CliError(f"invalid --add-config {item!r}; {hint}", exit_code=2)
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        pairs.append((name.strip(), value))
    return pairs


def _changes(args: argparse.Namespace) -> list[tuple[str, int, str | None]]:
    err = args.usage_error
    changes: list[tuple[str, int, str | None]] = []
    try:
        added = parse_add_config(args.add_config)
    except CliError as exc:
        err(str(exc))
    for name, value in added:
        changes.append((name, SET, value))
    for name in _pairs(args.delete_config):
        changes.append((name, DELETE, None))
    if not changes:
        err("--alter needs --add-config or --delete-config")
    return changes


def main(args: argparse.Namespace) -> int:
    if args.entity_type == "users":
        return _users(args)
    if args.entity_name is None:
        args.usage_error(f"--entity-type {args.entity_type} needs --entity-name")
    changes = _changes(args) if args.alter else []
    with open_cluster(args) as cluster:
        conn = cluster.any
        if args.entity_type == "brokers" and args.entity_name.isdigit():
            conn = cluster.node(int(args.entity_name))
        if args.alter:
            return _alter(conn, args, changes)
        return _describe(conn, args)


def _what(args: argparse.Namespace) -> str:
    return f"{ENTITY_NAMES[args.entity_type]} {args.entity_name!r}"


def _alter(conn: Connection, args: argparse.Namespace,
           changes: list[tuple[str, int, str | None]]) -> int:
    m = request_module(INCREMENTAL_ALTER_CONFIGS, conn.version(INCREMENTAL_ALTER_CONFIGS))
    resource = make(m.AlterConfigsResource, resource_type=RESOURCE_TYPES[args.entity_type],
                    resource_name=args.entity_name, configs=tuple(
                        make(m.AlterableConfig, name=n, config_operation=op, value=v)
                        for n, op, v in changes))
    _, resp = conn.call(INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigsRequest",
                        resources=(resource,), validate_only=False)
    (r,) = resp.responses
    if r.error_code != ErrorCode.none:
        raise CliError(f"cannot alter the configs of {_what(args)}: "
                       f"{error_text(r.error_code, r.error_message)}; nothing was changed")
    if args.output == "json":
        print_json({"entity_type": args.entity_type, "entity_name": args.entity_name,
                    "set": {n: v for n, op, v in changes if op == SET},
                    "deleted": [n for n, op, _ in changes if op == DELETE]})
    else:
        print(f"Completed updating config for {ENTITY_NAMES[args.entity_type]} "
              f"{args.entity_name}.")
    return 0


def _describe(conn: Connection, args: argparse.Namespace) -> int:
    m = request_module(DESCRIBE_CONFIGS, conn.version(DESCRIBE_CONFIGS))
    resource = make(m.DescribeConfigsResource, resource_type=RESOURCE_TYPES[args.entity_type],
                    resource_name=args.entity_name, configuration_keys=None)
    _, resp = conn.call(DESCRIBE_CONFIGS, "DescribeConfigsRequest", resources=(resource,),
                        include_synonyms=False, include_documentation=False)
    (r,) = resp.results
    if r.error_code != ErrorCode.none:
        raise CliError(f"cannot describe the configs of {_what(args)}: "
                       f"{error_text(r.error_code, r.error_message)}")
    own = ENTITY_SOURCES[args.entity_type]
    rows: list[list[Cell]] = []
    for c in sorted(r.configs, key=lambda c: c.name):
        source = int(getattr(c, "config_source", 0))
        if not args.all and source not in own:
            continue
        value = "[hidden]" if c.is_sensitive else c.value
        rows.append([c.name, value, SOURCES.get(source, str(source))])
    emit(args.output, ["NAME", "VALUE", "SOURCE"], rows)
    return 0


def _users(args: argparse.Namespace) -> int:
    """SCRAM credentials, in kafka-configs.sh's users form."""
    err = args.usage_error
    name = args.entity_name
    upserts: list[users.Upsertion] = []
    deletes: list[tuple[str, str]] = []
    if args.alter:
        if name is None:
            err("--alter --entity-type users needs --entity-name")
        upserts = [users.parse_scram_config(name, item) for raw in args.add_config
                   for item in users.split_outside_brackets(raw)]
        for mech in _pairs(args.delete_config):
            if mech.upper() not in users.MECHANISMS:
                err(f"users have SCRAM-SHA-256 and SCRAM-SHA-512 configs, not {mech!r}")
            deletes.append((name, mech.upper()))
        if not upserts and not deletes:
            err("--alter needs --add-config or --delete-config")
    elif args.add_config or args.delete_config:
        err("--add-config and --delete-config need --alter")
    with open_cluster(args) as cluster:
        if args.describe:
            return users.describe(cluster.any, [name] if name else [], args.output)
        users.alter(cluster.any, upserts, deletes)
    if args.output == "json":
        print_json({"entity_type": "users", "entity_name": name,
                    "set": {u.mechanism: {"iterations": u.iterations} for u in upserts},
                    "deleted": [mech for _, mech in deletes]})
    else:
        print(f"Completed updating config for user {name}.")
    return 0
