"""The README's runnable examples, run as a reader pastes them.

A fenced block after ``<!-- test: NAME -->`` in README.md or docs/*.md is a runnable example:
a ``sh`` block runs in bash from the repository root (after the quick start's
``source .venv/bin/activate``), a ``python`` block with the venv's Python. The fenced block after
``<!-- output: NAME -->`` is what the text says the example prints on stdout; lines may come in
any order (the text says so where that matters). Each example runs against a fresh broker that
the test starts; ``127.0.0.1:9092`` in the text is replaced with that broker's address.

``make client`` is not run here (it would install into the shared venv): the quick start's
environment is the test venv, which has everything ``make client`` installs, and
``test_make_client_installs_what_the_quick_start_uses`` checks the target itself.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, BrokerProcess

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_MARKED = re.compile(r"<!-- (test|output): ([\w-]+) -->\n```(\w*)\n(.*?)\n```", re.S)


def marked_blocks() -> dict[tuple[str, str], tuple[str, str]]:
    """``(kind, name) -> (language, text)`` of every marked block in the pages."""
    found: dict[tuple[str, str], tuple[str, str]] = {}
    for page in PAGES:
        for kind, name, lang, text in _MARKED.findall(page.read_text(encoding="utf-8")):
            assert (kind, name) not in found, f"{kind} block {name!r} is marked twice"
            found[(kind, name)] = (lang, text)
    return found


BLOCKS = marked_blocks()
EXAMPLES = sorted(name for kind, name in BLOCKS if kind == "test")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # This tree's packages win over the venv's editable install (which may be another checkout).
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("VIRTUAL_ENV", None)
    return env


def run_example(name: str, bootstrap: str, timeout: float = 90) -> subprocess.CompletedProcess:
    lang, text = BLOCKS[("test", name)]
    text = text.replace("127.0.0.1:9092", bootstrap)
    if lang == "sh":
        # make client is checked by its own test; the test venv already has what it installs.
        script = re.sub(r"^make client\b.*$", "true", text, flags=re.M)
        cmd = ["bash", "-e", "-o", "pipefail", "-c", script]
    else:
        assert lang == "python", f"example {name!r}: unknown language {lang!r}"
        cmd = [sys.executable, "-c", text]
    return subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=timeout)


def test_the_quick_start_is_marked_and_comes_first() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert ("test", "quickstart") in BLOCKS and ("output", "quickstart") in BLOCKS
    first_section = readme.index("\n## ")
    assert readme.index("\n## Quick start") == first_section
    # It installs the clients, activates the venv and sets earliest before consuming.
    _, text = BLOCKS[("test", "quickstart")]
    steps = ["make client", "source .venv/bin/activate", "share.auto.offset.reset=earliest",
             "ShareConsumer", "--describe"]
    assert [text.index(s) for s in steps] == sorted(text.index(s) for s in steps)


def test_every_example_says_what_it_prints() -> None:
    assert EXAMPLES, "no <!-- test: NAME --> blocks found"
    assert [n for n in EXAMPLES if ("output", n) not in BLOCKS] == []
    assert [n for k, n in BLOCKS if k == "output" and ("test", n) not in BLOCKS] == []


def test_make_client_installs_what_the_quick_start_uses() -> None:
    """`make client` (dry run) installs the client extra, confluent-kafka and pip into .venv."""
    plan = subprocess.run(["make", "-n", "-B", "client", "VENV=/nonexistent/venv"], cwd=ROOT,
                          capture_output=True, text=True, timeout=30)
    assert plan.returncode == 0, plan.stderr
    install = [line for line in plan.stdout.splitlines() if " install " in line]
    assert len(install) == 1, plan.stdout
    assert "--python /nonexistent/venv/bin/python" in install[0]
    for wanted in ("-e '.[client]'", "confluent-kafka==", "'pip>="):
        assert wanted in install[0], install[0]


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_prints_what_the_text_says(name: str, tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        done = run_example(name, broker.bootstrap)
    finally:
        broker.stop()
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-3000:]}"
    _, expected = BLOCKS[("output", name)]
    assert sorted(done.stdout.splitlines()) == sorted(expected.splitlines()), done.stderr[-3000:]
