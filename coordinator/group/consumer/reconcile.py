"""Reconciliation of one consumer-group member towards its target assignment (pure).

Concept (KIP-848; Kafka ``modern/consumer/CurrentAssignmentBuilder``, our own code): a member
never owns a partition another member still owns. Moving a member to its target therefore goes
through three states (``consumer_records.STATE_*``):

- **STABLE**: the member holds what it was told; at the target epoch there is nothing to do.
- **UNREVOKED_PARTITIONS**: the member must first give up the partitions it holds that are not in
  its target. Its epoch stays unchanged; it is told to keep only ``assigned`` (the intersection
  with the target) and the rest sits in ``pending_revocation``, still owned by it. It leaves this
  state once a heartbeat's owned partitions (``TopicPartitions``) no longer contain any of them.
  A member that does not confirm within its rebalance timeout is fenced (the shard's timer).
- **UNRELEASED_PARTITIONS**: the member is at the target epoch and holds part of its target; the
  rest is still owned (assigned or pending revocation) by other members and is handed over on a
  later heartbeat, once released.

Rules of ``reconcile``:
1. UNREVOKED with owned partitions unknown (null) or still containing a pending partition: no
   change.
2. Otherwise, if the member is STABLE at the target epoch: no change.
3. Otherwise compute the next step from the member's assigned partitions and its target:
   revoke = assigned - target; if not empty and the member may still own some of it (owned
   unknown, or containing one) -> UNREVOKED (epoch unchanged, assigned = kept); else (as
   Kafka's ``ownsRevokedPartitions``: a classic member of the eager protocol rejoins owning
   nothing) the revoked ones are dropped, the partitions of the target nobody else owns are added and the member moves to the
   target epoch, UNRELEASED if some are still owned elsewhere, else STABLE.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from coordinator.group.consumer import records as c
from coordinator.group.consumer.group import Assignment, ConsumerGroupMember


@dataclass(frozen=True, slots=True)
class Step:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: dict[uuid.UUID, frozenset[int]]
    pending_revocation: dict[uuid.UUID, frozenset[int]]


def _minus(a: Assignment, b: Assignment) -> dict[uuid.UUID, frozenset[int]]:
    out = {}
    for tid, parts in a.items():
        left = parts - b.get(tid, frozenset())
        if left:
            out[tid] = frozenset(left)
    return out


def _and(a: Assignment, b: Assignment) -> dict[uuid.UUID, frozenset[int]]:
    out = {}
    for tid, parts in a.items():
        both = parts & b.get(tid, frozenset())
        if both:
            out[tid] = frozenset(both)
    return out


def overlaps(a: Assignment | None, b: Assignment) -> bool:
    if a is None:
        return True
    return any(parts & b.get(tid, frozenset()) for tid, parts in a.items())


def is_subset(owned: Assignment | None, assigned: Assignment) -> bool:
    """Kafka's isSubset: null owned partitions are not a subset."""
    if owned is None:
        return False
    return all(parts <= assigned.get(tid, frozenset()) for tid, parts in owned.items())


def current_step(m: ConsumerGroupMember) -> Step:
    return Step(m.member_epoch, m.previous_member_epoch, m.state, dict(m.assigned),
                dict(m.pending_revocation))


def reconcile(member: ConsumerGroupMember, target_epoch: int, target: Assignment,
              owners: Mapping[tuple[uuid.UUID, int], str],
              owned: Assignment | None) -> Step:
    """The member's next step towards ``target`` (see the module rules).

    ``owners`` maps every owned partition (assigned or pending revocation) to its member;
    ``owned`` is what the member reports it owns in this heartbeat (None: not sent).
    """
    if member.state == c.STATE_UNREVOKED_PARTITIONS and overlaps(owned, member.pending_revocation):
        return current_step(member)
    if member.state == c.STATE_STABLE and member.member_epoch == target_epoch:
        return current_step(member)
    revoke = _minus(member.assigned, target)
    kept = _and(member.assigned, target)
    if revoke and overlaps(owned, revoke):
        return Step(member.member_epoch, member.previous_member_epoch,
                    c.STATE_UNREVOKED_PARTITIONS, kept, revoke)
    assigned: dict[uuid.UUID, set[int]] = {t: set(p) for t, p in kept.items()}
    unreleased = False
    for tid, parts in target.items():
        for p in parts:
            if p in assigned.get(tid, ()):
                continue
            owner = owners.get((tid, p))
            if owner is None or owner == member.member_id:
                assigned.setdefault(tid, set()).add(p)
            else:
                unreleased = True
    previous = (member.member_epoch if member.member_epoch != target_epoch
                else member.previous_member_epoch)
    return Step(target_epoch, previous,
                c.STATE_UNRELEASED_PARTITIONS if unreleased else c.STATE_STABLE,
                {t: frozenset(p) for t, p in assigned.items() if p}, {})
