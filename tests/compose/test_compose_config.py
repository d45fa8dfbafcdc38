"""docker/docker-compose.yml and docker/docker-compose.cluster.yml are valid compose files with
the documented services.

Run by ``make test-compose`` (marker ``compose``), which provisions a compose command on a Debian
machine (``engine.py``); ``compose config`` needs no Docker daemon.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.compose import engine
from tests.conftest import ROOT

pytestmark = pytest.mark.compose

DOCKER = ROOT / "docker"


def test_compose_file_is_valid() -> None:
    engine.ensure_docker_packages()
    compose = engine.compose_command()
    path = str(DOCKER / "docker-compose.yml")
    checked = subprocess.run([*compose, "-f", path, "config", "-q"], cwd=DOCKER,
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr
    services = subprocess.run([*compose, "-f", path, "config", "--services"], cwd=DOCKER,
                              capture_output=True, text=True, timeout=60)
    assert services.returncode == 0, services.stderr
    assert set(services.stdout.split()) == {"broker", "producer", "consumer-1", "consumer-2",
                                            "consumer-3"}


def test_cluster_compose_file_is_valid() -> None:
    engine.ensure_docker_packages()
    compose = engine.compose_command()
    path = str(DOCKER / "docker-compose.cluster.yml")
    checked = subprocess.run([*compose, "-f", path, "config", "-q"], cwd=DOCKER,
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr
    services = subprocess.run([*compose, "-f", path, "config", "--services"], cwd=DOCKER,
                              capture_output=True, text=True, timeout=60)
    assert services.returncode == 0, services.stderr
    assert set(services.stdout.split()) == {"etcd", "broker-1", "broker-2", "broker-3",
                                            "producer", "consumer-1", "consumer-2",
                                            "consumer-3"}
