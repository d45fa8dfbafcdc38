"""A real filesystem that fills up under a broker process (issue 12, section 6).

The broker's data directory is a 4 MiB tmpfs. Producing until it is full must give the producer
KAFKA_STORAGE_ERROR per partition (never a dropped connection), stop the broker with exit status
1 and a log line saying what to do, and after the volume is grown every acknowledged record must
be readable again, with nothing torn or duplicated. Needs root (``mount``): skipped without it on
a developer's machine, a failure in CI (``CI=true``; .ci/run runs ``make test`` as root).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from protocol.codec import request_module
from protocol.messages import make
from tests.conftest import ROOT, BrokerProcess
from tests.integration.rawclient import RawClient, request
from tests.integration.storage.test_durability import read_all

from tests.unit.batches import make_batch

SMALL = {"offsets.topic.num.partitions": "1", "share.coordinator.state.topic.num.partitions": "1"}
PARTITIONS = 3


def cannot_run(reason: str) -> None:
    """Skip on a developer's machine without root; in CI (``CI=true``, where .ci/run runs as
    root) fail instead, so a CI that silently lost the privilege does not pass without it."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI must run the disk-full test, but {reason}")
    pytest.skip(reason)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        cannot_run("it needs root to mount a 4 MiB tmpfs (mount -t tmpfs -o size=4m)")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        cannot_run(f"a tmpfs cannot be mounted here (no CAP_SYS_ADMIN?): "
                   f"{mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


Answers = dict[int, tuple[int, int]]


def produce(c: RawClient, topic: str, round_: int) -> tuple[Answers, list[bytes]]:
    """One Produce of a ~60 KiB batch to each partition: {partition: (error, base)}, values."""
    m = request_module(0, 9)
    values = [f"{p}:{round_}:".encode() + os.urandom(60_000) for p in range(PARTITIONS)]
    data = (make(m.TopicProduceData, name=topic, partition_data=tuple(
        make(m.PartitionProduceData, index=p, records=make_batch([(None, values[p])]))
        for p in range(PARTITIONS))),)
    resp = c.call(0, 9, request(0, 9, transactional_id=None, acks=-1,
                                timeout=timedelta(seconds=10), topic_data=data))
    (t,) = resp.responses
    return {r.index: (r.error_code, r.base_offset) for r in t.partition_responses}, values


def test_filling_the_disk_answers_storage_errors_and_loses_no_acknowledged_record(
        small_disk: Path) -> None:
    b = BrokerProcess(small_disk, overrides=SMALL)  # broker log beside the disk, not on it
    b.start()
    try:
        topic = "fill"
        with RawClient(b.bootstrap) as c:
            m = request_module(19, 7)
            created = c.call(19, 7, request(19, 7, topics=(make(
                m.CreatableTopic, name=topic, num_partitions=PARTITIONS, replication_factor=-1,
                assignments=(), configs=()),), timeout=timedelta(seconds=5), validate_only=False))
            assert created.topics[0].error_code == ErrorCode.none
            acked: dict[tuple[int, int], bytes] = {}
            failed: dict[int, int] = {}
            for round_ in range(200):  # 4 MiB / (3 x 60 KiB) is about 23 rounds
                answers, values = produce(c, topic, round_)
                for p, (err, base) in answers.items():
                    if err == ErrorCode.none:
                        acked[(p, base)] = values[p]
                    else:
                        failed[p] = err
                if failed:
                    break
        assert failed, "the 4 MiB disk never filled"
        assert set(failed.values()) == {ErrorCode.kafka_storage_error}, failed
        assert len(acked) > 10
        # The broker stops by itself, with a non-zero status and advice in its log.
        assert b.proc is not None
        assert b.proc.wait(30) == 1, b.logs()
        b.stop()  # closes the log file handle
        logs = b.logs()
        assert "ENOSPC" in logs and "free disk space" in logs, logs

        subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
        b.start()
        ends = {p: 1 + max((o for q, o in acked if q == p), default=-1) for p in range(PARTITIONS)}
        got = read_all(b.bootstrap, topic, PARTITIONS, ends)
        # Every acknowledged record is there; nothing half-written or repeated follows them.
        assert {k: got.get(k) for k in acked} == acked
        assert set(got) == set(acked)
        with RawClient(b.bootstrap) as c:
            answers, _ = produce(c, topic, 999)
        assert all(err == ErrorCode.none for err, _ in answers.values())
        assert {p: base for p, (_, base) in answers.items()} == ends
    finally:
        b.stop()


@pytest.mark.parametrize("ci,outcome", [("true", "1 error"), (None, "1 skipped")])
def test_without_a_mountable_tmpfs_ci_fails_and_a_developer_skips(
        tmp_path: Path, ci: str | None, outcome: str) -> None:
    """The test above where mount cannot work (a mount that always fails first on PATH)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "mount").write_text("#!/bin/sh\necho 'mount: permission denied' >&2\nexit 32\n")
    (fake / "mount").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PATH"] = f"{fake}{os.pathsep}{env.get('PATH', '')}"
    if ci is not None:
        env["CI"] = ci
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         f"{Path(__file__)}::test_filling_the_disk_answers_storage_errors_and_loses_no_"
         "acknowledged_record"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert outcome in proc.stdout, proc.stdout[-3000:]
    if ci is not None:
        assert proc.returncode == 1
        assert "CI must run the disk-full test" in proc.stdout
    else:
        assert proc.returncode == 0
