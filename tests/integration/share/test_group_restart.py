"""Share groups survive a broker restart, graceful (SIGTERM) or not (kill -9).

Group metadata (members, epochs, target assignment, Initialized share-partitions) is replayed from
``__consumer_offsets`` and share state from ``__share_group_state``. So after the restart the group
is still listed and describable with the same member at the same epoch, and a ShareConsumer that
stays open through the restart carries on where its acknowledgements left off: records ACCEPTed
before the restart are not delivered again, records produced but not consumed before it are.
Every wait is a bounded poll.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType
from kio.schema.errors import ErrorCode

from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.rawclient import RawClient, request
from tests.integration.share_helpers import poll_until, produce, set_group_configs, share_consumer

DESCRIBE, LIST_GROUPS = 77, 16
TOPIC, GROUP = "orders", "workers"


def describe(bootstrap: str, group: str) -> Any:
    with RawClient(bootstrap) as c:
        resp = c.call(DESCRIBE, 1, request(DESCRIBE, 1, group_ids=(group,),
                                           include_authorized_operations=False))
    (g,) = resp.groups
    return g


def listed(bootstrap: str) -> dict[str, str]:
    with RawClient(bootstrap) as c:
        resp = c.call(LIST_GROUPS, 5, request(LIST_GROUPS, 5, states_filter=(), types_filter=()))
    assert resp.error_code == ErrorCode.none
    return {g.group_id: g.group_state for g in resp.groups}


def wait_for(check: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)


@pytest.mark.parametrize("how", ["sigterm", "kill-9"])
def test_share_group_and_its_progress_survive_a_restart(fresh_broker: BrokerProcess,
                                                        how: str) -> None:
    b = fresh_broker
    b.start()
    create_topic(b.bootstrap, TOPIC, partitions=2)
    set_group_configs(b.bootstrap, GROUP, {"share.auto.offset.reset": "earliest"})
    accepted = produce(b.bootstrap, TOPIC, 20, partitions=2, prefix="a")

    consumer = share_consumer(b.bootstrap, GROUP, TOPIC, explicit=True)
    try:
        got: list[bytes] = []

        def accept(_i: int, m: Any) -> None:
            got.append(m.value())
            consumer.acknowledge(m, AcknowledgeType.ACCEPT)

        poll_until([consumer], lambda: set(got) >= set(accepted), on_message=accept)
        results = consumer.commit_sync(15)
        assert results and all(v is None for v in results.values()), results
        before = describe(b.bootstrap, GROUP)
        assert before.error_code == ErrorCode.none and before.group_state == "Stable"
        (member,) = before.members
        assert {tp.topic_name: tuple(tp.partitions)
                for tp in member.assignment.topic_partitions} == {TOPIC: (0, 1)}
        # Produced before the restart, consumed only after it.
        rest = produce(b.bootstrap, TOPIC, 20, partitions=2, prefix="b")

        if how == "sigterm":
            assert b.stop() == 0
        else:
            b.kill()
        b.start()

        after = describe(b.bootstrap, GROUP)
        assert after.error_code == ErrorCode.none, after
        assert after.group_state == "Stable"
        assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch,
                                                               before.assignment_epoch)
        assert [(m.member_id, m.member_epoch) for m in after.members] == \
            [(member.member_id, member.member_epoch)]
        assert listed(b.bootstrap).get(GROUP) == "Stable"

        again: list[bytes] = []

        def accept_again(_i: int, m: Any) -> None:
            again.append(m.value())
            consumer.acknowledge(m, AcknowledgeType.ACCEPT)

        poll_until([consumer], lambda: set(again) >= set(rest), timeout=30.0,
                   on_message=accept_again)
        assert not set(again) & set(accepted), "records ACCEPTed before the restart came back"
        results = consumer.commit_sync(15)
        assert all(v is None for v in results.values()), results
        # The member carried on without rejoining: same member, same epochs.
        final = describe(b.bootstrap, GROUP)
        assert final.group_epoch == before.group_epoch
        assert [(m.member_id, m.member_epoch) for m in final.members] == \
            [(member.member_id, member.member_epoch)]
    finally:
        consumer.close()
    wait_for(lambda: describe(b.bootstrap, GROUP).group_state == "Empty")
