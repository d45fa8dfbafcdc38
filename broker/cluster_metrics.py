"""Cluster figures on /metrics (a collector of ``BrokerMetrics``' registry).

Every broker exports ``shoal_cluster_member`` (1 in cluster mode); a cluster member also:

- ``shoal_cluster_etcd_session_up``: 1 while its etcd lease is renewed and its metadata watch
  follows etcd (0: it serves from the last metadata it saw and refuses metadata changes);
- ``shoal_cluster_controller``: 1 on the elected controller; ``shoal_cluster_live_brokers``;
- ``shoal_cluster_partitions_led`` and ``shoal_cluster_offline_partitions`` (no live leader);
- the inter-broker requests (share state, transaction markers and verification, dead-letter
  appends, admin reads) by API and destination node:
  ``shoal_inter_broker_requests_total``, ``shoal_inter_broker_request_seconds_sum`` /
  ``_count`` and ``shoal_inter_broker_errors_total`` (by error).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from broker.metrics import Family
from cluster.metadata import NO_LEADER
from persister.local_first import LocalFirstPersister

if TYPE_CHECKING:
    from broker.app import Broker

API_NAMES = {0: "Produce", 2: "ListOffsets", 24: "AddPartitionsToTxn", 27: "WriteTxnMarkers",
             83: "InitializeShareGroupState", 84: "ReadShareGroupState",
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
    all_stats = []
    if isinstance(broker.persister, LocalFirstPersister):
        all_stats.append(broker.persister.stats())
    if broker.links is not None:
        all_stats.append(broker.links.rpc.stats())
    if not all_stats:
        return
    labels = ("api", "node")
    requests = Family("shoal_inter_broker_requests_total", "counter",
                      "Requests sent to other brokers (and to this one): share state, "
                      "transaction markers and verification, dead letters, admin reads.", labels)
    seconds = Family("shoal_inter_broker_request_seconds_sum", "counter",
                     "Seconds inter-broker requests took, summed.", labels)
    count = Family("shoal_inter_broker_request_seconds_count", "counter",
                   "Inter-broker requests timed.", labels)
    errors = Family("shoal_inter_broker_errors_total", "counter",
                    "Inter-broker requests or entries answered with an error, or not answered.",
                    ("api", "node", "error"))
    for stats in all_stats:
        for (api, node), n in sorted(stats["requests"].items()):
            requests.add((_api(api), str(node)), n)
        for (api, node), s in sorted(stats["latency_sum_s"].items()):
            seconds.add((_api(api), str(node)), round(s, 6))
        for (api, node), n in sorted(stats["latency_count"].items()):
            count.add((_api(api), str(node)), n)
        for (api, node, code), n in sorted(stats["errors"].items()):
            errors.add((_api(api), str(node), str(code).lower()), n)
    yield from (requests, seconds, count, errors)


def _api(key: int) -> str:
    return API_NAMES.get(key, str(key))
