"""``shoal users``: add, describe and delete SCRAM credentials (kafka-configs.sh's users entity).

    shoal users --bootstrap-server B --add --name N --mechanism SCRAM-SHA-256
                (--password P | --password-file FILE|-) [--iterations 8192]
    shoal users --bootstrap-server B --describe [--name N ...]
    shoal users --bootstrap-server B --delete --name N --mechanism SCRAM-SHA-256

The same through ``shoal configs --entity-type users`` (kafka-configs.sh's form)::

    shoal configs --bootstrap-server B --entity-type users --entity-name alice --alter
                  --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'
    shoal configs ... --entity-type users --entity-name alice --alter --delete-config SCRAM-SHA-256
    shoal configs ... --entity-type users [--entity-name alice] --describe

RPCs: AlterUserScramCredentials and DescribeUserScramCredentials (v0). The password never goes
on the wire: like Kafka's tools, the client picks a random salt and sends the salted password
``Hi(password, salt, iterations)`` of RFC 5802, which is PBKDF2-HMAC with the mechanism's hash
(``hashlib.pbkdf2_hmac``); the broker derives the stored and server keys from it. Passwords are
never printed.
"""

from __future__ import annotations

import argparse
import getpass
import hashlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from cli import new_parser, open_cluster, run_command
from cli.output import Cell, emit, print_json
from client.admin_wire import CliError, Connection, error_text
from protocol.codec import request_module
from protocol.messages import make

DESCRIBE_SCRAM, ALTER_SCRAM = 50, 51
# Kafka's ScramMechanism wire codes and hashes.
MECHANISMS = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}
MECHANISM_NAMES = {code: name for name, (code, _) in MECHANISMS.items()}
DEFAULT_ITERATIONS = 4096
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384  # Kafka's ScramMechanism bounds
SALT_BYTES = 64  # as librdkafka's AlterUserScramCredentials

HINTS = {
    ErrorCode.resource_not_found: "list users with shoal users --describe",
    ErrorCode.cluster_authorization_failed: "connect as a super user or a principal with "
                                            "ALTER (DESCRIBE to list) on the cluster",
    ErrorCode.unsupported_sasl_mechanism: "use SCRAM-SHA-256 or SCRAM-SHA-512",
}


@dataclass(frozen=True, slots=True)
class Upsertion:
    name: str
    mechanism: str
    iterations: int
    password: str = field(repr=False)


def add_parser(sub: Any) -> None:
    p = new_parser(sub, "users", "add, describe and delete SCRAM users",
                   "Manage SCRAM credentials on any Kafka-protocol broker (like "
                   "kafka-configs.sh --entity-type users).")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add or update a credential")
    action.add_argument("--describe", action="store_true", help="list credentials")
    action.add_argument("--delete", action="store_true", help="delete a credential")
    p.add_argument("--name", action="append", default=[], metavar="USER",
                   help="the user (repeatable; --describe without it: every user)")
    p.add_argument("--mechanism", type=str.upper, choices=sorted(MECHANISMS),
                   metavar="MECHANISM", help="SCRAM-SHA-256 or SCRAM-SHA-512")
    p.add_argument("--password", metavar="PASSWORD", help="the password (visible to other "
                   "local users in the process list; prefer --password-file)")
    p.add_argument("--password-file", metavar="FILE", help="read the password from the first "
                   "line of FILE ('-': standard input)")
    p.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS, metavar="N",
                   help=f"SCRAM iterations, {MIN_ITERATIONS}-{MAX_ITERATIONS} "
                   f"(default {DEFAULT_ITERATIONS})")
    p.set_defaults(run=lambda args: run_command(p.prog, main, args), usage_error=p.error)


def _password(args: argparse.Namespace) -> str:
    err = args.usage_error
    if args.password is not None and args.password_file is not None:
        err("use --password or --password-file, not both")
    if args.password is not None:
        return str(args.password)
    if args.password_file is not None:
        try:
            if args.password_file == "-":
                line = sys.stdin.readline()
            else:
                with open(args.password_file, encoding="utf-8") as f:
                    line = f.readline()
        except OSError as exc:
            raise CliError(f"cannot read --password-file {args.password_file}: "
                           f"{exc.strerror or exc}", exit_code=2) from None
        return line.rstrip("\r\n")
    if sys.stdin.isatty():
        return getpass.getpass(f"Password for {args.name[0]}: ")
    err("--add needs --password or --password-file")
    raise AssertionError("unreachable")


def _check(args: argparse.Namespace) -> None:
    err = args.usage_error
    if (args.add or args.delete) and len(args.name) != 1:
        err(f"--{'add' if args.add else 'delete'} needs exactly one --name")
    if (args.add or args.delete) and args.mechanism is None:
        err(f"--{'add' if args.add else 'delete'} needs --mechanism (SCRAM-SHA-256 or "
            "SCRAM-SHA-512)")
    if args.add and not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
        err(f"--iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}")
    if not args.add and (args.password is not None or args.password_file is not None):
        err("--password only applies to --add")
    if args.describe and args.mechanism is not None:
        err("--describe takes no --mechanism")


def main(args: argparse.Namespace) -> int:
    _check(args)
    upserts: list[Upsertion] = []
    if args.add:
        upserts = [Upsertion(args.name[0], args.mechanism, args.iterations, _password(args))]
    with open_cluster(args) as cluster:
        if args.describe:
            return describe(cluster.any, args.name, args.output)
        deletes = [] if args.add else [(args.name[0], args.mechanism)]
        alter(cluster.any, upserts, deletes)
    if args.output == "json":
        print_json({"user": args.name[0], "mechanism": args.mechanism,
                    "action": "added" if args.add else "deleted"} |
                   ({"iterations": args.iterations} if args.add else {}))
    else:
        print(f"Completed updating config for user {args.name[0]}.")
    return 0


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802 ``Hi(Normalize(password), salt, i)``: PBKDF2-HMAC with the mechanism's hash.

    Kafka's ScramFormatter does not SASLprep the password either; it uses the UTF-8 bytes.
    """
    _, digest = MECHANISMS[mechanism]
    return hashlib.pbkdf2_hmac(digest, password.encode("utf-8"), salt, iterations)


def alter(conn: Connection, upserts: Sequence[Upsertion],
          deletes: Sequence[tuple[str, str]]) -> None:
    """One AlterUserScramCredentials with every change.

    Raises:
        CliError: the broker refused a change (the first refusal is reported).
    """
    m = request_module(ALTER_SCRAM, conn.version(ALTER_SCRAM))
    upsertions = []
    for u in upserts:
        salt = os.urandom(SALT_BYTES)
        upsertions.append(make(
            m.ScramCredentialUpsertion, name=u.name, mechanism=MECHANISMS[u.mechanism][0],
            iterations=u.iterations, salt=salt,
            salted_password=salted_password(u.mechanism, u.password, salt, u.iterations)))
    deletions = tuple(make(m.ScramCredentialDeletion, name=n, mechanism=MECHANISMS[mech][0])
                      for n, mech in deletes)
    _, resp = conn.call(ALTER_SCRAM, "AlterUserScramCredentialsRequest", deletions=deletions,
                        upsertions=tuple(upsertions))
    for r in resp.results:
        if r.error_code != ErrorCode.none:
            raise CliError(f"cannot update the SCRAM credentials of user {r.user!r}: "
                           f"{_hinted(r.error_code, r.error_message)}")


def describe(conn: Connection, names: Sequence[str], output: str) -> int:
    """Print ``USER MECHANISM ITERATIONS`` for the named users (all without names); 1 when a
    named user has no credential."""
    m = request_module(DESCRIBE_SCRAM, conn.version(DESCRIBE_SCRAM))
    wanted = list(dict.fromkeys(names))
    users = tuple(make(m.UserName, name=n) for n in wanted) if wanted else None
    _, resp = conn.call(DESCRIBE_SCRAM, "DescribeUserScramCredentialsRequest", users=users)
    if resp.error_code != ErrorCode.none:
        raise CliError(f"cannot describe SCRAM credentials: "
                       f"{_hinted(resp.error_code, resp.error_message)}")
    rows: list[list[Cell]] = []
    errors: list[str] = []
    for r in sorted(resp.results, key=lambda r: r.user):
        if r.error_code != ErrorCode.none:
            # A refused describe of every user comes back as one result for user "".
            who = f"user {r.user!r}" if r.user else "cannot describe SCRAM credentials"
            errors.append(f"{who}: {_hinted(r.error_code, r.error_message)}")
            continue
        for info in sorted(r.credential_infos, key=lambda i: int(i.mechanism)):
            rows.append([r.user, MECHANISM_NAMES.get(int(info.mechanism),
                                                     f"UNKNOWN({int(info.mechanism)})"),
                         int(info.iterations)])
    if rows or output == "json" or not errors:
        emit(output, ["USER", "MECHANISM", "ITERATIONS"], rows)
    for e in errors:
        print(f"shoal users: {e}", file=sys.stderr)
    return 1 if errors else 0


def _hinted(code: ErrorCode | int, message: str | None) -> str:
    hint = HINTS.get(ErrorCode(int(code)))
    return error_text(code, message) + (f"; {hint}" if hint else "")


# --------------------------------------------------------------------------- configs alias


def split_outside_brackets(text: str) -> list[str]:
    """``A=[x=1,y=2],B=[z=3]`` -> ``["A=[x=1,y=2]", "B=[z=3]"]`` (kafka-configs.sh's lists)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def parse_scram_config(user: str, item: str) -> Upsertion:
    """``SCRAM-SHA-256=[iterations=8192,password=secret]`` (or ``=[password=secret]``).

    Raises:
        CliError: not that form, an unknown mechanism, or bad iterations (exit code 2).
    """
    mechanism, sep, value = item.partition("=")
    mechanism = mechanism.strip().upper()
    if mechanism not in MECHANISMS:
        raise CliError(f"users take SCRAM-SHA-256 or SCRAM-SHA-512 configs, not {mechanism!r}",
                       exit_code=2)
    value = value.strip()
    if not sep or not (value.startswith("[") and value.endswith("]")):
        raise CliError(f"invalid --add-config for {mechanism}; use "
                       f"'{mechanism}=[iterations=8192,password=...]'", exit_code=2)
    fields: dict[str, str] = {}
    for pair in value[1:-1].split(","):
        k, eq, v = pair.partition("=")
        if not eq:
            raise CliError(f"invalid {mechanism} setting {k.strip()!r}; use name=value",
                           exit_code=2)
        fields[k.strip().lower()] = v
    if "password" not in fields:
        raise CliError(f"{mechanism} needs password=...", exit_code=2)
    try:
        iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
    except ValueError:
        raise CliError(f"{mechanism} iterations must be a number", exit_code=2) from None
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise CliError(f"{mechanism} iterations must be between {MIN_ITERATIONS} and "
                       f"{MAX_ITERATIONS}", exit_code=2)
    unknown = sorted(set(fields) - {"password", "iterations"})
    if unknown:
        raise CliError(f"unknown {mechanism} setting {unknown[0]!r}; use iterations and "
                       "password", exit_code=2)
    return Upsertion(user, mechanism, iterations, fields["password"])
