"""The controller's job once elected: keep every partition's leader on a live broker.

``leader_changes`` is pure: from the view it computes the topics whose leaders must move. A
partition whose leader is not live gets the first live replica of its ISR (of its replicas while
the ISR is empty) as leader, or ``NO_LEADER`` when none is live (offline, as Kafka with
``replication.factor=1``). Each change of leader bumps the leader epoch, so a broker that comes
back after its partitions went offline leads them again under a new epoch, and anything still
carrying the old epoch is fenced.

``run_controller`` is the shell: it waits to be elected, then re-evaluates after every change the
view applies and writes the changes with compare-and-swap. A write that loses a race is simply
re-evaluated on the next change.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace

from cluster.etcd_store import EtcdClusterStore
from cluster.view import NO_LEADER, ClusterView, TopicRecord

log = logging.getLogger("shoal.cluster.controller")


def leader_changes(view: ClusterView) -> list[TopicRecord]:
    """The topics (new records) whose partition leaders must change; empty when all is well."""
    live = set(view.brokers)
    out: list[TopicRecord] = []
    for name in sorted(view.topics):
        record = view.topics[name]
        partitions = []
        changed = False
        for p in record.partitions:
            if p.leader in live:
                partitions.append(p)
                continue
            candidates = [r for r in (p.isr or p.replicas) if r in live]
            leader = candidates[0] if candidates else NO_LEADER
            if leader == p.leader:
                partitions.append(p)
                continue
            partitions.append(replace(p, leader=leader, leader_epoch=p.leader_epoch + 1))
            changed = True
        if changed:
            out.append(replace(record, partitions=tuple(partitions)))
    return out


async def run_controller(store: EtcdClusterStore) -> None:
    """Campaign, then keep leaders live for as long as this broker is the controller.

    Runs until cancelled. If this broker stops being the controller (its session lapsed), it
    campaigns again.
    """
    wake = asyncio.Event()
    store.add_listener(lambda kind: wake.set() if kind in ("broker", "topic", "controller")
                       else None)
    view = store.view
    while True:
        try:
            await _serve_term(store, view, wake)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # etcd unreachable, or a lapsed session: campaign again
            log.warning("controller duties interrupted (%s: %s); campaigning again in 1 s",
                        type(e).__name__, e)
            await asyncio.sleep(1)


async def _serve_term(store: EtcdClusterStore, view: ClusterView, wake: asyncio.Event) -> None:
    """Win an election, then keep leaders live until another broker is controller."""
    me = await store.campaign()
    # The view learns of the election through the watch, right after.
    await store.wait_for(_elected(view, me.epoch), 30)
    wake.set()
    while view.controller is not None and view.controller.epoch == me.epoch:
        await wake.wait()
        wake.clear()
        for record in leader_changes(view):
            before = view.topics[record.name]
            if await store.update_topic(record, view.topic_revisions.get(record.name, 0)):
                log.info("controller %d moved leaders of topic %s: %s", me.node_id,
                         record.name, _describe(before, record))


def _elected(view: ClusterView, epoch: int) -> Callable[[], bool]:
    return lambda: view.controller is not None and view.controller.epoch >= epoch


def _describe(before: TopicRecord, after: TopicRecord) -> str:
    moved = []
    for i, (old, new) in enumerate(zip(before.partitions, after.partitions)):
        if old != new:
            to = "none (offline)" if new.leader == NO_LEADER else f"broker {new.leader}"
            moved.append(f"partition {i} to {to} (leader epoch {new.leader_epoch})")
    return ", ".join(moved)
