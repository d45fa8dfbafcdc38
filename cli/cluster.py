"""``shoal cluster``: ``run`` (etcd and N brokers on this machine, ``cli/cluster_run.py``),
``describe`` (brokers, controller, placement over the wire, ``cli/cluster_describe.py``) and
``decommission`` (move every replica off a broker, ``cli/cluster_decommission.py``)."""

from __future__ import annotations

from typing import Any

from cli import cluster_decommission, cluster_describe, cluster_run


def add_parser(sub: Any) -> None:
    """Add ``cluster run`` and ``cluster describe`` to the ``shoal`` subparsers."""
    p = sub.add_parser("cluster", help="run a local cluster, or describe a cluster",
                       description="Run etcd and brokers of a cluster on this machine (run), "
                       "show a cluster's brokers, controller and placement (describe), or move "
                       "every replica off a broker (decommission).")
    verbs = p.add_subparsers(dest="cluster_command", required=True,
                             metavar="{run,describe,decommission}")
    cluster_run.add_parser(verbs)
    cluster_describe.add_parser(verbs)
    cluster_decommission.add_parser(verbs)
