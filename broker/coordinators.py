"""Wiring the coordinators to the broker: open them in order at start, close them at stop.

The coordinators (``coordinator/``) see the broker only as a ``CoordinatorHost``
(``coordinator/host.py``); what else each needs is passed here explicitly:

1. the share coordinator over ``__share_group_state`` (the default persister is backed by it,
   or in a cluster reaches it over the wire, ``broker/inter_broker.py``; a test may have
   injected another one into ``broker.persister``);
2. the group coordinator over ``__consumer_offsets``, with the persister and the per-group
   configs; it hears about topic changes and the share-partition leaders hear about members
   that left (the latter wired in ``ShareService``);
3. the transaction coordinator over ``__transaction_state``, after the group coordinator: its
   markers go to data partitions through ``broker.txn_log`` and to ``__consumer_offsets``
   through the group coordinator; prepared transactions resume their markers once loaded.
   A cluster member writes them wherever the partitions' leaders are, and verifies
   transactional produce with whichever broker coordinates the transactional id
   (``broker/txn_remote.py``, ``broker.links``).

``close_coordinators`` stops them in the reverse order: transactions first, so no marker is
written into a stopped group coordinator, and the share coordinator last, after the
share-partition leaders (``broker.shares``) wrote their last state through it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from broker.group_configs import GroupConfigs
from coordinator.group.service import open_group_coordinator
from coordinator.share.opener import open_share_coordinator
from coordinator.txn.service import open_transactions
from broker.inter_broker import inter_broker_rpc_for, local_first_persister_for
from broker.txn_remote import BrokerLinks, ClusterMarkers, TxnCoordinatorLink
from persister.coordinator_persister import CoordinatorPersister
from persister.local_first import LocalFirstPersister

if TYPE_CHECKING:
    from broker.app import Broker

log = logging.getLogger("shoal.coordinators")


async def open_coordinators(broker: Broker) -> None:
    """Open the share, group and transaction coordinators (see the module doc); sets
    ``broker.share_coordinator``, ``broker.persister`` (unless injected),
    ``broker.group_configs``, ``broker.share_groups`` and ``broker.transactions``."""
    broker.share_coordinator = await open_share_coordinator(broker)
    await broker.delete_share_state_of_deleted_topics()
    persister = broker.persister
    if persister is None and broker.member is not None:
        # A cluster member reaches whichever broker leads the key's state partition over the
        # wire (the share-state RPCs), itself included, as Kafka's persister does.
        persister = broker.persister = local_first_persister_for(broker)
    if persister is None:
        persister = broker.persister = CoordinatorPersister(broker.share_coordinator)
    broker.group_configs = GroupConfigs(broker.data_dir, broker.config)
    broker.group_configs.check_online = broker.logs.log_dir.check
    if broker.member is not None:
        broker.member.attach_group_configs(broker.group_configs)
    broker.share_groups = await open_group_coordinator(
        broker, persister=persister, group_configs=broker.group_configs)
    broker.add_topic_listener(broker.share_groups.topics_changed)
    if broker.member is None:
        broker.transactions = await open_transactions(
            broker, data_markers=broker.txn_log,
            offset_markers=broker.share_groups.complete_transaction)
        return
    rpc = inter_broker_rpc_for(broker)
    markers = ClusterMarkers(rpc, broker.txn_log, lambda: broker.share_groups.complete_transaction,
                             marker_deadline_ms=int(broker.config.get("request.timeout.ms")))
    broker.links = BrokerLinks(rpc, markers, TxnCoordinatorLink(rpc, lambda: broker.transactions))
    broker.transactions = await open_transactions(
        broker, data_markers=markers, offset_markers=markers.offset_marker)
    for topic, runtime in (("__share_group_state", broker.share_coordinator.runtime),
                           ("__consumer_offsets", broker.share_groups.runtime),
                           ("__transaction_state", broker.transactions.runtime)):
        runtime.replicated = _replicated(broker, topic)


def _replicated(broker: Broker, topic: str) -> Callable[[int, int], Awaitable[bool]]:
    """A coordinator's write to ``topic`` is answered once every in-sync replica has it (its
    partitions are replicated, issue 24): True then, False once this broker no longer leads
    the partition. A slow ISR is waited for (it shrinks within replica.lag.time.max.ms, or
    when the controller drops a dead broker)."""
    async def wait(partition: int, offset: int) -> bool:
        rep = broker.replication
        if rep is None or not rep.tracks(topic, partition):
            return True  # one replica: durable once synced, as before
        # The runtime appends to the log itself, not through produce: wake the followers'
        # parked replica fetches now, or each write waits out replica.fetch.wait.max.ms.
        broker.logs.appended(topic, partition)
        while True:
            code = await rep.wait_replicated(topic, partition, offset, 30)
            if code == ErrorCode.not_leader_or_follower:
                return False
            if code != ErrorCode.request_timed_out:
                return True
            log.warning("%s-%d: the in-sync replicas have not confirmed the coordinator's "
                        "writes up to offset %d for 30 s; still waiting (is a follower stuck?)",
                        topic, partition, offset)

    return wait


async def close_coordinators(broker: Broker) -> None:
    """Stop the coordinators opened by ``open_coordinators`` (reverse order, see the module
    doc), and the share-partition leaders before the share coordinator."""
    await broker.transactions.close()
    await broker.share_groups.stop()
    await broker.shares.stop()
    if broker.links is not None:  # after its users: markers, dead letters, admin reads
        await broker.links.close()
    if isinstance(broker.persister, LocalFirstPersister):
        await broker.persister.close()
    await broker.share_coordinator.close()
