"""``shoal cluster``: ``run`` (etcd and N brokers on this machine, ``cli/cluster_run.py``) and
``describe`` (brokers, controller, placement over the wire, ``cli/cluster_describe.py``)."""

from __future__ import annotations

from typing import Any

from cli import cluster_describe, cluster_run


def add_parser(sub: Any) -> None:
    """Add ``cluster run`` and ``cluster describe`` to the ``shoal`` subparsers."""
    p = sub.add_parser("cluster", help="run a local cluster, or describe a cluster",
                       description="Run etcd and brokers of a cluster on this machine (run), or "
                       "show a cluster's brokers, controller and placement (describe).")
    verbs = p.add_subparsers(dest="cluster_command", required=True, metavar="{run,describe}")
    cluster_run.add_parser(verbs)
    cluster_describe.add_parser(verbs)
