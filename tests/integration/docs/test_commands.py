"""Commands from the docs that must work as written (beyond the marked examples)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, free_port


def test_json_log_format_keeps_both_streams_pure_json(tmp_path: Path) -> None:
    """docs/configuration.md: `shoal broker ... --log-format json 2>&1 | jq` must parse."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker.main", "broker", "--listen", f"127.0.0.1:{port}",
         "--data-dir", str(tmp_path / "data"), "--log-format", "json"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first: list[str] = []
    try:
        assert proc.stderr is not None
        while not first or '"event": "listening"' not in first[-1]:
            line = proc.stderr.readline()  # the broker logs several lines before listening
            assert line, "the broker exited before listening"
            first.append(line)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    err = "".join(first) + err
    assert proc.returncode == 0, err[-2000:]
    assert out == ""
    records = [json.loads(line) for line in err.splitlines()]  # every line is JSON
    listening = [r for r in records if r.get("event") == "listening"]
    assert [r["msg"] for r in listening] == [f"listening on 127.0.0.1:{port} (PLAINTEXT)"]
    started = [r["msg"] for r in records if r["msg"].startswith("Shoal broker 1 listening")]
    assert len(started) == 1 and started[0].startswith(
        f"Shoal broker 1 listening on 127.0.0.1:{port} (PLAINTEXT, advertised 127.0.0.1:{port})")


def test_plain_startup_line_names_the_protocol_once(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker.main", "broker", "--listen", f"127.0.0.1:{port}",
         "--data-dir", str(tmp_path / "data")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)
    assert line == f"shoal: listening on 127.0.0.1:{port} (PLAINTEXT)\n"


def test_a_taken_port_is_named_with_what_to_do(tmp_path: Path) -> None:
    """A second `make run` beside the first: the broker says the port is taken and how to pick
    another, and exits 1."""
    port = free_port()
    first = subprocess.Popen(
        [sys.executable, "-m", "broker.main", "broker", "--listen", f"127.0.0.1:{port}",
         "--data-dir", str(tmp_path / "one")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert first.stdout is not None and first.stdout.readline().startswith("shoal: listening")
        second = subprocess.run(
            [sys.executable, "-m", "broker.main", "broker", "--listen", f"127.0.0.1:{port}",
             "--data-dir", str(tmp_path / "two")],
            cwd=ROOT, capture_output=True, text=True, timeout=60)
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=20)
    assert second.returncode == 1
    last = second.stderr.splitlines()[-1]
    assert last.startswith("shoal: could not start: ") and "address already in use" in last
    assert last.endswith("another process (another broker?) listens there: stop it, or give "
                         "another port (--listen HOST:PORT, --metrics-listen, make run PORT=N)")


def test_make_refuses_an_old_python_before_making_a_venv(tmp_path: Path) -> None:
    """README quick start: Python 3.11 or newer. An older one is named with the way out, and
    no .venv is left behind (a later make run PYTHON=... would reuse it)."""
    old = tmp_path / "python3.10"
    old.write_text("#!/bin/sh\n[ \"$1\" = --version ] && echo 'Python 3.10.13'\nexit 1\n")
    old.chmod(0o755)
    for name in ("Makefile", "pyproject.toml"):
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    done = subprocess.run(["make", "run", f"PYTHON={old}"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode != 0
    assert (f"Shoal needs Python 3.11 or newer, and '{old}' is Python 3.10.13: name a newer "
            "one, e.g. make run PYTHON=python3.12") in done.stderr
    assert not (tmp_path / ".venv").exists()
