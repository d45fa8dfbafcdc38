"""``shoal cluster run``: etcd and N brokers of one cluster on this machine, in the foreground
(``make cluster``).

    shoal cluster run [--brokers N] [--port P] [--data-dir D] [--override NAME=VALUE ...]

What it starts, all on 127.0.0.1:

- etcd (found on PATH; ``make etcd`` installs Debian's etcd-server), data in ``D/etcd``, log in
  ``D/etcd.log``, on a free client port and a free peer port. The ports are kept in
  ``D/cluster.json`` and reused by the next run on ``D`` while they are free, so a re-run keeps
  etcd's data (the same cluster, the same cluster id) and, mostly, the same command lines.
- broker i (1..N): ``shoal broker --cluster etcd://127.0.0.1:C --node-id i --config
  D/broker-i.properties --data-dir D/broker-i``, output appended to ``D/broker-i.log``. The
  exact command line is printed, so a broker that died (or was killed with kill -9) can be
  started again by hand from the same directory.
- ``D/broker-i.properties`` (written here, readable by its owner only): clients connect to
  PLAINTEXT 127.0.0.1:P+i-1; brokers call each other on INTERNAL 127.0.0.1:P+100+i-1, SASL
  PLAIN as the super user ``broker`` with a password generated for this data directory
  (``D/inter-broker.secret``), since the share-state and other inter-broker RPCs need
  CLUSTER_ACTION.

While it runs, a broker that exits is reported (status, log, command line to restart it) and
etcd and the other brokers keep running. SIGINT (Ctrl-C) or SIGTERM stops everything: the
brokers first (SIGTERM, then SIGKILL after ``--stop-timeout``), then etcd (the same). The
children run in their own process group, so a Ctrl-C in the terminal reaches only this process
and the order holds; on Linux they also get SIGTERM if this process dies without stopping them.

Exit status: 0 after a stop by signal, 1 when etcd cannot be started, 2 for invalid usage (a bad
option, a port in use, etcd not installed).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from client.admin_wire import CliError

HOST = "127.0.0.1"
MAX_BROKERS = 64
ETCD_START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0
POLL_S = 0.2
STATE_FILE = "cluster.json"


def add_parser(sub: Any) -> None:
    """``shoal cluster run`` on the ``cluster`` subparsers."""
    p = sub.add_parser(
        "run", help="start etcd and N brokers on this machine, in the foreground",
        description="Start etcd and N cluster brokers on 127.0.0.1 in the foreground (make "
        "cluster). Broker i listens on PORT+i-1 with node id i and data in DATA_DIR/broker-i; "
        "etcd keeps its data in DATA_DIR/etcd. Ctrl-C or SIGTERM stops them all.")
    p.add_argument("--brokers", type=int, default=3, metavar="N",
                   help=f"number of brokers, 1 to {MAX_BROKERS} (default 3)")
    p.add_argument("--port", type=int, default=9092, metavar="P",
                   help="broker 1's port; broker i listens on P+i-1 (default 9092)")
    p.add_argument("--data-dir", default="./data-cluster", metavar="DIR",
                   help="where etcd's and each broker's data and logs go (default "
                   "./data-cluster)")
    p.add_argument("--override", "-o", action="append", default=[], metavar="NAME=VALUE",
                   help="a broker config passed to every broker (repeatable)")
    p.add_argument("--stop-timeout", type=float, default=STOP_TIMEOUT_S, metavar="SECONDS",
                   help="how long brokers, then etcd, may take to stop before they are killed "
                   f"(default {STOP_TIMEOUT_S:g})")
    p.set_defaults(run=run_command)


# ---------------------------------------------------------------------------- the plan (pure)


@dataclass(frozen=True)
class BrokerPlan:
    node_id: int
    port: int
    data_dir: str
    log: str
    command: tuple[str, ...]

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"


@dataclass(frozen=True)
class EtcdPlan:
    client_port: int
    peer_port: int
    data_dir: str
    log: str

    @property
    def client_url(self) -> str:
        return f"http://{HOST}:{self.client_port}"

    @property
    def endpoint(self) -> str:
        """What ``shoal broker --cluster`` takes."""
        return f"etcd://{HOST}:{self.client_port}"

    @property
    def command(self) -> tuple[str, ...]:
        peer = f"http://{HOST}:{self.peer_port}"
        return ("etcd", "--name", "shoal", "--data-dir", self.data_dir,
                "--listen-client-urls", self.client_url, "--advertise-client-urls",
                self.client_url, "--listen-peer-urls", peer,
                "--initial-advertise-peer-urls", peer, "--initial-cluster", f"shoal={peer}",
                "--logger", "zap")


def check_args(brokers: int, port: int, overrides: Sequence[str]) -> None:
    """Raises:
        CliError: a broker count or port range out of bounds, or an override without ``=``
            (exit code 2).
    """
    if not 1 <= brokers <= MAX_BROKERS:
        raise CliError(f"--brokers {brokers} is out of range; give 1 to {MAX_BROKERS}",
                       exit_code=2)
    if not 1 <= port or port + brokers - 1 > 65535:
        raise CliError(f"--port {port} with {brokers} brokers needs ports {port} to "
                       f"{port + brokers - 1}, outside 1-65535; give a lower --port",
                       exit_code=2)
    for o in overrides:
        if "=" not in o:
            raise CliError(f"invalid --override {o!r}; use NAME=VALUE", exit_code=2)


def shoal_command(argv0: str, executable: str) -> list[str]:
    """How to run ``shoal``: the script this process was started as (``.venv/bin/shoal``), or
    this Python with ``-m cli.main`` (which runs the ``cli`` package of the current directory
    first, as ``python -m`` does)."""
    if Path(argv0).name == "shoal" and os.access(argv0, os.X_OK):
        return [argv0]
    return [executable, "-m", "cli.main"]


INTERNAL_PORT_OFFSET = 100  # broker i's inter-broker listener: P + 100 + i - 1


def broker_properties(port: int, internal_port: int, secret: str) -> str:
    """Broker configs of one member: a PLAINTEXT listener for clients and a SASL PLAIN one for
    the other brokers, whose user ``broker`` is a super user (see the module doc)."""
    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="broker" password="{secret}" user_broker="{secret}";')
    return "\n".join([
        "# Written by shoal cluster run: clients use PLAINTEXT, brokers call each other on",
        "# INTERNAL as the super user broker.",
        f"listeners=PLAINTEXT://{HOST}:{port},INTERNAL://{HOST}:{internal_port}",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
        "inter.broker.listener.name=INTERNAL",
        "sasl.enabled.mechanisms=PLAIN",
        "sasl.mechanism.inter.broker.protocol=PLAIN",
        f"listener.name.internal.plain.sasl.jaas.config={jaas}",
        "super.users=User:broker", ""])


def broker_plans(shoal: Sequence[str], etcd_endpoint: str, brokers: int, port: int,
                 data_dir: str, overrides: Sequence[str] = ()) -> list[BrokerPlan]:
    """Broker i: node id i, port ``port``+i-1, data in ``data_dir``/broker-i, configs in
    ``data_dir``/broker-i.properties (``write_properties``)."""
    plans = []
    for i in range(1, brokers + 1):
        d = os.path.join(data_dir, f"broker-{i}")
        cmd = [*shoal, "broker", "--cluster", etcd_endpoint, "--node-id", str(i),
               "--config", os.path.join(data_dir, f"broker-{i}.properties"), "--data-dir", d]
        for o in overrides:
            cmd += ["--override", o]
        plans.append(BrokerPlan(i, port + i - 1, d, os.path.join(data_dir, f"broker-{i}.log"),
                                tuple(cmd)))
    return plans


def exit_text(code: int) -> str:
    """``status 1`` or ``signal 9 (SIGKILL)`` for a ``Popen.returncode``."""
    if code < 0:
        try:
            return f"signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"signal {-code}"
    return f"status {code}"


# ---------------------------------------------------------------------------- the shell


def port_free(port: int) -> bool:
    """Whether a server could listen on ``port`` now (SO_REUSEADDR, as etcd's and the broker's
    listeners set it: connections of a stopped run in TIME_WAIT do not hold a port)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def etcd_ports(data_dir: Path, avoid: set[int]) -> tuple[int, int]:
    """The client and peer ports of the last run on ``data_dir`` when both are still free,
    else new free ones (saved for the next run)."""
    state = data_dir / STATE_FILE
    try:
        saved = json.loads(state.read_text())
        ports = (int(saved["etcd_client_port"]), int(saved["etcd_peer_port"]))
        if all(p not in avoid and port_free(p) for p in ports):
            return ports
    except (OSError, ValueError, KeyError, TypeError):
        pass
    chosen: list[int] = []
    while len(chosen) < 2:
        p = free_port()
        if p not in avoid and p not in chosen:
            chosen.append(p)
    state.write_text(json.dumps({"etcd_client_port": chosen[0], "etcd_peer_port": chosen[1]})
                     + "\n")
    return chosen[0], chosen[1]


def _libc() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _libc()
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the launcher dies without stopping it (Linux
    prctl PR_SET_PDEATHSIG; elsewhere nothing)."""
    prctl = getattr(_LIBC, "prctl", None)
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Child:
    name: str
    command: tuple[str, ...]
    log: str
    proc: subprocess.Popen[bytes] | None = None
    reported: bool = False
    ready: bool = False

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, process_group=0,
                                         preexec_fn=_die_with_parent)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class Launcher:
    """Runs the plan; ``out`` gets the user-facing lines."""

    etcd: EtcdPlan
    brokers: list[BrokerPlan]
    stop_timeout: float = STOP_TIMEOUT_S
    out: TextIO = field(default_factory=lambda: sys.stdout)
    stop_requested: bool = False
    children: list[Child] = field(default_factory=list)

    def say(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()

    def run(self) -> int:
        """Start etcd and the brokers, watch them until a stop is requested, stop them."""
        etcd = Child("etcd", self.etcd.command, self.etcd.log)
        self.children.append(etcd)
        try:
            etcd.start()
            self._wait_etcd(etcd)
            if self.stop_requested:
                return 0
            assert etcd.proc is not None
            self.say(f"etcd: {self.etcd.client_url} (pid {etcd.proc.pid}), client port "
                     f"{self.etcd.client_port}, peer port {self.etcd.peer_port}, data "
                     f"{self.etcd.data_dir}, log {self.etcd.log}")
            for b in self.brokers:
                child = Child(f"broker {b.node_id}", b.command, b.log)
                self.children.append(child)
                os.makedirs(b.data_dir, exist_ok=True)
                child.start()
                assert child.proc is not None
                self.say(f"broker {b.node_id}: {b.address} (pid {child.proc.pid}), data "
                         f"{b.data_dir}, log {b.log}")
                self.say(f"  restart by hand: {shlex.join(b.command)}")
            self._watch()
        finally:
            self.stop()
        return 0

    def _wait_etcd(self, etcd: Child) -> None:
        deadline = time.monotonic() + ETCD_START_TIMEOUT_S
        while not self.stop_requested:
            assert etcd.proc is not None
            if etcd.proc.poll() is not None:
                raise CliError(f"etcd exited with {exit_text(etcd.proc.returncode)} at start; "
                               f"see {self.etcd.log}\n{_tail(self.etcd.log)}")
            if etcd_healthy(self.etcd.client_url):
                return
            if time.monotonic() > deadline:
                raise CliError(f"etcd did not become healthy within {ETCD_START_TIMEOUT_S:g} "
                               f"s; see {self.etcd.log}")
            time.sleep(POLL_S)

    def _watch(self) -> None:
        announced = False
        while not self.stop_requested:
            for child, plan in zip(self.children[1:], self.brokers, strict=True):
                if child.proc is not None and not child.alive and not child.reported:
                    child.reported = True
                    running = sum(c.alive for c in self.children[1:])
                    self.say(f"broker {plan.node_id} (pid {child.proc.pid}) exited with "
                             f"{exit_text(child.proc.returncode)}; etcd and {running} other "
                             f"broker(s) keep running. Its log: {plan.log}. Restart it with:\n"
                             f"  {shlex.join(plan.command)}")
                elif child.alive and not child.ready:
                    child.ready = _accepts(plan.port)
            etcd = self.children[0]
            if not etcd.alive and not etcd.reported and etcd.proc is not None:
                etcd.reported = True
                self.say(f"etcd exited with {exit_text(etcd.proc.returncode)}; the brokers "
                         f"cannot change cluster metadata until it is back. Its log: "
                         f"{self.etcd.log}. Restart it with:\n  {shlex.join(self.etcd.command)}")
            if not announced and all(c.ready or c.reported for c in self.children[1:]):
                announced = True
                self.say(self._ready_line())
            time.sleep(POLL_S)

    def _ready_line(self) -> str:
        """Once every broker listens or has exited: the bootstrap servers of those up."""
        up = [b for c, b in zip(self.children[1:], self.brokers, strict=True) if c.ready]
        if not up:
            return ("no broker is running (see the lines above and their logs); etcd keeps "
                    "running. Ctrl-C stops it.")
        bootstrap = ",".join(b.address for b in up)
        return (f"cluster ready: {len(up)} of {len(self.brokers)} brokers, bootstrap servers "
                f"{bootstrap}; shoal cluster describe --bootstrap-server {up[0].address}. "
                "Ctrl-C stops everything.")

    def stop(self) -> None:
        """Brokers first, then etcd: each group SIGTERMed, SIGKILLed after the timeout."""
        brokers = [c for c in self.children[1:] if c.alive]
        if brokers:
            self.say(f"stopping {len(brokers)} broker(s)")
            _terminate(brokers, self.stop_timeout, self.say)
        if self.children and self.children[0].alive:
            self.say("stopping etcd")
            _terminate(self.children[:1], self.stop_timeout, self.say)


def _terminate(children: list[Child], timeout: float, say: Callable[[str], None]) -> None:
    for c in children:
        assert c.proc is not None
        c.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for c in children:
        assert c.proc is not None
        try:
            c.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            say(f"{c.name} did not stop within {timeout:g} s; killing it")
            c.proc.kill()
            c.proc.wait()


def etcd_healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=1) as r:
            return b'"true"' in r.read()
    except OSError:
        return False


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.2):
            return True
    except OSError:
        return False


def _tail(path: str, limit: int = 2000) -> str:
    try:
        return Path(path).read_text(errors="replace")[-limit:]
    except OSError:
        return ""


def run_command(args: argparse.Namespace) -> int:
    """``shoal cluster run``; returns the exit status."""
    prog = "shoal cluster run"
    try:
        launcher = prepare(args)
    except CliError as exc:
        print(f"{prog}: {exc.message}", file=sys.stderr)
        return exc.exit_code

    def on_signal(signum: int, _frame: Any) -> None:
        launcher.stop_requested = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        return launcher.run()
    except CliError as exc:
        print(f"{prog}: {exc.message}", file=sys.stderr)
        return exc.exit_code


def write_properties(data: Path, brokers: int, port: int) -> None:
    """``broker-i.properties`` for every broker, with the data directory's inter-broker
    password (made once, kept in ``inter-broker.secret``); both readable by the owner only."""
    secret_file = data / "inter-broker.secret"
    if not secret_file.exists():
        secret_file.write_text(secrets.token_urlsafe(24) + "\n")
        secret_file.chmod(0o600)
    secret = secret_file.read_text().strip()
    for i in range(1, brokers + 1):
        f = data / f"broker-{i}.properties"
        f.write_text(broker_properties(port + i - 1, port + INTERNAL_PORT_OFFSET + i - 1, secret))
        f.chmod(0o600)


def prepare(args: argparse.Namespace) -> Launcher:
    """Check the options, the ports and etcd; make the data directories; the plan.

    Raises:
        CliError: see ``check_args``; a broker port in use or etcd not on PATH (exit code 2).
    """
    check_args(args.brokers, args.port, args.override)
    if shutil.which("etcd") is None:
        raise CliError("etcd is not installed (not on PATH); `make etcd` installs Debian's "
                       "etcd-server", exit_code=2)
    ports = [*range(args.port, args.port + args.brokers),
             *range(args.port + INTERNAL_PORT_OFFSET,
                    args.port + INTERNAL_PORT_OFFSET + args.brokers)]
    busy = [p for p in ports if not port_free(p)]
    if busy:
        raise CliError(f"port {busy[0]} (broker "
                       f"{(busy[0] - args.port) % INTERNAL_PORT_OFFSET + 1}) is in use; stop "
                       "what listens there (another cluster on this data dir?) or give another "
                       "--port (make cluster PORT=...)", exit_code=2)
    data = Path(args.data_dir)
    (data / "etcd").mkdir(parents=True, exist_ok=True)
    client_port, peer_port = etcd_ports(data, set(ports))
    etcd = EtcdPlan(client_port, peer_port, os.path.join(args.data_dir, "etcd"),
                    os.path.join(args.data_dir, "etcd.log"))
    write_properties(data, args.brokers, args.port)
    shoal = shoal_command(sys.argv[0], sys.executable)
    return Launcher(etcd, broker_plans(shoal, etcd.endpoint, args.brokers, args.port,
                                       args.data_dir, args.override), args.stop_timeout)
