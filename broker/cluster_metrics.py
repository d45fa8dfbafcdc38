"""Cluster figures on /metrics (a collector of ``BrokerMetrics``' registry).

Every broker exports ``shoal_cluster_member`` (1 in cluster mode); a cluster member also:

- ``shoal_cluster_etcd_session_up``: 1 while its etcd lease is renewed and its metadata watch
  follows etcd (0: it serves from the last metadata it saw and refuses metadata changes);
- ``shoal_cluster_controller``: 1 on the elected controller; ``shoal_cluster_live_brokers``;
- ``shoal_cluster_partitions_led`` and ``shoal_cluster_offline_partitions`` (no live leader);
- the inter-broker share-state RPCs by API and destination node:
  ``shoal_inter_broker_requests_total``, ``shoal_inter_broker_request_seconds_sum`` /
  ``_count`` and ``shoal_inter_broker_errors_total`` (by error).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from broker.metrics import Family
from cluster.metadata import NO_LEADER
from persister.network_persister import NetworkPersister

if TYPE_CHECKING:
    from broker.app import Broker

API_NAMES = {83: "InitializeShareGroupState", 84: "ReadShareGroupState",
             85: "WriteShareGroupState", 86: "DeleteShareGroupState",
             87: "ReadShareGroupStateSummary"}


def collect_cluster(broker: Broker) -> Iterable[Family]:
    """The families above (scrape time; cheap: reads the watched view and counters)."""
    member = broker.member
    yield Family("shoal_cluster_member", "gauge",
                 "1 when this broker is a member of a cluster (cluster.etcd.endpoints set).",
                 samples=[((), 1 if member is not None else 0)])
    if member is None:
        return
    store = member.store
    view = store.view
    yield Family("shoal_cluster_etcd_session_up", "gauge",
                 "1 while this broker's etcd session is renewed and its metadata watch follows "
                 "etcd.", samples=[((), 1 if store.session_ok and store.watch_ok else 0)])
    yield Family("shoal_cluster_controller", "gauge", "1 on the elected controller.",
                 samples=[((), 1 if view.controller_id() == broker.node_id else 0)])
    yield Family("shoal_cluster_live_brokers", "gauge", "Live brokers registered in etcd.",
                 samples=[((), len(view.brokers))])
    led = offline = 0
    for name, record in view.topics.items():
        for p in range(len(record.partitions)):
            leader = view.leader_of(name, p)
            led += leader == broker.node_id
            offline += leader == NO_LEADER
    yield Family("shoal_cluster_partitions_led", "gauge", "Partitions this broker leads.",
                 samples=[((), led)])
    yield Family("shoal_cluster_offline_partitions", "gauge",
                 "Partitions of the cluster without a live leader.", samples=[((), offline)])
    persister = broker.persister
    if not isinstance(persister, NetworkPersister):
        return
    stats = persister.stats()
    labels = ("api", "node")
    requests = Family("shoal_inter_broker_requests_total", "counter",
                      "Share-state requests sent to other brokers (and to this one).", labels)
    seconds = Family("shoal_inter_broker_request_seconds_sum", "counter",
                     "Seconds share-state requests took, summed.", labels)
    count = Family("shoal_inter_broker_request_seconds_count", "counter",
                   "Share-state requests timed.", labels)
    errors = Family("shoal_inter_broker_errors_total", "counter",
                    "Share-state requests or entries answered with an error, or not answered.",
                    ("api", "node", "error"))
    for (api, node), n in sorted(stats["requests"].items()):
        requests.add((API_NAMES.get(api, str(api)), str(node)), n)
    for (api, node), s in sorted(stats["latency_sum_s"].items()):
        seconds.add((API_NAMES.get(api, str(api)), str(node)), round(s, 6))
    for (api, node), n in sorted(stats["latency_count"].items()):
        count.add((API_NAMES.get(api, str(api)), str(node)), n)
    for (api, node, code), n in sorted(stats["errors"].items()):
        errors.add((API_NAMES.get(api, str(api)), str(node), str(code).lower()), n)
    yield from (requests, seconds, count, errors)
