"""Leader election, ISR upkeep and reassignment steps: pure functions of the cluster view.

The controller (``cluster/controller.py``) and the admin verbs (ElectLeaders,
AlterPartitionReassignments) compute new ``PartitionAssignment`` records here and write them with
compare-and-swap. Nothing here does I/O or reads a clock. The rules, as Kafka's controller:

- **Available brokers** are the live ones (registered) that are not in controlled shutdown.
- **ISR**: a member that is dead or shutting down leaves the ISR, unless it is the last member
  (the ISR is never emptied: the last member is the one that has everything committed). When
  several would go at once, the leader stays if it is among them, else the first in ISR
  order; a live (shutting-down) member is kept before a dead one.
- **Leader**: the current leader stays while it is live and in the ISR. Otherwise the first
  replica, in replica order, that is live and in the new ISR becomes leader (Kafka's offline
  election). With none and ``unclean.leader.election.enable``, the first available replica (or
  live one) leads with an ISR of itself (records it lacks are lost: that is what unclean means);
  without, the partition has ``NO_LEADER`` (offline) until an ISR member returns.
- **Leader epoch**: +1 on every change of leader (to and from ``NO_LEADER`` included), never
  otherwise.
- **Reassignment**: completes once every target replica is in the ISR: the replicas become the
  target, the removed ones leave the ISR, and the leader is elected again if it was removed.
- **Preferred election** (ElectLeaders PREFERRED, auto rebalance): the first replica leads if it
  is available and in the ISR.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode

from cluster.view import NO_LEADER, ClusterView, PartitionAssignment, TopicRecord

UNCLEAN_CONFIG = "unclean.leader.election.enable"


@dataclass(frozen=True, slots=True)
class Brokers:
    """Which brokers are live, and which of those are in controlled shutdown."""

    live: frozenset[int]
    shutting_down: frozenset[int] = frozenset()

    @classmethod
    def of(cls, view: ClusterView) -> Brokers:
        return cls(frozenset(view.brokers), frozenset(view.shutting_down()))

    def available(self, node: int) -> bool:
        return node in self.live and node not in self.shutting_down


class ElectionError(Exception):
    """An election or reassignment step that cannot be done: ``error`` is Kafka's code for the
    partition's answer, ``str()`` says why and what to do."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def settle(p: PartitionAssignment, brokers: Brokers, unclean: bool) -> PartitionAssignment:
    """The partition after the controller's rules (module doc); ``p`` itself when all is well."""
    if p.reassigning and all(r in p.isr for r in p.target):
        target = p.target
        p = replace(p, replicas=target, isr=tuple(r for r in p.isr if r in target),
                    adding=(), removing=())
    isr = _kept_isr(p, brokers)
    leader = p.leader if p.leader in isr and p.leader in brokers.live else NO_LEADER
    if leader != NO_LEADER and not brokers.available(leader):
        # A leader in controlled shutdown hands over to an available ISR member, if any.
        leader = next((r for r in p.replicas if r in isr and brokers.available(r)), leader)
    if leader == NO_LEADER:
        leader = next((r for r in p.replicas if r in isr and brokers.available(r)),
                      next((r for r in p.replicas if r in isr and r in brokers.live), NO_LEADER))
    if leader == NO_LEADER and unclean:
        leader = next((r for r in p.replicas if brokers.available(r)),
                      next((r for r in p.replicas if r in brokers.live), NO_LEADER))
        if leader != NO_LEADER:
            isr = (leader,)
    return _with(p, leader, isr)


def _kept_isr(p: PartitionAssignment, brokers: Brokers) -> tuple[int, ...]:
    """The ISR without dead or shutting-down members, never emptied (module doc). A legacy
    record with an empty ISR counts all its replicas as in sync."""
    isr = tuple(r for r in (p.isr or p.replicas) if r in p.replicas)
    if not isr:
        return p.isr
    keep = tuple(r for r in isr if brokers.available(r))
    if keep:
        return keep
    live = tuple(r for r in isr if r in brokers.live)
    pool = live or isr
    return (p.leader,) if p.leader in pool else pool[:1]


def _with(p: PartitionAssignment, leader: int, isr: tuple[int, ...]) -> PartitionAssignment:
    if leader == p.leader and isr == p.isr:
        return p
    epoch = p.leader_epoch + 1 if leader != p.leader else p.leader_epoch
    return replace(p, leader=leader, leader_epoch=epoch, isr=isr)


def unclean_enabled(record: TopicRecord, default: bool) -> bool:
    """The topic's ``unclean.leader.election.enable``, else the broker default."""
    text = record.configs.get(UNCLEAN_CONFIG)
    return default if text is None else text.strip().lower() == "true"


def controller_changes(view: ClusterView, unclean_default: bool) -> list[TopicRecord]:
    """The topics (new records) the controller must write; empty when all is well."""
    brokers = Brokers.of(view)
    out: list[TopicRecord] = []
    for name in sorted(view.topics):
        record = view.topics[name]
        unclean = unclean_enabled(record, unclean_default)
        partitions = tuple(settle(p, brokers, unclean) for p in record.partitions)
        if partitions != record.partitions:
            out.append(replace(record, partitions=partitions))
    return out


# -- ElectLeaders ------------------------------------------------------------------------------

def elect_preferred(p: PartitionAssignment, brokers: Brokers, where: str) -> PartitionAssignment:
    """Make the first replica leader.

    Raises:
        ElectionError: ELECTION_NOT_NEEDED (it leads already), PREFERRED_LEADER_NOT_AVAILABLE
            (it is not live, shutting down or not in the ISR).
    """
    preferred = p.replicas[0] if p.replicas else NO_LEADER
    if preferred == p.leader and p.leader in brokers.live:
        raise ElectionError(ErrorCode.election_not_needed,
                            f"{where}: the preferred replica {preferred} leads already")
    if not brokers.available(preferred) or preferred not in p.isr:
        why = ("not live" if preferred not in brokers.live else "shutting down"
               if preferred in brokers.shutting_down else "not in the ISR")
        raise ElectionError(ErrorCode.preferred_leader_not_available,
                            f"{where}: the preferred replica {preferred} is {why}; retry once "
                            "it is back and in sync")
    return _with(p, preferred, p.isr)


def elect_unclean(p: PartitionAssignment, brokers: Brokers, where: str) -> PartitionAssignment:
    """Give an offline partition a leader, from outside the ISR if need be.

    Raises:
        ElectionError: ELECTION_NOT_NEEDED (a live leader exists), ELIGIBLE_LEADERS_NOT_AVAILABLE
            (no replica is live).
    """
    if p.leader != NO_LEADER and p.leader in brokers.live:
        raise ElectionError(ErrorCode.election_not_needed,
                            f"{where}: broker {p.leader} leads it already")
    new = settle(p, brokers, unclean=True)
    if new.leader == NO_LEADER:
        raise ElectionError(ErrorCode.eligible_leaders_not_available,
                            f"{where}: none of its replicas {list(p.replicas)} is live; start "
                            "one of them")
    return new


def rebalance_targets(topics: Mapping[str, TopicRecord], brokers: Brokers,
                      percentage: int) -> list[tuple[str, int]]:
    """Partitions auto rebalance moves back to their preferred replica: those of every
    available broker whose share of preferred partitions led elsewhere is above ``percentage``
    (``leader.imbalance.per.broker.percentage``), where that replica is in the ISR."""
    preferred: dict[int, list[tuple[str, int, PartitionAssignment]]] = {}
    for name in sorted(topics):
        for i, p in enumerate(topics[name].partitions):
            if p.replicas and not p.reassigning:
                preferred.setdefault(p.replicas[0], []).append((name, i, p))
    out: list[tuple[str, int]] = []
    for node in sorted(preferred):
        if not brokers.available(node):
            continue
        mine = preferred[node]
        elsewhere = [(t, i, p) for t, i, p in mine if p.leader != node]
        if len(elsewhere) * 100 > percentage * len(mine):
            out += [(t, i) for t, i, p in elsewhere if node in p.isr]
    return out


# -- reassignment ------------------------------------------------------------------------------

def start_reassignment(p: PartitionAssignment, target: tuple[int, ...]) -> PartitionAssignment:
    """Begin moving ``p`` to ``target`` (validated by the caller): the replicas become the
    target followed by the current replicas not in it; ``adding`` the target replicas new to the
    partition, ``removing`` those leaving. A running reassignment is replaced. The controller
    completes it (``settle``) once every target replica is in the ISR."""
    original = p.original
    if not p.reassigning and target == p.replicas:
        return p
    replicas = target + tuple(r for r in p.replicas if r not in target)
    return replace(p, replicas=replicas,
                   adding=tuple(r for r in target if r not in original),
                   removing=tuple(r for r in replicas if r not in target))


def cancel_reassignment(p: PartitionAssignment, where: str) -> PartitionAssignment:
    """Go back to the replicas before the running reassignment (in the order they have in
    ``replicas``: a kept replica that the target listed first comes first).

    Raises:
        ElectionError: NO_REASSIGNMENT_IN_PROGRESS, or INVALID_REPLICA_ASSIGNMENT when none of
            the original replicas is in the ISR any more (finish the move instead).
    """
    if not p.reassigning:
        raise ElectionError(ErrorCode.no_reassignment_in_progress,
                            f"{where}: no reassignment is in progress")
    original = p.original
    isr = tuple(r for r in p.isr if r in original)
    if not isr:
        raise ElectionError(ErrorCode.invalid_replica_assignment,
                            f"{where}: none of the original replicas {list(original)} is in "
                            "sync any more; cancelling would leave no in-sync replica, so let "
                            "the reassignment finish or give a new target")
    leader = p.leader if p.leader in original else NO_LEADER
    new = replace(p, replicas=original, isr=isr, adding=(), removing=())
    return _with(new, leader, isr) if leader != p.leader else new


def assignment_problem(target: Iterable[int], known: Callable[[int], bool]) -> str | None:
    """Why a target replica list is invalid (empty, a duplicate, an unknown broker), or None."""
    replicas = list(target)
    if not replicas:
        return "the target replica list is empty"
    if len(set(replicas)) != len(replicas):
        return f"the target replicas {replicas} name a broker twice"
    unknown = [r for r in replicas if not known(r)]
    if unknown:
        return f"broker(s) {unknown} of the target replicas {replicas} are not registered"
    return None


def movable_leaderships(view: ClusterView, node: int) -> list[tuple[str, int]]:
    """Partitions ``node`` leads that an election could move to another available ISR member
    (controlled shutdown waits until there are none)."""
    brokers = Brokers.of(view)
    out = []
    for name in sorted(view.topics):
        for i, p in enumerate(view.topics[name].partitions):
            if p.leader == node and any(r != node and brokers.available(r) for r in p.isr):
                out.append((name, i))
    return out
