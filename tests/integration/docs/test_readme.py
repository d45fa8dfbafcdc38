"""The README's runnable examples (and those of docs/*.md), run as a reader pastes them.

Marking, in the markdown, on the line before a fenced block:

- ``<!-- test: NAME -->``: a step of example NAME. A ``sh`` block runs in bash (``-e``), a
  ``python`` block with the venv's Python. An example may have several steps, run in document
  order.
- ``<!-- test: NAME file=PATH -->``: the block is a file the reader saves as PATH.
- ``<!-- test: NAME after=OTHER -->`` (on the first step): the steps of example OTHER run
  first, as the text assumes the reader did them; their output is not NAME's.
- ``<!-- test: NAME background -->``: a command the reader leaves running in another terminal
  (a broker); it runs in the background until the example ends. Without such a step the test
  starts a broker itself, where the text says ``make run``.
- ``<!-- output: NAME -->``: what the text says the example prints on stdout (an example with
  output shown in several places has several such blocks, in document order); lines may come in
  any order (the text says so where that matters). ``<!-- output: NAME contains -->``: lines
  the output holds, in this order, among others. ``<!-- output: NAME numbers-vary -->``: the
  lines in this order, where a number written with a decimal point (a measured time) stands
  for any number or ``inf``, and columns may be aligned differently.

Each example runs in a fresh directory holding only a ``.venv`` link to this checkout's venv,
the environment the quick start tells the reader to create. Ports 9092, 9093 and 9404 in the
text are replaced by free ones. ``make client`` is not run (it would install into the shared
venv): the test venv has everything it installs, and
``test_make_client_installs_what_the_quick_start_uses`` checks the target itself.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import CHILD_SITE, ROOT, BrokerProcess, free_port

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_MARKED = re.compile(r"<!-- (test|output): ([\w-]+)((?: [\w=./-]+)*) -->\n```(\w*)\n(.*?)\n```",
                     re.S)
PORTS = (9092, 9093, 9404)


@dataclass(frozen=True)
class Step:
    lang: str
    text: str
    file: str | None = None
    background: bool = False
    after: str | None = None
    counted: bool = True  # its stdout is the example's (not a step of an `after` example)


def marked() -> tuple[dict[str, list[Step]], dict[str, tuple[str, str]]]:
    """Every example's steps, and every expected output (text, how it is compared: "exact",
    "contains" or "numbers-vary")."""
    steps: dict[str, list[Step]] = {}
    outputs: dict[str, tuple[str, str]] = {}
    for page in PAGES:
        for kind, name, opts, lang, text in _MARKED.findall(page.read_text(encoding="utf-8")):
            options = dict(o.partition("=")[::2] for o in opts.split())
            if kind == "output":
                mode = next((m for m in ("contains", "numbers-vary") if m in options), "exact")
                if name in outputs:  # more of the output, shown after later steps
                    assert outputs[name][1] == mode, f"outputs of {name!r} compared unlike"
                    text = f"{outputs[name][0]}\n{text}"
                outputs[name] = (text, mode)
            else:
                steps.setdefault(name, []).append(Step(lang, text, options.get("file") or None,
                                                       "background" in options,
                                                       options.get("after") or None))
    for name, own in steps.items():
        if own[0].after:
            before = [Step(s.lang, s.text, s.file, s.background, counted=False)
                      for s in steps[own[0].after]]
            steps[name] = before + own
    return steps, outputs


STEPS, OUTPUTS = marked()


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # This tree's packages win over the venv's editable install (which may be another checkout);
    # tests/child_site keeps kio from importing hypothesis, as on a user's install.
    env["PYTHONPATH"] = os.pathsep.join((str(CHILD_SITE), str(ROOT), env.get("PYTHONPATH", "")))
    env.pop("VIRTUAL_ENV", None)
    return env


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the background step exited"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on {port} after {timeout} s")


def run_example(name: str, workdir: Path, timeout: float = 120) -> tuple[str, str]:
    """Run example ``name`` in ``workdir``; (stdout, stderr) of its foreground steps."""
    (workdir / ".venv").symlink_to(ROOT / ".venv")
    ports = {p: free_port() for p in PORTS}
    steps = STEPS[name]
    broker = None
    if not any(s.background for s in steps):  # the reader's `make run`
        broker = BrokerProcess(workdir / "test-broker-data", port=ports[9092])
        broker.start()
    background: list[subprocess.Popen[bytes]] = []
    out, err = [], []
    activated = False
    try:
        for step in steps:
            text = step.text
            for port, ours in ports.items():
                text = text.replace(f"127.0.0.1:{port}", f"127.0.0.1:{ours}")
            if step.file:
                (workdir / step.file).write_text(text + "\n", encoding="utf-8")
                continue
            if step.background:
                log = workdir / f"background-{len(background)}.log"
                with open(log, "wb") as f:
                    proc = subprocess.Popen(["bash", "-c", text], cwd=workdir, env=_env(),
                                            stdout=f, stderr=subprocess.STDOUT,
                                            start_new_session=True)
                background.append(proc)
                files = " ".join(p.read_text() for s in steps if s.file
                                 and (p := workdir / s.file).exists())
                used = [ours for ours in ports.values() if f":{ours}" in text + files]
                try:
                    _wait_port(used[0] if used else ports[9092], proc)
                except AssertionError as exc:
                    raise AssertionError(f"{exc}:\n{log.read_text()[-3000:]}") from None
                continue
            if step.lang == "sh":
                # make client is checked by its own test; the test venv has what it installs.
                script = re.sub(r"^make client\b.*$", "true", text, flags=re.M)
                if activated:  # the reader's shell is still activated from an earlier step
                    script = f"source .venv/bin/activate\n{script}"
                activated = activated or "source .venv/bin/activate" in text
                cmd = ["bash", "-e", "-o", "pipefail", "-c", script]
            else:
                assert step.lang == "python", f"example {name!r}: unknown language {step.lang!r}"
                cmd = [sys.executable, "-c", text]
            done = subprocess.run(cmd, cwd=workdir, env=_env(), capture_output=True, text=True,
                                  timeout=timeout)
            if step.counted:
                out.append(done.stdout)
            err.append(done.stderr)
            assert done.returncode == 0, (
                f"step of {name!r} failed ({done.returncode}):\n{text}\nstdout:\n{done.stdout}"
                f"\nstderr:\n{done.stderr[-3000:]}")
    finally:
        for proc in background:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(20)
        if broker is not None:
            broker.stop()
    return "".join(out), "".join(err)


def test_the_quick_start_is_marked_and_comes_first() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "quickstart" in STEPS and "quickstart" in OUTPUTS
    assert readme.index("\n## Quick start") == readme.index("\n## ")
    # It installs the clients, activates the venv and sets earliest before consuming.
    text = "\n".join(s.text for s in STEPS["quickstart"])
    steps = ["make client", "source .venv/bin/activate", "share.auto.offset.reset=earliest",
             "ShareConsumer", "--describe"]
    assert [text.index(s) for s in steps] == sorted(text.index(s) for s in steps)


def test_every_example_says_what_it_prints() -> None:
    assert {"quickstart", "security", "cli"} <= set(STEPS)
    assert sorted(STEPS) == sorted(OUTPUTS)


def test_make_client_installs_what_the_quick_start_uses() -> None:
    """`make client` (dry run) installs the client extra, confluent-kafka and pip into .venv."""
    plan = subprocess.run(["make", "-n", "-B", "client", "VENV=/nonexistent/venv"], cwd=ROOT,
                          capture_output=True, text=True, timeout=30)
    assert plan.returncode == 0, plan.stderr
    # The commands that install (uv's, and plain pip's when uv cannot), not the echo lines.
    install = [line for line in plan.stdout.splitlines()
               if " install " in line and "--python /nonexistent/venv/bin/python" in line]
    assert len(install) == 2, plan.stdout
    for command in install:
        for wanted in ("-e '.[client]'", "confluent-kafka==", "'pip>="):
            assert wanted in command, command


@pytest.mark.parametrize("name", sorted(STEPS))
def test_example_prints_what_the_text_says(name: str, tmp_path: Path) -> None:
    stdout, stderr = run_example(name, tmp_path)
    expected, mode = OUTPUTS[name]
    lines = stdout.splitlines()
    if mode == "contains":
        at = [lines.index(x) if x in lines else -1 for x in expected.splitlines()]
        assert -1 not in at and at == sorted(at), (expected, stdout, stderr[-3000:])
    elif mode == "numbers-vary":
        assert len(lines) == len(expected.splitlines()) and all(
            _same_but_measures(want, got) for want, got in zip(expected.splitlines(), lines)), (
                expected, stdout, stderr[-3000:])
    else:
        assert sorted(lines) == sorted(expected.splitlines()), (stdout, stderr[-3000:])


_MEASURE = re.compile(r"-?\d+\.\d+")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?|inf")


def _same_but_measures(want: str, got: str) -> bool:
    """``got`` is ``want`` up to column alignment, with any number (or inf) where ``want`` has
    a number with a decimal point."""
    a, b = want.split(), got.split()
    return len(a) == len(b) and all(
        x == y or (_MEASURE.fullmatch(x) is not None and _NUMBER.fullmatch(y) is not None)
        for x, y in zip(a, b))


def test_measured_numbers_may_vary_and_nothing_else() -> None:
    assert _same_but_measures("crew  tasks 0  1   3.2  0.3", "crew tasks 0 1 12.9 inf")
    assert not _same_but_measures("crew  tasks 0  1   3.2  0.3", "crew tasks 0 2 3.2 0.3")
    assert not _same_but_measures("crew tasks 0 1 3.2", "crew tasks 0 1 slow")
