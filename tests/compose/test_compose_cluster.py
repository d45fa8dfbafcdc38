"""docker/docker-compose.cluster.yml for real: etcd and three brokers, then a producer and three
share consumers across them.

Run by ``make test-compose`` (marker ``compose``), provisioned as ``test_compose.py`` is
(``engine.py``), plus the etcd image's base: ``debian:bookworm-slim`` when it can be pulled,
else ``shoal-etcd-base:bookworm`` built with debootstrap (etcd-server and etcd-client from
Debian packages), so the image build needs no network.

The scenario: build the images; start etcd and wait for its healthcheck (etcdctl endpoint
health); start the three brokers and wait for theirs; ``shoal cluster describe`` in each broker
container lists the same three brokers (broker-1..3 on 9092, by their advertised names) and one
controller; the producer writes 1,000 records to a 6-partition topic, whose partitions are led
by more than one broker with none offline; then the three consumers, bootstrapped on all three
brokers, read each record exactly once. Teardown removes the containers, networks,
volumes and images the test created.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.compose import engine
from tests.compose.engine import ROOT, StepFailed, run
from tests.compose.test_compose import _image_ids, _remove_images, _summary, reported

pytestmark = [pytest.mark.compose, pytest.mark.timeout(1800)]

COMPOSE_FILE = ROOT / "docker" / "docker-compose.cluster.yml"
TOPIC, PARTITIONS, COUNT = "orders", 6, 1000
COMPOSE_SETTINGS = (f"SHOAL_TOPIC: {TOPIC}", f'SHOAL_PARTITIONS: "{PARTITIONS}"',
                    f'SHOAL_COUNT: "{COUNT}"')
BROKERS = ("broker-1", "broker-2", "broker-3")
CONSUMERS = ("consumer-1", "consumer-2", "consumer-3")


def test_compose_cluster_end_to_end(tmp_path: Path) -> None:
    with reported(), ExitStack() as cleanup:
        engine.ensure_docker_packages()
        daemon = engine.DockerDaemon.ensure(tmp_path)
        cleanup.callback(daemon.stop)
        compose = engine.compose_command()
        base = engine.ensure_python_image(os.environ.get("PYTHON_IMAGE") or "python:3.11-slim",
                                          tmp_path)
        etcd_base = engine.ensure_etcd_base_image(
            os.environ.get("ETCD_BASE_IMAGE") or engine.ETCD_BASE_DEFAULT, tmp_path)
        engine.prepare_wheels(base)
        demo = ClusterDemo(compose, base, etcd_base, tmp_path)
        cleanup.callback(demo.down)

        demo.compose("build the images (docker-compose.cluster.yml, offline)", "build",
                     timeout=1500)
        demo.up("etcd")
        demo.wait_healthy("etcd")
        demo.up(*BROKERS)
        for b in BROKERS:
            demo.wait_healthy(b)
        for b in BROKERS:
            demo.wait_registered(b)

        demo.up("producer")
        demo.wait_exited("producer")
        demo.check_placement_spread()
        demo.up(*CONSUMERS)
        demo.wait_exited(*CONSUMERS)
        demo.check_every_record_consumed_once()


class ClusterDemo:
    """The compose project: the cluster file plus an override that renames the images (so the
    teardown removes exactly these) and a unique project name."""

    def __init__(self, compose: list[str], base: str, etcd_base: str, work: Path) -> None:
        text = COMPOSE_FILE.read_text()
        changed = [line for line in COMPOSE_SETTINGS if line not in text]
        if changed:
            raise StepFailed("read docker-compose.cluster.yml",
                             f"it no longer has {changed}; update the constants in this test")
        run_id = uuid.uuid4().hex[:8]
        self.project = f"shoalcluster{run_id}"
        images = {"etcd": f"shoal-etcd:test-{run_id}",
                  **{b: f"shoal:test-{run_id}" for b in BROKERS},
                  **{s: f"shoal-examples:test-{run_id}" for s in ("producer", *CONSUMERS)}}
        override = work / "compose.cluster.override.yml"
        override.write_text(json.dumps({"services": {s: {"image": i}
                                                     for s, i in images.items()}}))
        self.command = [*compose, "--project-name", self.project, "--file", str(COMPOSE_FILE),
                        "--file", str(override)]
        self.env = {"PYTHON_IMAGE": base, "ETCD_BASE_IMAGE": etcd_base,
                    "SHOAL_PIP_NO_INDEX": "1"}
        self.images_before = _image_ids()

    def compose(self, step: str, *args: str, timeout: float = 300,
                check: bool = True) -> Any:
        return run(step, [*self.command, *args], timeout=timeout, env=self.env,
                   cwd=COMPOSE_FILE.parent, check=check)

    def container(self, service: str) -> str:
        ids = self.compose(f"find the {service} container", "ps", "--all", "-q", service,
                           timeout=60).stdout.split()
        if not ids:
            raise StepFailed(f"find the {service} container", "compose lists no container")
        return str(ids[0])

    def up(self, *services: str) -> None:
        self.compose(f"start {', '.join(services)}", "up", "--detach", "--no-build", *services,
                     timeout=300)

    def down(self) -> None:
        self.compose("tear down (docker compose down)", "down", "--volumes", "--rmi", "all",
                     "--remove-orphans", timeout=300)
        left = _remove_images(_image_ids() - self.images_before)
        if left:
            raise StepFailed("tear down (remove built images)",
                             f"{len(left)} image(s) could not be removed: {sorted(left)}")

    def logs(self, service: str) -> str:
        done = run(f"read the {service} log", ["docker", "logs", self.container(service)],
                   timeout=60)
        return str(done.stdout + done.stderr)

    def wait_healthy(self, service: str, timeout: float = 120.0) -> None:
        step = f"{service} healthcheck turns healthy"
        container = self.container(service)
        deadline = time.monotonic() + timeout
        status = ""
        while time.monotonic() < deadline:
            status = run(step, ["docker", "inspect", "--format",
                                "{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}"
                                "{{end}}", container], timeout=30).stdout.strip()
            if status == "running healthy":
                return
            if status.startswith(("exited", "dead")):
                break
            time.sleep(1)
        raise StepFailed(step, f"state {status!r} after {timeout:.0f} s; log:\n"
                               f"{self.logs(service)[-2000:]}")

    def describe(self, step: str, broker: str) -> dict[str, Any] | None:
        """``shoal cluster describe --json`` in ``broker``'s container (None: it failed)."""
        done = self.compose(step, "exec", "-T", broker, "shoal", "cluster", "describe",
                            "--bootstrap-server", "127.0.0.1:9092", "--json", timeout=60,
                            check=False)
        if done.returncode != 0:
            return None
        doc: dict[str, Any] = json.loads(done.stdout)
        return doc

    def wait_registered(self, broker: str, timeout: float = 60.0) -> None:
        step = f"shoal cluster describe through {broker} lists the three brokers"
        want = [{"node_id": i, "host": b, "port": 9092} for i, b in enumerate(BROKERS, 1)]
        deadline = time.monotonic() + timeout
        doc = None
        while time.monotonic() < deadline:
            doc = self.describe(step, broker)
            if doc is not None:
                have = [{k: b[k] for k in ("node_id", "host", "port")} for b in doc["brokers"]]
                if have == want and doc["controller_id"] in (1, 2, 3):
                    return
            time.sleep(1)
        raise StepFailed(step, f"after {timeout:.0f} s it says {doc}")

    def wait_exited(self, *services: str, timeout: float = 300.0) -> None:
        step = f"run {', '.join(services)} to completion"
        containers = {s: self.container(s) for s in services}
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = {s: run(step, ["docker", "inspect", "--format",
                                    "{{.State.Status}} {{.State.ExitCode}}", c],
                             timeout=30).stdout.strip() for s, c in containers.items()}
            if all(v.startswith(("exited", "dead")) for v in states.values()):
                break
            time.sleep(1)
        failed = {s: v for s, v in states.items() if v != "exited 0"}
        if failed:
            logs = {s: self.logs(s)[-1500:] for s in failed}
            raise StepFailed(step, f"not exited with status 0 within {timeout:.0f} s: {failed}"
                                   f"\n{json.dumps(logs, indent=1)}")

    def check_every_record_consumed_once(self) -> None:
        step = "every record reached exactly one consumer"
        keys: Counter[str] = Counter()
        received = {}
        for consumer in CONSUMERS:
            out = self.logs(consumer)
            keys.update(line.split()[4] for line in out.splitlines()
                        if line.startswith("record "))
            received[consumer] = _summary(step, consumer, out)["received"]
        missing = {f"order-{n}" for n in range(COUNT)} - set(keys)
        twice = sorted(k for k, n in keys.items() if n > 1)
        if missing or twice or sum(received.values()) != COUNT:
            raise StepFailed(step, f"received per consumer {received}; {len(missing)} keys "
                                   f"missing, {len(twice)} more than once (e.g. {twice[:5]})")

    def check_placement_spread(self) -> None:
        step = f"the partitions of {TOPIC} are spread over the brokers and online"
        doc = self.describe(step, BROKERS[0])
        if doc is None:
            raise StepFailed(step, "shoal cluster describe failed")
        parts = [p for p in doc["partitions"] if p["topic"] == TOPIC]
        leaders = {p["leader"] for p in parts}
        if len(parts) != PARTITIONS or len(leaders) < 2 or doc["offline_partitions"]:
            raise StepFailed(step, f"partitions {parts}; offline {doc['offline_partitions']}")
