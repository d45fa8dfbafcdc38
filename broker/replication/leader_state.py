"""What the leader of one replicated partition knows of its followers: ``PartitionLeader``.

Pure state, no I/O and no clock of its own: every method that needs the time takes ``now_ms``.
The manager (``broker/replication/manager.py``) feeds it the followers' fetches and the ISR
that etcd holds, and acts on what it answers.

Rules (Kafka's, behaviour only):

- **Follower progress.** A follower's fetch at offset F says its log ends at F. It was *caught
  up* at the fetch's time if F reached the leader's log end offset then, or at the time of its
  previous fetch if F reached the leader's log end offset as it was at that previous fetch
  (so a follower that keeps fetching behind a steady stream of appends still counts as caught
  up). A follower nobody has heard from since this broker became leader has an unknown log end.
- **High watermark.** The minimum of the leader's log end and the log ends of the other members
  of the *maximal* ISR: the ISR in etcd plus any member whose addition is being written. It
  never moves back, and it does not move while a member's log end is unknown.
- **Shrink.** An ISR member other than the leader that has not been caught up for
  ``replica.lag.time.max.ms`` is due to leave the ISR.
- **Expand.** A replica outside the ISR whose log end reached both the high watermark and the
  offset where this leader epoch began is due to join it.
- **Pending changes.** While a proposed ISR is being written, no other change is proposed; the
  view's new ISR (or a failed write) settles it.
"""

from __future__ import annotations

from dataclasses import dataclass

UNKNOWN = -1
REPLICA_WAKE = "replica-fetch"


def replica_wake_key(topic: str, partition: int) -> tuple[str, str, int]:
    """The ``Watch`` key a follower's parked fetch of ``topic``-``partition`` waits on at its
    leader: notified when records are appended there (``ReplicaManager``), not when only the
    high watermark moves."""
    return (REPLICA_WAKE, topic, partition)


@dataclass(slots=True)
class FollowerState:
    """One follower as its fetches show it."""

    log_end_offset: int = UNKNOWN
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    # The leader's log end offset when this follower last fetched.
    leader_end_at_last_fetch: int = UNKNOWN


class PartitionLeader:
    """The leader's view of one partition's replicas (see the module doc)."""

    def __init__(self, node_id: int, leader_epoch: int, replicas: tuple[int, ...],
                 isr: tuple[int, ...], high_watermark: int, epoch_start_offset: int,
                 now_ms: int) -> None:
        """``high_watermark``: where this leader starts (its log's high watermark, at most its
        log end); ``epoch_start_offset``: the leader's log end when it took this epoch."""
        self.node_id = node_id
        self.leader_epoch = leader_epoch
        self.replicas = replicas
        self.isr = isr
        self.high_watermark = high_watermark
        self.epoch_start_offset = epoch_start_offset
        # The ISR being written to etcd, if any.
        self.pending_isr: tuple[int, ...] | None = None
        # Every follower counts as caught up when leadership begins: it gets a full lag
        # period to show up before it is dropped from the ISR.
        self.followers = {r: FollowerState(last_caught_up_ms=now_ms)
                          for r in replicas if r != node_id}

    # -- the view ------------------------------------------------------------------------------

    def update_assignment(self, replicas: tuple[int, ...], isr: tuple[int, ...],
                          now_ms: int) -> None:
        """The view's replicas and ISR for this epoch (after a write of ours or the
        controller's); settles a pending change."""
        for r in replicas:
            if r != self.node_id and r not in self.followers:
                self.followers[r] = FollowerState(last_caught_up_ms=now_ms)
        for r in list(self.followers):
            if r not in replicas:
                del self.followers[r]
        self.replicas = replicas
        self.isr = isr
        self.pending_isr = None

    def change_failed(self) -> None:
        """The proposed ISR was not written (lost a race, etcd away): propose again later."""
        self.pending_isr = None

    # -- followers -----------------------------------------------------------------------------

    def follower_fetched(self, replica: int, fetch_offset: int, leader_end: int,
                         now_ms: int) -> None:
        """Follower ``replica`` fetched at ``fetch_offset`` while the leader's log ended at
        ``leader_end``. Unknown replicas (not in the assignment) are ignored."""
        f = self.followers.get(replica)
        if f is None:
            return
        if fetch_offset >= leader_end:
            f.last_caught_up_ms = max(f.last_caught_up_ms, now_ms)
        elif f.leader_end_at_last_fetch != UNKNOWN and fetch_offset >= f.leader_end_at_last_fetch:
            f.last_caught_up_ms = max(f.last_caught_up_ms, f.last_fetch_ms)
        f.log_end_offset = fetch_offset
        f.leader_end_at_last_fetch = leader_end
        f.last_fetch_ms = now_ms

    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR in etcd plus members being added."""
        if self.pending_isr is None:
            return self.isr
        return self.isr + tuple(r for r in self.pending_isr if r not in self.isr)

    def advance(self, leader_end: int) -> bool:
        """Recompute the high watermark with the leader's log ending at ``leader_end``;
        True if it moved."""
        hw = leader_end
        for r in self.maximal_isr():
            if r == self.node_id:
                continue
            f = self.followers.get(r)
            if f is None or f.log_end_offset == UNKNOWN:
                return False
            hw = min(hw, f.log_end_offset)
        if hw > self.high_watermark:
            self.high_watermark = hw
            return True
        return False

    # -- ISR changes ---------------------------------------------------------------------------

    def shrink_due(self, now_ms: int, lag_max_ms: int) -> tuple[int, ...]:
        """ISR members that have not been caught up within ``lag_max_ms``."""
        return tuple(r for r in self.isr if r != self.node_id
                     and (f := self.followers.get(r)) is not None
                     and now_ms - f.last_caught_up_ms > lag_max_ms)

    def expand_due(self) -> tuple[int, ...]:
        """Replicas outside the ISR that have caught up (module doc)."""
        return tuple(r for r, f in self.followers.items() if r not in self.isr
                     and f.log_end_offset != UNKNOWN
                     and f.log_end_offset >= self.high_watermark
                     and f.log_end_offset >= self.epoch_start_offset)

    def proposal(self, now_ms: int, lag_max_ms: int) -> tuple[int, ...] | None:
        """The ISR to write now, or None: nothing due, or a write is pending. A shrink is
        proposed before an expansion."""
        if self.pending_isr is not None:
            return None
        out = self.shrink_due(now_ms, lag_max_ms)
        if out:
            new = tuple(r for r in self.isr if r not in out)
        else:
            add = self.expand_due()
            if not add:
                return None
            new = self.isr + tuple(r for r in self.replicas if r in add)
        self.pending_isr = new
        return new

    def in_sync_count(self) -> int:
        """Members of the ISR in etcd (what ``min.insync.replicas`` is checked against)."""
        return len(self.isr)
