"""``shoal`` admin commands: share groups, consumer groups, topics, configs, ACLs, SCRAM users
and the cluster over the Kafka protocol (and ``shoal cluster run``, a local cluster launcher).

Each command talks to any Kafka-protocol broker (Shoal or Apache Kafka) through
``client/admin_wire.py`` (the admin part of the client library), never through a broker's files.
``cli/main.py``'s ``add_commands`` registers the subcommands on its parser (this module holds
only what they share, so they import it and it imports none of them); each sets
``args.run``, which returns the exit code: 0 on success, 1 when an operation failed, 2 for
invalid usage. Errors are one line on stderr that says what failed and what to do.

Every command takes ``--command-config FILE``: Kafka client properties (``security.protocol``,
``sasl.mechanism``, ``sasl.username``/``sasl.password`` or ``sasl.jaas.config``,
``ssl.ca.location``, ...; see ``client/security.py``), as kafka-*.sh take them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from client.admin_wire import CliError, Cluster
from client.security import SecurityConfigError, SecuritySettings, parse_properties

DEFAULT_TIMEOUT_MS = 30_000


def new_parser(sub: Any, name: str, help_text: str, description: str,
               bootstrap_default: str | None = None) -> argparse.ArgumentParser:
    """A subcommand parser with the common connection options and one-line usage errors
    (``--bootstrap-server`` is required unless ``bootstrap_default`` is given)."""
    p: argparse.ArgumentParser = sub.add_parser(name, help=help_text, description=description)
    p.add_argument("--bootstrap-server", required=bootstrap_default is None,
                   default=bootstrap_default, metavar="HOST:PORT[,HOST:PORT]",
                   help="the broker(s) to connect to"
                   + (f" (default {bootstrap_default})" if bootstrap_default else ""))
    p.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS",
                   help=f"timeout of each request in ms (default {DEFAULT_TIMEOUT_MS})")
    p.add_argument("--output", choices=("table", "json"), default="table",
                   help="print aligned tables (default) or JSON")
    p.add_argument("--command-config", metavar="FILE",
                   help="Kafka client properties for the connection: security.protocol, "
                   "sasl.mechanism, sasl.username, sasl.password (or sasl.jaas.config), "
                   "ssl.ca.location, ssl.certificate.location, ssl.key.location, ...")
    prog = p.prog

    def one_line_error(message: str) -> NoReturn:
        print(f"{prog}: {message}; see {prog} --help", file=sys.stderr)
        raise SystemExit(2)

    p.error = one_line_error  # type: ignore[method-assign]
    return p


def security_settings(path: str | None) -> SecuritySettings:
    """The security settings in a ``--command-config`` file (PLAINTEXT without one).

    Raises:
        CliError: the file cannot be read or its settings are invalid (exit code 2).
    """
    if path is None:
        return SecuritySettings()
    try:
        with open(path, encoding="utf-8") as f:
            props = parse_properties(f.read())
    except OSError as exc:
        raise CliError(f"cannot read --command-config {path}: {exc.strerror or exc}",
                       exit_code=2) from None
    try:
        return SecuritySettings.from_properties(props)
    except SecurityConfigError as exc:
        raise CliError(f"--command-config {path}: {exc}", exit_code=2) from None


def open_cluster(args: argparse.Namespace) -> Cluster:
    """A ``Cluster`` for ``--bootstrap-server``, secured as ``--command-config`` says."""
    return Cluster(args.bootstrap_server, args.timeout, security_settings(args.command_config))


def run_command(prog: str, fn: Callable[[argparse.Namespace], int],
                args: argparse.Namespace) -> int:
    """Run a command; a ``CliError`` prints one line on stderr and gives its exit code."""
    try:
        return fn(args)
    except CliError as exc:
        print(f"{prog}: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
