"""The ``shoal`` command line (the ``shoal`` entry point: ``cli.main:main``).

``shoal broker ...`` runs a broker in the foreground (``broker/main.py``: the only broker module
the CLI imports). Every other subcommand (``share-groups``, ``consumer-groups``, ``topics``,
``configs``, ``acls``, ``users``) is an admin command of this package that talks to any
Kafka-protocol broker over the wire through ``client/``.
"""

from __future__ import annotations

import argparse
import sys

from typing import Any

from broker.main import add_broker_parser, run_broker_command
from cli import acls, cluster, configs, consumer_groups, share_groups, topics, users


def add_commands(sub: Any) -> None:
    """Add ``share-groups``, ``consumer-groups``, ``topics``, ``configs``, ``acls``, ``users``
    and ``cluster`` to the ``shoal`` subparsers."""
    share_groups.add_parser(sub)
    consumer_groups.add_parser(sub)
    topics.add_parser(sub)
    configs.add_parser(sub)
    acls.add_parser(sub)
    users.add_parser(sub)
    cluster.add_parser(sub)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (``sys.argv[1:]`` by default) and run the subcommand; returns the exit
    status (0 success, 1 an operation failed, 2 invalid usage)."""
    parser = argparse.ArgumentParser(prog="shoal", description="Shoal: a Kafka-compatible "
                                     "broker for share groups")
    sub = parser.add_subparsers(dest="command", required=True)
    add_broker_parser(sub)
    add_commands(sub)
    args = parser.parse_args(argv)
    if args.command == "broker":
        return run_broker_command(args)
    if hasattr(args, "run"):
        code: int = args.run(args)
        return code
    return 2


if __name__ == "__main__":
    sys.exit(main())
