"""Broker configs of replication (issue 24, ``broker/replication/``): Kafka's names, defaults
and meaning. They matter only in cluster mode, for partitions with more than one replica."""

from __future__ import annotations

from broker.config_types import ConfigDef, at_least

REPLICATION_DEFS: list[ConfigDef] = [
    ConfigDef("replica.lag.time.max.ms", "long", 30000,
              "A follower that has not caught up with its leader for this long leaves the ISR "
              "(the leader records the change in etcd).", at_least(1)),
    ConfigDef("replica.fetch.wait.max.ms", "int", 500,
              "How long a follower's fetch waits at the leader for new records.", at_least(0)),
    ConfigDef("replica.fetch.min.bytes", "int", 1,
              "Bytes a follower's fetch waits for before the leader answers.", at_least(1)),
    ConfigDef("replica.fetch.max.bytes", "int", 1048576,
              "Bytes a follower fetches per partition and request (the first batch always "
              "comes whole).", at_least(1)),
    ConfigDef("replica.fetch.response.max.bytes", "int", 10485760,
              "Bytes a follower's fetch response may hold over all its partitions.", at_least(0)),
    ConfigDef("replica.fetch.backoff.ms", "int", 1000,
              "How long a follower waits before fetching again from a leader that failed.",
              at_least(0)),
    ConfigDef("max.incremental.fetch.session.cache.slots", "int", 1000,
              "Follower fetch sessions a leader keeps (one per follower broker is in use; the "
              "least recently used beyond this many is closed).", at_least(0)),
    ConfigDef("num.replica.fetchers", "int", 1,
              "Fetch loops per leader broker (Shoal runs one, on the event loop).", at_least(1)),
    ConfigDef("replica.high.watermark.checkpoint.interval.ms", "long", 5000,
              "How often each replicated partition's high watermark is written to its "
              "directory.", at_least(1)),
]
