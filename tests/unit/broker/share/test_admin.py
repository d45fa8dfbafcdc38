"""The pure parts of share-group administration (broker/share/admin.py): the KIP-1226 lag formula
and the two group ops the shard does not offer (AlterShareGroupOffsets phase 1, forgetting the
topics whose offsets were deleted).

Ops run on a real ``GroupCoordinatorShard`` without an event loop; every record goes through the
binary serde and is replayed, and each op is checked not to mutate the shard itself.
"""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from broker.share.admin import AlterPlan, forget_topics_op, prepare_alter_op, share_lag
from coordinator.group import serde
from coordinator.group.shard import GroupCoordinatorShard
from coordinator.group.share.heartbeat import HeartbeatRequest
from coordinator.group.topics_image import TopicsImage
from coordinator.runtime.result import CoordinatorResult

A = uuid.UUID(int=0xA)
B = uuid.UUID(int=0xB)
TOPICS = TopicsImage.of({"a": (A, 3), "b": (B, 2)})
G = "grp"


@pytest.mark.parametrize(("end", "start", "complete", "lag"), [
    pytest.param(100, 40, 0, 60, id="acked-prefix"),
    pytest.param(10, 6, 2, 2, id="released-count-rejected-do-not"),
    pytest.param(10, 10, 0, 0, id="caught-up"),
    pytest.param(0, 0, 0, 0, id="empty-partition"),
    pytest.param(5, 9, 0, 0, id="start-beyond-end-is-zero"),
    pytest.param(10, -1, -1, -1, id="never-consumed"),
    pytest.param(10, 3, -1, -1, id="complete-count-unknown"),
])
def test_share_lag(end: int, start: int, complete: int, lag: int) -> None:
    assert share_lag(end, start, complete) == lag


def apply(shard: GroupCoordinatorShard, result: CoordinatorResult) -> CoordinatorResult:  # type: ignore[type-arg]
    """Replay an op's records (through the serde), as the runtime does after the append."""
    for record in result.records:
        key, value = serde.encode_record(record)
        assert serde.decode_record(key, value) == record
        shard.replay_record(record)
    return result


def test_alter_creates_an_absent_group_and_marks_partitions_initializing() -> None:
    shard = GroupCoordinatorShard()
    before = shard.groups
    result = prepare_alter_op(shard, G, {A: frozenset({0, 2})}, TOPICS)
    assert shard.groups == before, "the op mutated the shard"
    assert result.response == AlterPlan(state_epoch=1)
    apply(shard, result)
    group = shard.group(G)
    assert group is not None and group.group_epoch == 1 and not group.members
    assert group.initializing_partitions() == {A: frozenset({0, 2})}
    # Phase 2 (the shard's own op) makes them Initialized.
    apply(shard, shard.mark_initialized(G, {A: {0, 2}}, TOPICS, 0))
    group = shard.group(G)
    assert group is not None
    assert group.initialized_partitions() == {A: frozenset({0, 2})}
    assert group.initializing_partitions() == {}
    # A second alter bumps the epoch again: each reset gets a state epoch above the last.
    again = prepare_alter_op(shard, G, {A: frozenset({0})}, TOPICS)
    assert again.response.state_epoch == group.group_epoch + 1


def test_alter_refuses_a_group_with_members_and_writes_nothing() -> None:
    shard = GroupCoordinatorShard(require_share_state_initialization=False)
    apply(shard, shard.share_group_heartbeat(
        HeartbeatRequest(G, "m1", 0, subscribed_topic_names=("a",)), TOPICS, 0))
    result = prepare_alter_op(shard, G, {A: frozenset({0})}, TOPICS)
    assert result.records == ()
    assert result.response == AlterPlan(ErrorCode.non_empty_group, "The group is not empty.")


def test_alter_with_nothing_valid_only_checks() -> None:
    shard = GroupCoordinatorShard()
    result = prepare_alter_op(shard, G, {}, TOPICS)
    assert (result.records, result.response) == ((), AlterPlan())
    assert shard.group(G) is None


def test_alter_on_a_loading_shard() -> None:
    shard = GroupCoordinatorShard(loading=True)
    result = prepare_alter_op(shard, G, {A: frozenset({0})}, TOPICS)
    assert result.records == ()
    assert result.response.error == ErrorCode.coordinator_load_in_progress


def test_forget_topics_drops_them_from_the_state_metadata() -> None:
    shard = GroupCoordinatorShard()
    apply(shard, prepare_alter_op(shard, G, {A: frozenset({0, 1}), B: frozenset({0})}, TOPICS))
    apply(shard, shard.mark_initialized(G, {A: {0, 1}}, TOPICS, 0))  # B stays Initializing
    epoch = shard.group(G).group_epoch  # type: ignore[union-attr]
    apply(shard, forget_topics_op(shard, G, [A, B]))
    group = shard.group(G)
    assert group is not None and group.group_epoch == epoch  # the group itself stays
    assert group.initialized_partitions() == {} and group.initializing_partitions() == {}
    # Nothing left to forget, or no such group: no records.
    assert forget_topics_op(shard, G, [A]).records == ()
    assert forget_topics_op(shard, "other", [A]).records == ()
