"""docker/: the example scripts end to end against a local broker, the health probe, and the
compose file (validated with ``docker compose config`` when a compose command is installed;
``config`` needs no engine). The images are built and run by tests/compose
(``make test-compose``)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path


from tests.conftest import ROOT, free_port

DOCKER = ROOT / "docker"
EXAMPLES = DOCKER / "examples"


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def _records(stdout: str) -> list[str]:
    """The keys of the ``record <partition> <offset> <delivery count> <key> <value>`` lines."""
    return [line.split()[4] for line in stdout.splitlines() if line.startswith("record ")]


def _summary(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def test_producer_and_three_share_consumers_end_to_end(broker, unique) -> None:
    """What docker-compose.yml runs: three consumers in one group, then the producer."""
    consumers = [
        subprocess.Popen(
            [sys.executable, str(EXAMPLES / "share_consumer.py"), "--bootstrap", broker.bootstrap,
             "--topic", unique, "--group", unique, "--client-id", f"consumer-{i}",
             "--idle-timeout", "6", "--timeout", "45"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in (1, 2, 3)]
    try:
        produced = _run([str(EXAMPLES / "producer.py"), "--bootstrap", broker.bootstrap,
                         "--topic", unique, "--partitions", "3", "--count", "300",
                         "--timeout", "30"], timeout=40)
        assert produced.returncode == 0, produced.stderr
        assert "delivered 300 records" in produced.stdout
        outputs = [c.communicate(timeout=50) for c in consumers]
    finally:
        for c in consumers:
            if c.poll() is None:
                c.kill()
                c.communicate()
    assert [c.returncode for c in consumers] == [0, 0, 0], [err[-2000:] for _, err in outputs]
    keys = Counter(k for out, _ in outputs for k in _records(out))
    assert set(keys) == {f"order-{n}" for n in range(300)}
    assert max(keys.values()) == 1, "each record went to exactly one consumer"
    summaries = [_summary(out) for out, _ in outputs]
    assert sum(s["received"] for s in summaries) == 300
    assert {s["client"] for s in summaries} == {"consumer-1", "consumer-2", "consumer-3"}


def test_consumer_stops_after_count_in_explicit_mode(broker, unique) -> None:
    produced = _run([str(EXAMPLES / "producer.py"), "--bootstrap", broker.bootstrap, "--topic",
                     unique, "--partitions", "1", "--count", "50"], timeout=40)
    assert produced.returncode == 0, produced.stderr
    env_args = ["--bootstrap", broker.bootstrap, "--topic", unique, "--group", unique,
                "--mode", "explicit", "--timeout", "30"]
    first = _run([str(EXAMPLES / "share_consumer.py"), *env_args, "--count", "20"], timeout=40)
    assert first.returncode == 0, first.stderr
    assert _summary(first.stdout)["received"] >= 20
    # The rest is still there for the group: what the first accepted is not redelivered.
    rest = _run([str(EXAMPLES / "share_consumer.py"), *env_args, "--idle-timeout", "3",
                 "--reset", "keep"], timeout=40)
    assert rest.returncode == 0, rest.stderr
    got = _records(first.stdout) + _records(rest.stdout)
    assert sorted(got) == sorted(f"order-{n}" for n in range(50))


def test_consumer_with_count_fails_on_timeout(broker, unique) -> None:
    done = _run([str(EXAMPLES / "share_consumer.py"), "--bootstrap", broker.bootstrap,
                 "--topic", unique, "--group", unique, "--count", "1", "--timeout", "3",
                 "--quiet"], timeout=30)
    assert done.returncode == 1
    assert _summary(done.stdout)["received"] == 0


def test_healthcheck_probe_speaks_kafka(broker) -> None:
    assert _run([str(DOCKER / "healthcheck.py"), broker.bootstrap], timeout=10).returncode == 0
    closed = f"127.0.0.1:{free_port()}"
    assert _run([str(DOCKER / "healthcheck.py"), closed], timeout=10).returncode == 1


def test_dockerfile_is_slim_non_root_with_volume_and_healthcheck() -> None:
    text = (DOCKER / "Dockerfile").read_text()
    assert "python:3.11-slim" in text
    broker_stage = text.split("AS broker", 1)[1]
    assert "USER shoal" in broker_stage and "USER root" not in broker_stage
    assert 'VOLUME ["/var/lib/shoal"]' in broker_stage
    assert "HEALTHCHECK" in broker_stage and "healthcheck.py" in broker_stage
    for path in ("docker/examples/", "docker/healthcheck.py"):
        assert Path(ROOT / path).exists()
