"""The ``shoal`` command line.

``shoal broker --listen HOST:PORT --data-dir DIR --config FILE`` runs a broker in the foreground
(``--add-scram 'SCRAM-SHA-256=[name=U,password=P]'``, repeatable, stores SCRAM credentials first)
until SIGTERM/SIGINT, then shuts down gracefully (exit status 0). A storage failure in the data
directory also shuts it down, with exit status 1 (``storage/log_dir.py``). At start the
open-file soft limit is raised to the hard limit (``broker/resources.py``). Options override the properties file, which
overrides built-in defaults. uvloop is used when installed (``--no-uvloop`` to opt out).

The admin commands (``shoal share-groups``, ``shoal topics``, ...) live in the ``cli`` package,
whose ``cli/main.py`` is the ``shoal`` entry point; it registers this module's ``broker``
subcommand (``add_broker_parser``, ``run_broker_command``). ``python -m broker.main broker ...``
runs the broker alone.

``--cluster etcd://HOST:PORT --node-id N`` makes the broker a member of the cluster whose
metadata is in that etcd (``broker/cluster_member.py``); unreachable etcd, another cluster's
data directory or a live duplicate node id end the start with exit status 1 and a message.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from broker.config import BrokerConfig, ConfigError, read_properties
from broker.gc_policy import GcPolicy
from broker.resources import raise_open_file_limit, tune_malloc
from broker.security.sasl import SaslConfigError
from broker.security.scram_store import ScramArg, ScramError, parse_add_scram
from broker.security.metrics_web import WebConfigError
from broker.security.tls import TlsConfigError
from broker.shutdown_deadline import ShutdownDeadline
from cluster.errors import ClusterStoreError


def _setup_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {"ts": self.formatTime(record), "level": record.levelname, "logger": record.name,
               "msg": record.getMessage()}
        for k in ("event", "group", "topic", "partition", "member"):
            if hasattr(record, k):
                doc[k] = getattr(record, k)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc)


def build_config(args: argparse.Namespace) -> BrokerConfig:
    """Merge defaults, the properties file and command-line options.

    Raises:
        ConfigError: an unknown or invalid config.
    """
    values: dict[str, str] = {}
    if args.config:
        values.update(read_properties(Path(args.config)))
    for item in args.override or []:
        k, sep, v = item.partition("=")
        if not sep:
            raise ConfigError(f"--override expects name=value, got {item!r}")
        values[k.strip()] = v.strip()
    if args.listen:
        values["listeners"] = args.listen
    if args.data_dir:
        values["log.dirs"] = args.data_dir
    if getattr(args, "cluster", None):
        values["cluster.etcd.endpoints"] = args.cluster
    if getattr(args, "node_id", None) is not None:
        values["node.id"] = str(args.node_id)
    if getattr(args, "metrics_listen", None):
        values["metrics.listen"] = args.metrics_listen
    return BrokerConfig(values)


def listening_line(name: str, protocol: str, host: str, port: int) -> str:
    """The startup line of one listener: its address and security protocol, and its listener
    name only when that differs from the protocol (``PLAINTEXT://`` is not said twice)."""
    if name == protocol:
        return f"listening on {host}:{port} ({protocol})"
    return f"listening on {host}:{port} (listener {name}, {protocol})"


async def run_broker(config: BrokerConfig, ready_file: str | None = None,
                     add_scram: Sequence[ScramArg] = (), log_format: str = "plain",
                     deadline: ShutdownDeadline | None = None) -> int:
    """Run until a signal (returns 0) or a storage failure (returns the broker's exit code).
    ``add_scram`` credentials are stored when the broker starts (``--add-scram``). Each
    listener's address is printed on stdout, or logged as an ``event: listening`` record when
    ``log_format`` is ``json`` so that stdout and stderr carry only JSON lines. ``deadline``
    is armed when the shutdown starts (``shutdown.force.timeout.ms``); the caller disarms it
    once the event loop is closed."""
    # Lazy: imported here, not at the top: `shoal topics ...` and the other CLI verbs load this module
    # for the broker subcommand's options and should not pay for importing the whole broker.
    from broker.app import Broker
    from broker.server import Server

    broker = Broker(config)
    broker.scram_bootstrap = list(add_scram)
    server = Server(broker)
    stop = asyncio.Event()
    server.broker.add_fatal_listener(stop.set)
    await server.start()
    # What start-up made (modules, kio schema classes, loaded state) lives as long as the broker:
    # moved out of the collector's sight, and so are the survivors of each full collection
    # later, so a full collection walks only what came since the last one, which keeps its
    # pauses of the event loop short (issue 25; broker/gc_policy.py).
    gc_policy = GcPolicy()
    gc_policy.start()
    reclaim = asyncio.create_task(gc_policy.run())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):  # before we say we are ready: a reader may stop us
        loop.add_signal_handler(sig, stop.set)
    if ready_file:
        Path(ready_file).write_text(f"{server.host}:{server.port}\n")
    for endpoint, (host, port) in zip(server.endpoints, server.bound, strict=True):
        line = listening_line(endpoint.name, endpoint.security_protocol.value, host, port)
        if log_format == "json":  # stdout stays pure JSON lines: the line is a log record
            logging.getLogger("shoal").info(line, extra={"event": "listening"})
        else:
            print(f"shoal: {line}", flush=True)
    await stop.wait()
    broker = server.broker
    if deadline is not None:
        deadline.where = lambda: broker.stop_step
        deadline.arm(asyncio.get_running_loop())
    if broker.fatal is None:
        logging.getLogger("shoal").info("shutting down (signal received)")
        if broker.member is not None and broker.config.get("controlled.shutdown.enable"):
            from broker.cluster_admin import controlled_shutdown  # lazy: as Broker above

            broker.stop_step = "in its controlled shutdown (waiting for etcd and the controller)"
            await controlled_shutdown(
                broker.member, broker.config.get("controlled.shutdown.timeout.ms") / 1000)
    reclaim.cancel()
    gc_policy.stop()
    await server.stop()
    return server.broker.exit_code


def add_broker_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``broker`` subcommand (run a broker in the foreground) to ``sub``."""
    b: argparse.ArgumentParser = sub.add_parser(
        "broker", help="run a broker in the foreground",
        description="Run a broker in the foreground until Ctrl-C or SIGTERM. Options override "
        "the --config file; docs/configuration.md lists every broker config.")
    b.add_argument("--listen", metavar="HOST:PORT",
                   help="one PLAINTEXT listener (Kafka: listeners; default 127.0.0.1:9092)")
    b.add_argument("--data-dir", metavar="DIR",
                   help="directory for logs and state (Kafka: log.dirs; default ./data)")
    b.add_argument("--config", metavar="FILE",
                   help="a Kafka-style .properties file (default: none, built-in defaults)")
    b.add_argument("--override", "-o", action="append", metavar="NAME=VALUE",
                   help="set any broker config (repeatable)")
    b.add_argument("--cluster", metavar="etcd://HOST:PORT[,HOST:PORT]",
                   help="join the cluster whose metadata is in this etcd (config "
                   "cluster.etcd.endpoints; default: run one broker on its own)")
    b.add_argument("--node-id", metavar="N", type=int,
                   help="this broker's id in the cluster (Kafka: node.id; default 1)")
    b.add_argument("--metrics-listen", metavar="HOST:PORT",
                   help="serve Prometheus metrics at http://HOST:PORT/metrics (config "
                   "metrics.listen; off by default)")
    b.add_argument("--add-scram", action="append", metavar="'MECH=[name=U,password=P]'",
                   help="store a SCRAM credential at start, as kafka-storage format "
                   "--add-scram (repeatable; also iterations=N, salt=B64, saltedpassword=B64)")
    b.add_argument("--log-level", default="INFO",
                   help="DEBUG, INFO, WARNING or ERROR (default: %(default)s)")
    b.add_argument("--log-format", choices=("plain", "json"), default="plain",
                   help="plain text, or one JSON object per line on stderr; with json the "
                   "listening lines are log records too (default: %(default)s)")
    b.add_argument("--no-uvloop", action="store_true",
                   help="use the stdlib event loop (default: uvloop when installed)")
    b.add_argument("--ready-file", help=argparse.SUPPRESS)
    return b


def run_broker_command(args: argparse.Namespace) -> int:
    """Run the broker as the parsed ``broker`` subcommand says; returns the exit status."""
    _setup_logging(args.log_level, args.log_format)
    try:
        config = build_config(args)
        add_scram = [parse_add_scram(a) for a in args.add_scram or []]
    except (ConfigError, OSError, ScramError) as exc:
        where = "--add-scram: " if isinstance(exc, ScramError) else ""
        print(f"shoal: configuration error: {where}{exc}", file=sys.stderr)
        return 2
    if not args.no_uvloop:
        try:
            import uvloop  # lazy: optional (not on Windows), and --no-uvloop skips it

            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        except ImportError:
            pass
    raise_open_file_limit()
    tune_malloc()
    # Armed by run_broker when a signal starts the shutdown; disarmed only once asyncio.run has
    # returned, so that its own teardown (cancelling tasks, joining executor threads) is bounded.
    deadline = ShutdownDeadline(config.get("shutdown.force.timeout.ms") / 1000)
    try:
        code = asyncio.run(run_broker(config, args.ready_file, add_scram, args.log_format,
                                      deadline))
    except (TlsConfigError, SaslConfigError, WebConfigError) as exc:
        print(f"shoal: configuration error: {exc}", file=sys.stderr)
        return 2
    except (OSError, ScramError, ClusterStoreError, ValueError) as exc:
        hint = ""
        if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
            hint = ("; another process (another broker?) listens there: stop it, or give "
                    "another port (--listen HOST:PORT, --metrics-listen, make run PORT=N)")
        print(f"shoal: could not start: {exc}{hint}", file=sys.stderr)
        return 1
    finally:
        deadline.disarm()
    return code


def main(argv: list[str] | None = None) -> int:
    """``python -m broker.main broker ...``: the broker alone (``cli.main`` is ``shoal``)."""
    parser = argparse.ArgumentParser(prog="shoal", description="Shoal: a Kafka-compatible "
                                     "broker for share groups")
    sub = parser.add_subparsers(dest="command", required=True)
    add_broker_parser(sub)
    return run_broker_command(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
