"""``GroupCoordinatorShard``: the share, classic and consumer groups of one ``__consumer_offsets``
partition.

Consumer-protocol (KIP-848) groups (``consumer/groups.py``, records in ``consumer/records.py``)
live in ``self.consumer``: ``replay`` routes their records there, ``commit``/``revert`` move its
store, timers with keys starting ``"consumer-"`` are theirs, their committed offsets are kept by
``self.classic.offsets`` (``offsets.py``, OffsetCommit records) and validated by member epoch. A
consumer heartbeat on a share group's id (or a classic group's with members) answers
GROUP_ID_NOT_FOUND, a share heartbeat on a consumer group's id too, JoinGroup
INCONSISTENT_GROUP_PROTOCOL; an empty group of one protocol may be taken over by the other (Kafka's
online upgrade/downgrade of empty groups).

Classic consumer groups (``classic/group.py``) and committed offsets (``offsets.py``; records in
``classic/records.py``: Kafka's GroupMetadata and OffsetCommit formats) live in ``self.classic``
and ``self.classic.offsets`` beside the share groups:
``replay`` routes their records there, ``commit``/``revert`` move both stores, timers with keys
starting ``"c-"`` are theirs, and ``list_groups`` lists both kinds. One group id has one type:
classic ops on a share group's id answer GROUP_ID_NOT_FOUND (JoinGroup:
INCONSISTENT_GROUP_PROTOCOL), a share heartbeat with a classic group's id GROUP_ID_NOT_FOUND.
Deferred classic answers (JoinGroup, a follower's SyncGroup) go to ``deliver`` once the records
of the op that produced them are committed; a revert or unload delivers ``classic.PENDING``,
which the caller turns into an error.

Transactional offsets (TxnOffsetCommit, ``txn_offsets.py``): ``txn_commit_offsets`` validates
like Kafka's ``validateTransactionalOffsetCommit`` and returns OffsetCommit records that the
runtime appends as a transactional batch of the producer (``CoordinatorRuntime.
write_transactional``); they replay through ``replay_transactional`` into
``self.classic.pending`` and wait for the producer's marker, replayed by
``replay_end_transaction`` (the shard is the runtime's ``TransactionalShard``).

Concept (STYLE.md 1.3-1.5, after Kafka's ``GroupCoordinatorShard``): the shard holds every share
group whose id maps to its partition. Write ops (heartbeat, topic changes, timers, share-state
initialisation, delete) validate against the latest replayed state and return
``CoordinatorResult(records, response)`` without touching group state; ``replay(offset, key,
value)`` is the only mutator. It is the runtime's ``TimedShard`` (``coordinator/runtime/shard.py``;
records go through ``serde.GroupRecordSerde``):

- the runtime replays an op's records at their log offsets right after the op runs (so the next
  op sees them), then ``commit(offset)`` once they are durable, or ``revert(offset)`` if the
  append or fsync failed (``store.GroupStore`` keeps the undo log); responses go out after commit;
- loading replays the partition's log, commits its end and calls ``on_loaded(now_ms)``, which
  re-arms the soft timers; ``on_unloaded`` drops everything;
- timers: the runtime arms ``next_deadline()`` and runs ``on_timer(now_ms)`` as a write op
  (without a topics image: the target is then recomputed by the next heartbeat);
- ``last_redundant_offset`` lets the runtime prune the log below the oldest record a reload needs.

Reads that answer clients (``describe``, ``list_groups``, ``committed_group``) use the committed
view; ``groups``/``group`` are the latest replayed state (what ops see).

Driving it from the shell (``coordinator/group/service.py``):
- ``initializations(result)`` lists share-partition state to initialize (InitializeShareGroupState,
  StartOffset -1, StateEpoch = the given epoch), to send once the op's records are committed. When
  the persister answers, run ``mark_initialized`` or ``mark_initialization_failed`` (write ops).
- topic metadata: on create/delete/partition growth run ``on_topics_changed(topics, now_ms)``.
- ``on_member_removed(group id, member id)`` (constructor) is called from ``commit`` for each
  member whose removal (leave or session expiry) just became durable.
- ``replay_record(record)`` replays at the next offset and commits at once (callers without a log).

Soft state (not in records, rebuilt by ``on_loaded``): the timer. Timer keys are tuples, not
``"session:<group>:<member>"`` strings, because group and member ids may contain ``:``:
``("session", group_id, member_id)`` and ``("init-retry", group_id)``. Scheduling a timer from a
write op is the one permitted side effect (as in Kafka); expiry handlers re-check the committed
state, so a timer left behind by a failed append is harmless.

Two-phase share-partition initialisation (reference section 5): heartbeats and topic changes mark
subscribed partitions that are neither initialized nor initializing as Initializing (record 15)
and hand them out via ``initializations(result)``; only Initialized partitions are assignable.
``mark_initialized`` moves them to Initialized, bumps the group epoch and recomputes the target,
so members receive them on their next heartbeat. ``mark_initialization_failed`` drops them from
Initializing so the next heartbeat retries. An ``("init-retry", group)`` timer
(``initialize_retry_interval_ms``, Kafka's group.share.initialize.retry.interval.ms, 30 s) clears
Initializing entries whose answer never came (e.g. the shell crashed), so they are retried too.
Re-initializing a partition that never became Initialized is safe: it was never assigned, so
nobody consumed from it. Initialized partitions are durable (record 15) and never initialized
again while the group exists, so their consumption progress survives restarts. After a load,
Initializing entries are retried at once: the answers to their requests died with the previous
process. With ``require_share_state_initialization=False`` (no persister wired
yet) every subscribed partition is assignable and record 15 is never written.
"""

from __future__ import annotations

from coordinator.group.classic.shard_ops import ClassicShardOps
from coordinator.group.consumer.shard_ops import ConsumerShardOps
from coordinator.group.shard_base import (
    ASSIGNOR_NAME,
    DELETE_EXTRA,
    GROUP_TYPE,
    INIT_RETRY,
    INITIALIZE_EXTRA,
    PROTOCOL_TYPE,
    SESSION,
    ConsumerDescribeResult,
    DeleteGroupResponse,
    DescribeResult,
    InitializeResponse,
    ListedGroup,
    MemberRemoved,
    TimerKey,
    TimerOutcome,
    deletions,
    initializations,
)
from coordinator.group.share.shard_ops import ShareShardOps

__all__ = ["ASSIGNOR_NAME", "DELETE_EXTRA", "GROUP_TYPE", "INITIALIZE_EXTRA", "INIT_RETRY",
           "PROTOCOL_TYPE", "SESSION", "ConsumerDescribeResult", "DeleteGroupResponse",
           "DescribeResult", "GroupCoordinatorShard", "InitializeResponse", "ListedGroup",
           "MemberRemoved", "TimerKey", "TimerOutcome", "deletions", "initializations"]


class GroupCoordinatorShard(ShareShardOps, ConsumerShardOps, ClassicShardOps):
    """All groups of one coordinator partition (sans-IO; see the module docstring)."""
