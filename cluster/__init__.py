"""Cluster metadata: who the brokers are, who the controller is, and where partitions live.

A single broker keeps this in its data directory. A cluster of brokers keeps it in etcd, the one
source of consensus (no home-made Raft, gossip or election):

- ``view.py``: the metadata model (broker registrations, topics with their partition
  assignments and leader epochs) and ``ClusterView``, the local copy a broker serves from. Pure:
  it applies key/value events and never does I/O.
- ``placement.py``: where new partitions go, spread by count and rack. Pure.
- ``etcd_store.py``: the etcd implementation: the cluster id, broker registration under a
  lease, controller election, compare-and-swap writes and one watch that keeps the view current.

This package imports only ``protocol`` and third-party libraries; ``broker`` uses it.
"""
