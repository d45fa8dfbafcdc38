"""The broker configs of the controller side of replication (issue 24): replication factors,
min.insync.replicas, unclean election, controlled shutdown and leader rebalancing. The
controller applies them in ``cluster/election.py`` and ``cluster/controller.py``; the data path
reads ``min.insync.replicas``. Part of the broker's config table (``broker/config_defs.py``)."""

from __future__ import annotations

from broker.config_types import ConfigDef, at_least, between

CONTROLLER_DEFS: list[ConfigDef] = [
    ConfigDef("min.insync.replicas", "int", 1,
              "Default min.insync.replicas of topics: acks=all produce needs this many "
              "in-sync replicas.", at_least(1)),
    ConfigDef("unclean.leader.election.enable", "bool", False,
              "Default unclean.leader.election.enable of topics: let a replica outside the ISR "
              "lead when no in-sync replica is live (acknowledged records can be lost)."),
    ConfigDef("offsets.topic.replication.factor", "int", 3,
              "Replicas of __consumer_offsets (capped at the live brokers when it is created).",
              at_least(1)),
    ConfigDef("share.coordinator.state.topic.replication.factor", "int", 3,
              "Replicas of __share_group_state (capped at the live brokers when it is "
              "created).", at_least(1)),
    ConfigDef("transaction.state.log.replication.factor", "int", 3,
              "Replicas of __transaction_state (capped at the live brokers when it is "
              "created).", at_least(1)),
    ConfigDef("controlled.shutdown.enable", "bool", True,
              "On SIGTERM a cluster member first moves its leaderships to other in-sync "
              "replicas, then exits."),
    ConfigDef("controlled.shutdown.timeout.ms", "long", 30_000,
              "Shoal extension: how long a controlled shutdown waits for its leaderships to "
              "move before the broker exits anyway.", at_least(0)),
    ConfigDef("auto.leader.rebalance.enable", "bool", True,
              "The controller moves leaderships back to preferred replicas when a broker's "
              "imbalance is above leader.imbalance.per.broker.percentage."),
    ConfigDef("leader.imbalance.check.interval.seconds", "long", 300,
              "How often the controller checks the leader imbalance.", at_least(1)),
    ConfigDef("leader.imbalance.per.broker.percentage", "int", 10,
              "Share (percent) of a broker's preferred partitions led elsewhere above which "
              "they are moved back.", between(0, 100)),
]
