"""Replication of partitions between cluster members (issue 24): Kafka's leader/follower design.

- ``leader_state``: what a partition's leader knows of its followers (sans-IO): their log end
  offsets, when each was last caught up, the high watermark, and which ISR changes are due.
- ``manager``: ``ReplicaManager`` (``broker.replication`` in cluster mode): follows the cluster
  view to lead or follow each replicated partition, answers the high watermark reads are
  bounded by, holds acks=all produces until the ISR has them, and writes ISR changes to etcd.
- ``fetcher``: a follower's fetch loop per leader broker (Fetch with ReplicaState on the
  inter-broker listener), with truncation of divergent tails by leader epoch.
- ``replica_fetch``: the leader's side of a follower's Fetch (divergence check, follower
  progress) and OffsetForLeaderEpoch.

A partition with one replica is not tracked at all: its high watermark is its log end offset,
as on a single broker.
"""
