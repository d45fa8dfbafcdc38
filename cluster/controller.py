"""The controller's job once elected: keep every partition led by a live in-sync replica.

The rules are pure and live in ``cluster/election.py`` (``controller_changes``): dead and
shutting-down brokers leave ISRs (never the last member), a partition whose leader is gone gets
the first live ISR replica (or an unclean leader where ``unclean.leader.election.enable``), a
finished reassignment drops the removed replicas, and the leader epoch goes up on every change
of leader.

``run_controller`` is the shell: it waits to be elected, then re-evaluates after every change
the view applies and writes the changes with compare-and-swap on the topic's key; a write that
loses a race is re-evaluated from the new view on the next change. With
``auto.leader.rebalance.enable`` it also moves leaderships back to preferred replicas every
``leader.imbalance.check.interval.seconds`` when a broker's share of preferred partitions led
elsewhere is above ``leader.imbalance.per.broker.percentage``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from cluster.election import (
    Brokers,
    ElectionError,
    controller_changes,
    elect_preferred,
    rebalance_targets,
)
from cluster.cancellation import raise_if_cancelling
from cluster.etcd_store import EtcdClusterStore
from cluster.view import NO_LEADER, ClusterView, TopicRecord

log = logging.getLogger("shoal.cluster.controller")


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    """The broker configs the controller follows (see the module doc)."""

    unclean_default: bool = False
    auto_rebalance: bool = True
    imbalance_check_interval_s: float = 300.0
    imbalance_percentage: int = 10


async def run_controller(store: EtcdClusterStore,
                         settings: ControllerSettings = ControllerSettings()) -> None:
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
            await _serve_term(store, view, wake, settings)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # etcd unreachable, or a lapsed session: campaign again
            raise_if_cancelling()  # unless the error was a cancellation aetcd swallowed
            log.warning("controller duties interrupted (%s: %s); campaigning again in 1 s",
                        type(e).__name__, e)
            await asyncio.sleep(1)


async def _serve_term(store: EtcdClusterStore, view: ClusterView, wake: asyncio.Event,
                      settings: ControllerSettings) -> None:
    """Win an election, then keep leaders live until another broker is controller."""
    me = await store.campaign()
    # The view learns of the election through the watch, right after.
    await store.wait_for(_elected(view, me.epoch), 30)
    wake.set()
    loop = asyncio.get_running_loop()
    next_check = loop.time() + settings.imbalance_check_interval_s
    while view.controller is not None and view.controller.epoch == me.epoch:
        timeout = max(0.0, next_check - loop.time()) if settings.auto_rebalance else None
        try:
            await asyncio.wait_for(wake.wait(), timeout)
        except TimeoutError:
            next_check = loop.time() + settings.imbalance_check_interval_s
            await _rebalance(store, view, settings.imbalance_percentage)
            continue
        wake.clear()
        for record in controller_changes(view, settings.unclean_default):
            before = view.topics[record.name]
            if await store.update_topic(record, view.topic_revisions.get(record.name, 0)):
                log.info("controller %d changed topic %s: %s", me.node_id, record.name,
                         describe_changes(before, record))


async def _rebalance(store: EtcdClusterStore, view: ClusterView, percentage: int) -> None:
    """One auto-rebalance pass: preferred elections where a broker's imbalance is too high."""
    brokers = Brokers.of(view)
    by_topic: dict[str, list[int]] = {}
    for topic, p in rebalance_targets(view.topics, brokers, percentage):
        by_topic.setdefault(topic, []).append(p)
    for topic, indexes in by_topic.items():
        record = view.topics.get(topic)
        if record is None:
            continue
        partitions = list(record.partitions)
        for i in indexes:
            try:
                partitions[i] = elect_preferred(partitions[i], brokers, f"{topic}-{i}")
            except ElectionError:
                continue
        new = replace(record, partitions=tuple(partitions))
        if new != record and await store.update_topic(new, view.topic_revisions.get(topic, 0)):
            log.info("auto leader rebalance of topic %s: %s", topic,
                     describe_changes(record, new))


def _elected(view: ClusterView, epoch: int) -> Callable[[], bool]:
    return lambda: view.controller is not None and view.controller.epoch >= epoch


def describe_changes(before: TopicRecord, after: TopicRecord) -> str:
    """What changed per partition, for the log."""
    moved = []
    for i, (old, new) in enumerate(zip(before.partitions, after.partitions)):
        if old == new:
            continue
        parts = []
        if old.leader != new.leader:
            to = "none (offline)" if new.leader == NO_LEADER else f"broker {new.leader}"
            parts.append(f"leader {to} (leader epoch {new.leader_epoch})")
        if old.isr != new.isr:
            parts.append(f"ISR {list(new.isr)}")
        if old.replicas != new.replicas:
            parts.append(f"replicas {list(new.replicas)}")
        moved.append(f"partition {i}: " + ", ".join(parts))
    return "; ".join(moved)
