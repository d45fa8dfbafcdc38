"""``shoal acls``: add, list and remove ACLs (like kafka-acls.sh).

    shoal acls --bootstrap-server B --add
               (--allow-principal P ... [--allow-host H ...] | --deny-principal P ...
                [--deny-host H ...]) [--operation OP ...]
               (--topic T | --group G | --cluster | --transactional-id X) ...
               [--resource-pattern-type literal|prefixed]
    shoal acls --bootstrap-server B --list [RESOURCES] [--principal P ...]
               [--resource-pattern-type literal|prefixed|match|any]
    shoal acls --bootstrap-server B --remove RESOURCES [PRINCIPALS] [--operation OP ...]
               [--resource-pattern-type ...] [--force]

RPCs: CreateAcls, DescribeAcls, DeleteAcls (v1-3). Rules, as kafka-acls.sh has them:

- ``--add`` makes one ACL per resource x principal x host x operation. A host defaults to ``*``
  and the operation to ALL; every operation must be one the resource type supports. The pattern
  type is LITERAL (default) or PREFIXED.
- ``--list`` without a resource lists every ACL; with resources, those patterns (LITERAL unless
  ``--resource-pattern-type`` says otherwise: ``match`` lists every ACL that applies to the
  named resource, ``any`` both LITERAL and PREFIXED patterns of that name).
- ``--remove`` without principals removes every ACL of the resources. With principals it
  removes theirs; unlike kafka-acls.sh, an omitted ``--operation`` or host matches any rather
  than only ALL and ``*``, so ``--remove --allow-principal User:alice --topic t`` removes all of
  alice's ACLs on t. It asks for confirmation only on a terminal and never with ``--force``.

Table output prints resource blocks as kafka-acls.sh does (``Current ACLs for resource
`ResourcePattern(...)`:`` then one ``(principal=..., host=..., operation=...,
permissionType=...)`` line each); ``--output json`` prints the ACLs as objects.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from itertools import groupby
from typing import Any

from kio.schema.errors import ErrorCode

from cli import new_parser, open_cluster, run_command
from cli.output import print_json
from client.admin_wire import CliError, Connection, error_text
from protocol.acl_types import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    from_code,
    principal_problem,
)
from protocol.codec import request_module
from protocol.messages import make

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
PATTERN_TYPES = {"literal": PatternType.LITERAL, "prefixed": PatternType.PREFIXED,
                 "match": PatternType.MATCH, "any": PatternType.ANY}
# Operation names as kafka-acls.sh takes them (Read, ClusterAction, ...), in any case, with or
# without separators.
OPERATIONS = {op.name.replace("_", ""): op for op in AclOperation
              if op not in (AclOperation.UNKNOWN, AclOperation.ANY)}

HINTS = {
    ErrorCode.security_disabled: "start the broker with authorizer.class.name="
                                 "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    ErrorCode.cluster_authorization_failed: "connect as a super user or a principal with "
                                            "ALTER (DESCRIBE to list) on the cluster",
}

Resource = tuple[ResourceType, str]


def add_parser(sub: Any) -> None:
    p = new_parser(sub, "acls", "add, list and remove ACLs",
                   "Manage ACLs on any Kafka-protocol broker with an authorizer "
                   "(like kafka-acls.sh).")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs")
    p.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME",
                   help="principal of ALLOW ACLs, e.g. User:alice (repeatable)")
    p.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME",
                   help="principal of DENY ACLs (repeatable)")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                   help="host of the ALLOW ACLs (default *)")
    p.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                   help="host of the DENY ACLs (default *)")
    p.add_argument("--operation", action="append", default=[], metavar="OPERATION",
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                   "DescribeConfigs, AlterConfigs, IdempotentWrite or All (repeatable; "
                   "--add defaults to All)")
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC",
                   help="a topic resource (repeatable)")
    p.add_argument("--group", action="append", default=[], metavar="GROUP",
                   help="a group resource (repeatable)")
    p.add_argument("--transactional-id", action="append", default=[], metavar="ID",
                   help="a transactional id resource (repeatable)")
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--resource-pattern-type", choices=sorted(PATTERN_TYPES), type=str.lower,
                   metavar="TYPE", help="literal (default), prefixed, match or any")
    p.add_argument("--principal", action="append", default=[], metavar="TYPE:NAME",
                   help="--list: only ACLs of this principal (repeatable)")
    p.add_argument("--force", action="store_true", help="--remove: do not ask")
    p.set_defaults(run=lambda args: run_command(p.prog, main, args), usage_error=p.error)


# --------------------------------------------------------------------------- arguments


def _resources(args: argparse.Namespace) -> list[Resource]:
    out: list[Resource] = [(ResourceType.TOPIC, t) for t in args.topic]
    out += [(ResourceType.GROUP, g) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return list(dict.fromkeys(out))


def _operation(err: Any, text: str) -> AclOperation:
    op = OPERATIONS.get(text.upper().replace("_", "").replace("-", ""))
    if op is None:
        err(f"unknown --operation {text!r}; use one of "
            f"{', '.join(_camel(o) for o in OPERATIONS.values())}")
    assert op is not None
    return op


def _camel(op: AclOperation) -> str:
    return "".join(w.capitalize() for w in op.name.split("_"))


def _check(args: argparse.Namespace) -> tuple[list[Resource], list[AclOperation]]:
    """Kafka's option rules; a violation is a usage error (exit 2)."""
    err = args.usage_error
    resources = _resources(args)
    ops = [_operation(err, o) for o in args.operation]
    principals = args.allow_principal + args.deny_principal
    for p in principals + args.principal:
        problem = principal_problem(p)
        if problem:
            err(problem)
    if args.allow_host and not args.allow_principal:
        err("--allow-host needs --allow-principal")
    if args.deny_host and not args.deny_principal:
        err("--deny-host needs --deny-principal")
    if args.principal and not args.list:
        err("--principal is a --list filter; use --allow-principal or --deny-principal")
    if args.force and not args.remove:
        err("--force only applies to --remove")
    if args.list and (principals or ops):
        err("--list takes --principal, not --allow-principal/--deny-principal/--operation")
    if (args.add or args.remove) and not resources:
        err(f"--{'add' if args.add else 'remove'} needs a resource: --topic, --group, "
            "--transactional-id or --cluster")
    if args.add:
        _check_add(args, resources, ops)
    return resources, ops


def _check_add(args: argparse.Namespace, resources: list[Resource],
               ops: list[AclOperation]) -> None:
    err = args.usage_error
    if not (args.allow_principal or args.deny_principal):
        err("--add needs --allow-principal or --deny-principal")
    if args.resource_pattern_type not in (None, "literal", "prefixed"):
        err(f"--resource-pattern-type {args.resource_pattern_type} is not valid with --add; "
            "use literal or prefixed")
    for rtype, _ in resources:
        allowed = SUPPORTED_OPERATIONS[rtype] + (AclOperation.ALL,)
        bad = [o for o in ops if o not in allowed]
        if bad:
            err(f"{rtype.name} ACLs do not support operation {_camel(bad[0])}; use "
                f"{', '.join(_camel(o) for o in allowed)}")


def _pattern(args: argparse.Namespace, default: PatternType) -> PatternType:
    return PATTERN_TYPES[args.resource_pattern_type] if args.resource_pattern_type else default


# --------------------------------------------------------------------------- commands


def main(args: argparse.Namespace) -> int:
    resources, ops = _check(args)
    with open_cluster(args) as cluster:
        conn = cluster.any
        if args.add:
            return _add(conn, args, resources, ops)
        if args.remove:
            return _remove(conn, args, resources, ops)
        return _list(conn, args, resources)


# (principal, host, operation, permission) of ACLs to add or filters to remove; None = any.
Entry = tuple[str | None, str | None, AclOperation | None, AclPermissionType]


def _entries(principals: Sequence[str | None], hosts: Sequence[str | None],
             ops: Sequence[AclOperation | None], permission: AclPermissionType) -> list[Entry]:
    return [(p, h, o, permission) for p in principals for h in hosts for o in ops]


def _add(conn: Connection, args: argparse.Namespace, resources: list[Resource],
         ops: list[AclOperation]) -> int:
    pattern = _pattern(args, PatternType.LITERAL)
    wanted: list[AclOperation | None] = list(dict.fromkeys(ops or [AclOperation.ALL]))
    entries = (_entries(args.allow_principal, args.allow_host or ["*"], wanted, ALLOW)
               + _entries(args.deny_principal, args.deny_host or ["*"], wanted, DENY))
    bindings = list(dict.fromkeys(
        AclBinding(rtype, name, pattern, p or "", h or "*", o or AclOperation.ALL, perm)
        for rtype, name in resources for p, h, o, perm in entries))
    m = request_module(CREATE_ACLS, conn.version(CREATE_ACLS))
    _, resp = conn.call(CREATE_ACLS, "CreateAclsRequest", creations=tuple(
        make(m.AclCreation, resource_type=b.resource_type, resource_name=b.name,
             resource_pattern_type=b.pattern_type, principal=b.principal, host=b.host,
             operation=b.operation, permission_type=b.permission) for b in bindings))
    failed = [(b, r) for b, r in zip(bindings, resp.results, strict=True)
              if r.error_code != ErrorCode.none]
    if failed:
        b, r = failed[0]
        added = len(bindings) - len(failed)
        raise CliError(f"cannot add ACL {_entry_text(b)} on {_pattern_text(_key(b))}: "
                       f"{_hinted(r.error_code, r.error_message)}"
                       + (f" ({added} other ACL(s) were added)" if added else ""))
    if args.output == "json":
        print_json({"added": [_as_json(b) for b in bindings]})
        return 0
    out = [_block("Adding ACLs for resource", key, group)
           for key, group in _grouped(bindings, keep_order=True)]
    current = _describe(conn, [_exact(rtype, name, pattern) for rtype, name in resources])
    out += [_block("Current ACLs for resource", key, group) for key, group in _grouped(current)]
    sys.stdout.write("".join(out))
    return 0


def _remove(conn: Connection, args: argparse.Namespace, resources: list[Resource],
            ops: list[AclOperation]) -> int:
    pattern = _pattern(args, PatternType.LITERAL)
    wanted: list[AclOperation | None] = [*dict.fromkeys(ops)] or [None]
    if args.allow_principal or args.deny_principal:
        entries = (_entries(args.allow_principal, args.allow_host or [None], wanted, ALLOW)
                   + _entries(args.deny_principal, args.deny_host or [None], wanted, DENY))
    else:
        entries = _entries([None], [None], wanted, AclPermissionType.ANY)
    filters = [AclBindingFilter(rtype, name, pattern, p, h, o or AclOperation.ANY, perm)
               for rtype, name in resources for p, h, o, perm in entries]
    if not args.force and sys.stdin.isatty() and not _confirm(filters):
        print("Nothing was removed.", file=sys.stderr)
        return 1
    m = request_module(DELETE_ACLS, conn.version(DELETE_ACLS))
    _, resp = conn.call(DELETE_ACLS, "DeleteAclsRequest", filters=tuple(
        make(m.DeleteAclsFilter, **_filter_fields(f)) for f in filters))
    removed, errors = _removed(resp)
    if errors and not removed:
        raise CliError(f"cannot remove ACLs: {errors[0]}")
    if args.output == "json":
        print_json({"removed": [_as_json(b) for b in removed]})
    elif not removed:
        print("No ACLs matched; nothing was removed.")
    else:
        sys.stdout.write("".join(_block("Removed ACLs for resource", key, group)
                                 for key, group in _grouped(removed)))
    if errors:
        print(f"shoal acls: some ACLs could not be removed: {errors[0]}", file=sys.stderr)
        return 1
    return 0


def _removed(resp: Any) -> tuple[list[AclBinding], list[str]]:
    """The ACLs a DeleteAcls response says were removed (sorted), and its errors."""
    removed: set[AclBinding] = set()
    errors: list[str] = []
    for r in resp.filter_results:
        if r.error_code != ErrorCode.none:
            errors.append(_hinted(r.error_code, r.error_message))
            continue
        for a in r.matching_acls:
            if a.error_code != ErrorCode.none:
                errors.append(_hinted(a.error_code, a.error_message))
            else:
                removed.add(_binding(a.resource_type, a.resource_name, a.pattern_type, a))
    return sorted(removed), errors


def _confirm(filters: Sequence[AclBindingFilter]) -> bool:
    print("Are you sure you want to remove the ACLs matching:", file=sys.stderr)
    for f in filters:
        print(f"\t{_filter_text(f)}", file=sys.stderr)
    print("(y/n)? ", end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _list(conn: Connection, args: argparse.Namespace, resources: list[Resource]) -> int:
    if resources:
        pattern = _pattern(args, PatternType.LITERAL)
        filters = [AclBindingFilter(rtype, name, pattern) for rtype, name in resources]
    else:
        filters = [AclBindingFilter(pattern_type=_pattern(args, PatternType.ANY))]
    if args.principal:
        filters = [AclBindingFilter(f.resource_type, f.name, f.pattern_type, p)
                   for f in filters for p in dict.fromkeys(args.principal)]
    acls = _describe(conn, filters)
    if args.output == "json":
        print_json([_as_json(b) for b in acls])
    else:
        sys.stdout.write("".join(_block("Current ACLs for resource", key, group)
                                 for key, group in _grouped(acls)))
    return 0


def _describe(conn: Connection, filters: Iterable[AclBindingFilter]) -> list[AclBinding]:
    """The ACLs every filter selects, each once, sorted."""
    found: set[AclBinding] = set()
    for f in filters:
        _, resp = conn.call(DESCRIBE_ACLS, "DescribeAclsRequest", **_filter_fields(f))
        if resp.error_code != ErrorCode.none:
            raise CliError(f"cannot list ACLs: {_hinted(resp.error_code, resp.error_message)}")
        for r in resp.resources:
            found.update(_binding(r.resource_type, r.resource_name, r.pattern_type, a)
                         for a in r.acls)
    return sorted(found)


# --------------------------------------------------------------------------- wire and text


def _filter_fields(f: AclBindingFilter) -> dict[str, Any]:
    return {"resource_type_filter": f.resource_type, "resource_name_filter": f.name,
            "pattern_type_filter": f.pattern_type, "principal_filter": f.principal,
            "host_filter": f.host, "operation": f.operation, "permission_type": f.permission}


def _exact(rtype: ResourceType, name: str, pattern: PatternType) -> AclBindingFilter:
    return AclBindingFilter(rtype, name, pattern)


def _binding(rtype: int, name: str, pattern: int, a: Any) -> AclBinding:
    return AclBinding(from_code(ResourceType, rtype), name, from_code(PatternType, pattern),
                      a.principal, a.host, from_code(AclOperation, a.operation),
                      from_code(AclPermissionType, a.permission_type))


def _key(b: AclBinding) -> tuple[ResourceType, str, PatternType]:
    return b.resource_type, b.name, b.pattern_type


def _grouped(bindings: Sequence[AclBinding], keep_order: bool = False
             ) -> list[tuple[tuple[ResourceType, str, PatternType], list[AclBinding]]]:
    ordered = bindings if keep_order else sorted(bindings)
    if keep_order:  # group by first appearance, keep the entries' order within a group
        keys = list(dict.fromkeys(_key(b) for b in ordered))
        return [(k, [b for b in ordered if _key(b) == k]) for k in keys]
    return [(k, list(g)) for k, g in groupby(ordered, key=_key)]


def _pattern_text(key: tuple[ResourceType, str, PatternType]) -> str:
    rtype, name, pattern = key
    return f"ResourcePattern(resourceType={rtype.name}, name={name}, patternType={pattern.name})"


def _entry_text(b: AclBinding) -> str:
    return (f"(principal={b.principal}, host={b.host}, operation={b.operation.name}, "
            f"permissionType={b.permission.name})")


def _filter_text(f: AclBindingFilter) -> str:
    def name(v: Any) -> str:
        return "ANY" if v is None else str(getattr(v, "name", v))

    return (f"ResourcePatternFilter(resourceType={f.resource_type.name}, name={name(f.name)}, "
            f"patternType={f.pattern_type.name}) (principal={name(f.principal)}, "
            f"host={name(f.host)}, operation={f.operation.name}, "
            f"permissionType={f.permission.name})")


def _block(title: str, key: tuple[ResourceType, str, PatternType],
           bindings: Sequence[AclBinding]) -> str:
    lines = [f"{title} `{_pattern_text(key)}`:"] + [f"\t{_entry_text(b)}" for b in bindings]
    return "\n".join(lines) + "\n\n"


def _as_json(b: AclBinding) -> dict[str, str]:
    return {"resource_type": b.resource_type.name, "resource_name": b.name,
            "pattern_type": b.pattern_type.name, "principal": b.principal, "host": b.host,
            "operation": b.operation.name, "permission_type": b.permission.name}


# A hint is left out when the broker's own message already gives that advice (Shoal's
# SECURITY_DISABLED message names the config to set): the advice is printed once.
_ALREADY_SAID = {ErrorCode.security_disabled: "authorizer.class.name"}


def _hinted(code: ErrorCode | int, message: str | None) -> str:
    code = ErrorCode(int(code))
    hint = HINTS.get(code)
    if hint and message and _ALREADY_SAID.get(code, hint) in message:
        hint = None
    return error_text(code, message) + (f"; {hint}" if hint else "")
