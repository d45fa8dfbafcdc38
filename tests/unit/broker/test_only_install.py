"""The broker and its ``shoal`` CLI run on a broker-only install (``make run``, the Docker image):
nothing they import may need an optional extra. Checked in a child interpreter that refuses to
import the extras' packages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

_CHILD = """
import importlib.abc, sys

class _Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {'aiokafka', 'confluent_kafka', 'pyspark', 'pyarrow', 'pandas',
                                  'matplotlib', 'trustme', 'cryptography'}:
            raise ImportError(f'{name} belongs to an optional extra')
        return None

sys.meta_path.insert(0, _Refuse())
import broker.main, cli, cli.main, cli.wire, client.admin_wire, client.admin_groups, client.core
import client.errors, client.security
from broker.handlers import ALL_HANDLERS
assert ALL_HANDLERS
sys.argv = ['shoal', '--help']
try:
    cli.main.main()
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
"""


def test_broker_and_cli_import_without_the_optional_extras() -> None:
    proc = subprocess.run([sys.executable, "-c", _CHILD], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "share-groups" in proc.stdout
