"""The controller-side admin verbs of a cluster member: ElectLeaders, partition reassignment
and controlled shutdown. The rules are pure (``cluster/election.py``); this module applies them
to the etcd view and writes with compare-and-swap on each topic's key, recomputing from the new
view when another change got in first, and answers once the change is back through the watch.

The same planning functions answer a single broker (no ``--cluster``): there every partition is
led by its only replica, so elections are not needed, and the only valid reassignment target is
that broker (a no-op).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TypeVar

from kio.schema.errors import ErrorCode

from broker.wire_limits import YIELD_EVERY, breathe, breathe_now
from cluster.election import (
    Brokers,
    ElectionError,
    assignment_problem,
    cancel_reassignment,
    elect_preferred,
    elect_unclean,
    movable_leaderships,
    start_reassignment,
)
from cluster.view import PartitionAssignment, TopicRecord

if TYPE_CHECKING:
    from broker.cluster_member import ClusterMember

log = logging.getLogger("shoal.cluster")

PREFERRED, UNCLEAN = 0, 1
# The most partitions one ElectLeaders or AlterPartitionReassignments may change (Kafka's
# controller bounds the records of one user operation the same way).
MAX_PARTITIONS_PER_REQUEST = 10_000
WRITE_ATTEMPTS = 10

Outcome = tuple[ErrorCode, str | None]
W = TypeVar("W")
OK: Outcome = (ErrorCode.none, None)


@dataclass(slots=True)
class Plan:
    """Per topic, the outcome per partition (in request order) and the record to write."""

    outcomes: dict[str, list[tuple[int, Outcome]]] = field(default_factory=dict)
    writes: dict[str, TopicRecord] = field(default_factory=dict)


def _unknown(topic: str, p: int | None = None) -> Outcome:
    what = f"topic {topic!r}" if p is None else f"partition {topic}-{p}"
    return (ErrorCode.unknown_topic_or_partition, f"{what} does not exist")


def plan_elections(topics: Mapping[str, TopicRecord], brokers: Brokers, election_type: int,
                   wanted: Mapping[str, Sequence[int]] | None) -> Plan:
    """ElectLeaders as Kafka's controller answers it. ``wanted`` None means every partition;
    then partitions that need no election are left out of the answer (as Kafka does)."""
    plan = Plan()
    names = sorted(topics) if wanted is None else list(wanted)
    for name in names:
        record = topics.get(name)
        results = plan.outcomes.setdefault(name, [])
        indexes = (range(len(record.partitions)) if record is not None else ()) \
            if wanted is None else wanted[name]
        partitions = list(record.partitions) if record is not None else []
        for p in indexes:
            if not 0 <= p < len(partitions):
                results.append((p, _unknown(name, p)))
                continue
            step = elect_preferred if election_type == PREFERRED else elect_unclean
            try:
                partitions[p] = step(partitions[p], brokers, f"partition {name}-{p}")
            except ElectionError as e:
                if wanted is not None or e.error != ErrorCode.election_not_needed:
                    results.append((p, (e.error, e.message)))
                continue
            results.append((p, OK))
        if record is not None and tuple(partitions) != record.partitions:
            plan.writes[name] = replace(record, partitions=tuple(partitions))
    return plan


def plan_reassignments(topics: Mapping[str, TopicRecord], known: Callable[[int], bool],
                       wanted: Mapping[str, Sequence[tuple[int, tuple[int, ...] | None]]],
                       allow_rf_change: bool = True) -> Plan:
    """AlterPartitionReassignments: per partition a new target (None cancels the running one)."""
    plan = Plan()
    for name, changes in wanted.items():
        record = topics.get(name)
        results = plan.outcomes.setdefault(name, [])
        partitions = list(record.partitions) if record is not None else []
        for p, target in changes:
            if not 0 <= p < len(partitions):
                results.append((p, _unknown(name, p)))
                continue
            where = f"partition {name}-{p}"
            current = partitions[p]
            try:
                if target is None:
                    partitions[p] = cancel_reassignment(current, where)
                else:
                    partitions[p] = _reassign(current, target, known, where, allow_rf_change)
            except ElectionError as e:
                results.append((p, (e.error, e.message)))
                continue
            results.append((p, OK))
        if record is not None and tuple(partitions) != record.partitions:
            plan.writes[name] = replace(record, partitions=tuple(partitions))
    return plan


def _reassign(p: PartitionAssignment, target: tuple[int, ...], known: Callable[[int], bool],
              where: str, allow_rf_change: bool) -> PartitionAssignment:
    problem = assignment_problem(target, known)
    if problem:
        raise ElectionError(ErrorCode.invalid_replica_assignment, f"{where}: {problem}")
    if not allow_rf_change and len(target) != len(p.target):
        raise ElectionError(ErrorCode.invalid_replication_factor,
                            f"{where}: the target has {len(target)} replica(s) but the partition "
                            f"has {len(p.target)}, and the request does not allow changing the "
                            "replication factor")
    return start_reassignment(p, target)


def reassignments(topics: Mapping[str, TopicRecord],
                  wanted: Mapping[str, Sequence[int]] | None
                  ) -> dict[str, list[tuple[int, PartitionAssignment]]]:
    """ListPartitionReassignments: the running ones, of every topic or of the given
    partitions (every partition for an empty list); unknown topics are left out, as Kafka."""
    out: dict[str, list[tuple[int, PartitionAssignment]]] = {}
    names = sorted(topics) if wanted is None else list(wanted)
    for name in names:
        record = topics.get(name)
        if record is None:
            continue
        asked: Iterable[int] = (wanted or {}).get(name) or range(len(record.partitions))
        found = [(p, record.partitions[p]) for p in asked
                 if 0 <= p < len(record.partitions) and record.partitions[p].reassigning]
        if found:
            out[name] = found
    return out


async def plan_in_slices(plan: Callable[[Mapping[str, Sequence[W]]], Plan],
                         wanted: Mapping[str, Sequence[W]]) -> Plan:
    """``plan(wanted)`` computed a few topics at a time (about ``YIELD_EVERY`` partitions),
    the event loop served in between: a plan's outcome per topic depends on that topic only.
    For a single broker, whose plan needs no write; a request of tens of thousands of
    partitions (issue 25) does not hold the loop."""
    out = Plan()
    chunk: dict[str, Sequence[W]] = {}
    size = 0
    names = list(wanted)
    for i, name in enumerate(names):
        chunk[name] = wanted[name]
        size += len(wanted[name]) + 1
        if size >= YIELD_EVERY or i == len(names) - 1:
            part = plan(chunk)
            out.outcomes.update(part.outcomes)
            out.writes.update(part.writes)
            chunk, size = {}, 0
            await breathe_now()
    return out


def local_topics(node_id: int, partitions: Mapping[str, int]) -> dict[str, TopicRecord]:
    """A single broker's topics as records: it is the only replica, ISR and leader of all."""
    me = PartitionAssignment((node_id,), node_id, 0, (node_id,))
    return {name: TopicRecord(name, "", (me,) * count) for name, count in partitions.items()}


# -- cluster I/O ---------------------------------------------------------------------------------

async def apply_plan(member: ClusterMember, compute: Callable[[], Plan], what: str) -> Plan:
    """Compute a plan from the current view and write its records with compare-and-swap; a
    topic whose write lost a race is planned again from the new view (all topics' outcomes are
    those of the last plan). Returns once every write is visible here.

    Raises:
        ElectionError: REQUEST_TIMED_OUT: etcd did not answer, or other changes kept winning.
    """
    view = member.store.view
    plan = compute()
    written: dict[str, int] = {}
    kept: dict[str, list[tuple[int, Outcome]]] = {}
    for _ in range(WRITE_ATTEMPTS):
        lost: dict[str, int] = {}
        for i, (name, record) in enumerate(plan.writes.items()):
            await breathe(i + 1)
            if name in written:
                continue
            revision = view.topic_revisions.get(name, 0)
            try:
                ok = await asyncio.wait_for(member.store.update_topic(record, revision),
                                            VISIBLE_S)
            except Exception as e:
                raise ElectionError(ErrorCode.request_timed_out,
                                    f"{what}: the cluster metadata store (etcd) did not take "
                                    f"the change to topic {name} ({type(e).__name__}); retry "
                                    "once etcd is reachable") from None
            (written if ok else lost)[name] = revision
            if ok:
                kept[name] = plan.outcomes[name]
        pending = {**written, **lost}
        try:
            await member.store.wait_for(
                lambda p=pending: all(view.topic_revisions.get(n, 0) != r for n, r in p.items()),
                VISIBLE_S)
        except TimeoutError:
            raise ElectionError(ErrorCode.request_timed_out,
                                f"{what}: etcd accepted the change but it did not reach this "
                                f"broker within {VISIBLE_S:.0f} s") from None
        if not lost:
            plan.outcomes.update(kept)  # a written topic answers what was written
            return plan
        plan = compute()
    raise ElectionError(ErrorCode.request_timed_out,
                        f"{what}: other changes to the same topics kept getting in first; retry")


VISIBLE_S = 15.0
SHUTDOWN_MARK_S = 5.0


async def controlled_shutdown(member: ClusterMember, timeout_s: float) -> None:
    """Mark this broker's registration shutting down, then wait (at most ``timeout_s``) until
    the controller has moved every leadership that can move (``movable_leaderships``)."""
    store = member.store
    registration = store.registration
    if registration is None:
        return
    view = store.view
    node = member.node_id
    try:
        # Bounded tightly: with etcd unreachable nothing can move, so exit soon.
        await asyncio.wait_for(store.update_registration(
            replace(registration, shutting_down=True)), SHUTDOWN_MARK_S)
        await store.wait_for(lambda: node in view.shutting_down(), SHUTDOWN_MARK_S)
    except Exception as e:
        log.warning("controlled shutdown: could not mark node %d as shutting down in etcd "
                    "(%s); exiting without moving its leaderships first", node,
                    type(e).__name__)
        return
    moving = movable_leaderships(view, node)
    log.info("controlled shutdown: waiting up to %.0f s for %d leadership(s) to move to other "
             "in-sync replicas", timeout_s, len(moving))
    try:
        await store.wait_for(lambda: not movable_leaderships(view, node), timeout_s)
    except TimeoutError:
        left = movable_leaderships(view, node)
        log.warning("controlled shutdown: %d leadership(s) still here after %.0f s (%s); "
                    "exiting anyway, the controller moves them once this broker's session "
                    "ends", len(left), timeout_s,
                    ", ".join(f"{t}-{p}" for t, p in left[:10]))
        return
    log.info("controlled shutdown: no leadership left that another in-sync replica could take")
