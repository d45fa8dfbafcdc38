"""Bad input to classic consumer groups gets Kafka's error codes while the broker keeps serving.

Raw JoinGroup/SyncGroup/Heartbeat/LeaveGroup/OffsetCommit/OffsetDelete requests (``rawclient``)
carry what real clients would not send: a protocol type that does not match the group's, an empty
protocol list, 10,000 protocols, metadata past ``socket.request.max.bytes``, commits from members
fenced by a rebalance or by a static replacement, commits while the group completes a rebalance,
a SyncGroup of an old generation, a member id of 100,000 characters and an empty group id. Each
answer is Kafka's (``GroupCoordinatorService``, ``GroupMetadataManager``, ``ClassicGroup``,
``OffsetMetadataManager``); meanwhile a control producer and consumer on connections of their own
make round trips, and every record they send must come back.

Kafka bounds none of JoinGroup's sizes itself (no limit on protocols or metadata bytes): the
request-size bound ``socket.request.max.bytes`` applies, and a larger frame closes only that
connection. This module's broker lowers it to 2 MiB to show that without 100 MB frames. What a
group keeps durably is bounded as in Kafka: its GroupMetadata record must fit
``message.max.bytes`` (Kafka: __consumer_offsets' max message size), else SyncGroup fails with
UNKNOWN_SERVER_ERROR and the group rebalances.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.rawclient import RawClient, closed_by_peer, request, request_module

MAX_REQUEST = 2 * 1024 * 1024
OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "socket.request.max.bytes": str(MAX_REQUEST)}
TOPIC = "bad-classic"
LONG_ID = "m" * 100_000


class ControlPair:
    """A producer and an assigned consumer on their own connections: one round trip every 20 ms
    until ``stop()``; ``lost`` lists the sequence numbers that never came back."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.sent = 0
        self.received: set[int] = set()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="control-pair")

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self.received:  # the pair works before the bad input starts
            assert time.monotonic() < deadline and self._thread.is_alive(), self.errors
            time.sleep(0.02)

    def _run(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 0})
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "control-unused",
                      "enable.auto.commit": False, "fetch.wait.max.ms": 50})
        c.assign([TopicPartition(self.topic, 0, 0)])
        try:
            next_send = time.monotonic()
            while not self._stop.is_set():
                if time.monotonic() >= next_send:
                    p.produce(self.topic, str(self.sent).encode(), partition=0)
                    self.sent += 1
                    next_send += 0.02
                p.poll(0)
                msg = c.poll(0.01)
                if msg is None:
                    continue
                if msg.error() is not None:
                    self.errors.append(str(msg.error()))
                else:
                    self.received.add(int(msg.value()))
            p.flush(10)
            deadline = time.monotonic() + 10
            while len(self.received) < self.sent and time.monotonic() < deadline:
                msg = c.poll(0.05)
                if msg is not None and msg.error() is None:
                    self.received.add(int(msg.value()))
        finally:
            c.close()

    def stop(self) -> list[int]:
        # One more round trip after the bad input, then stop.
        want = self.sent + 1
        deadline = time.monotonic() + 10
        while (self.sent < want or want - 1 not in self.received) and \
                time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.02)
        self._stop.set()
        self._thread.join(30)
        return sorted(set(range(self.sent)) - self.received)


@pytest.fixture(scope="module")
def bad_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("classic-bad") / "data", overrides=OVERRIDES)
    b.start()
    create_topic(b.bootstrap, TOPIC, partitions=2)
    create_topic(b.bootstrap, "control", partitions=1)
    yield b
    b.stop()


@pytest.fixture
def control(bad_broker: BrokerProcess) -> Iterator[ControlPair]:
    pair = ControlPair(bad_broker.bootstrap, "control")
    pair.start()
    yield pair
    lost = pair.stop()
    assert pair.sent >= 2, pair.sent
    assert not lost, f"control records never came back: {lost[:10]}"
    assert not pair.errors, pair.errors[:3]
    assert bad_broker.alive()


# -- raw requests --------------------------------------------------------------------------------


def join(c: RawClient, group: str, member: str = "", *, instance: str | None = None,
         protocol_type: str = "consumer",
         protocols: tuple[tuple[str, bytes], ...] = (("range", b"\x00\x01"),),
         version: int = 9) -> Any:
    m = request_module(11, version)
    return c.call(11, version, request(
        11, version, group_id=group, session_timeout=timedelta(seconds=10),
        rebalance_timeout=timedelta(seconds=10), member_id=member, group_instance_id=instance,
        protocol_type=protocol_type, reason=None, protocols=tuple(
            m.JoinGroupRequestProtocol(name=n, metadata=meta) for n, meta in protocols)))


def join_new(c: RawClient, group: str, **kw: Any) -> Any:
    """A v9 join of a new dynamic member: MEMBER_ID_REQUIRED, then the rejoin's answer."""
    first = join(c, group, **kw)
    if first.error_code != ErrorCode.member_id_required:
        return first
    return join(c, group, first.member_id, **kw)


def sync(c: RawClient, group: str, member: str, generation: int,
         assignments: tuple[tuple[str, bytes], ...] = (), instance: str | None = None) -> Any:
    m = request_module(14, 5)
    return c.call(14, 5, request(
        14, 5, group_id=group, generation_id=generation, member_id=member,
        group_instance_id=instance, protocol_type="consumer", protocol_name="range",
        assignments=tuple(m.SyncGroupRequestAssignment(member_id=k, assignment=v)
                          for k, v in assignments)))


def heartbeat(c: RawClient, group: str, member: str, generation: int) -> ErrorCode:
    return c.call(12, 4, request(12, 4, group_id=group, generation_id=generation,
                                 member_id=member, group_instance_id=None)).error_code


def leave(c: RawClient, group: str, member: str) -> Any:
    m = request_module(13, 5)
    return c.call(13, 5, request(13, 5, group_id=group, members=(
        m.MemberIdentity(member_id=member, group_instance_id=None, reason=None),)))


def commit(c: RawClient, group: str, member: str = "", generation: int = -1, offset: int = 1,
           instance: str | None = None, version: int = 9) -> ErrorCode:
    """OffsetCommit of partition 0 of TOPIC; the partition's error code."""
    m = request_module(8, version)
    resp = c.call(8, version, request(
        8, version, group_id=group, generation_id_or_member_epoch=generation, member_id=member,
        group_instance_id=instance, retention_time=-1, topics=(m.OffsetCommitRequestTopic(
            name=TOPIC, partitions=(m.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                committed_metadata=None),)),)))
    return resp.topics[0].partitions[0].error_code  # type: ignore[no-any-return]


def offset_delete(c: RawClient, group: str) -> Any:
    m = request_module(47, 0)
    return c.call(47, 0, request(47, 0, group_id=group, topics=(m.OffsetDeleteRequestTopic(
        name=TOPIC, partitions=(m.OffsetDeleteRequestPartition(partition_index=0),)),)))


def fetch_offset(c: RawClient, group: str) -> int:
    m = request_module(9, 7)
    resp = c.call(9, 7, request(9, 7, group_id=group, require_stable=False, topics=(
        m.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=(0,)),)))
    return resp.topics[0].partitions[0].committed_offset  # type: ignore[no-any-return]


def stable_single(c: RawClient, group: str) -> tuple[str, int]:
    """One dynamic member joined and synced: (member id, generation)."""
    joined = join_new(c, group)
    assert joined.error_code == ErrorCode.none, joined
    synced = sync(c, group, joined.member_id, joined.generation_id,
                  ((joined.member_id, b"A"),))
    assert synced.error_code == ErrorCode.none
    return joined.member_id, joined.generation_id


# -- JoinGroup -----------------------------------------------------------------------------------


def test_join_with_a_mismatched_protocol_type_or_no_common_protocol(
        bad_broker: BrokerProcess, control: ControlPair) -> None:
    group = "bad-proto-type"
    with RawClient(bad_broker.bootstrap) as c:
        member, generation = stable_single(c, group)
        # A Kafka Connect worker (protocol type "connect") joining a consumer group.
        assert join(c, group, protocol_type="connect").error_code == \
            ErrorCode.inconsistent_group_protocol
        # The right type, but no protocol in common with the members.
        assert join(c, group, protocols=(("roundrobin", b""),)).error_code == \
            ErrorCode.inconsistent_group_protocol
        # The member itself rejoining with another type is refused and stays in the group.
        assert join(c, group, member, protocol_type="connect").error_code == \
            ErrorCode.inconsistent_group_protocol
        assert heartbeat(c, group, member, generation) == ErrorCode.none
        # A type the broker never heard of is any group's own business (Kafka only compares
        # types): a new group takes it, and then refuses "consumer" members.
        made_up = join_new(c, "bad-made-up-type", protocol_type="my-own-type")
        assert made_up.error_code == ErrorCode.none and made_up.protocol_type == "my-own-type"
        assert join(c, "bad-made-up-type").error_code == ErrorCode.inconsistent_group_protocol


def test_join_with_an_empty_protocol_type_or_list(bad_broker: BrokerProcess,
                                                  control: ControlPair) -> None:
    with RawClient(bad_broker.bootstrap) as c:
        for kw in ({"protocol_type": ""}, {"protocols": ()}):
            res = join(c, "bad-empty-proto", **kw)
            assert (res.error_code, res.member_id) == (
                ErrorCode.inconsistent_group_protocol, ""), kw
        # Nothing was created: the group id is still free for a real member.
        listed = c.call(16, 5, request(16, 5, states_filter=(), types_filter=()))
        assert "bad-empty-proto" not in {g.group_id for g in listed.groups}
        member, _ = stable_single(c, "bad-empty-proto")
        assert member


def test_many_protocols_and_large_metadata_within_the_request_bound(
        bad_broker: BrokerProcess, control: ControlPair) -> None:
    """Kafka has no own bound on protocols or metadata; 10,000 protocols and 1 MiB of metadata
    join like any member, and the leader gets the chosen protocol's metadata back."""
    group = "bad-many-protocols"
    protocols = tuple((f"p{i}", b"x" * 64) for i in range(10_000))
    with RawClient(bad_broker.bootstrap, timeout=30) as c:
        res = join_new(c, group, protocols=protocols)
        assert res.error_code == ErrorCode.none
        assert res.protocol_name == "p0" and res.members[0].metadata == b"x" * 64
        big = b"y" * (1024 * 1024)
        res = join_new(c, "bad-big-metadata", protocols=(("range", big),))
        assert res.error_code == ErrorCode.none
        assert res.members[0].metadata == big


def test_an_assignment_record_past_message_max_bytes_is_refused(
        bad_broker: BrokerProcess, control: ControlPair) -> None:
    """Kafka's bound on a group's size in bytes: its GroupMetadata record (the members' metadata
    and assignments) must fit __consumer_offsets' max message size (message.max.bytes, 1 MiB
    + 12 by default); the SyncGroup that would write a larger one gets UNKNOWN_SERVER_ERROR."""
    group = "bad-big-assignment"
    with RawClient(bad_broker.bootstrap, timeout=30) as c:
        res = join_new(c, group, protocols=(("range", b"y" * 600_000),))
        assert res.error_code == ErrorCode.none
        synced = sync(c, group, res.member_id, res.generation_id,
                      ((res.member_id, b"a" * 600_000),))
        assert synced.error_code == ErrorCode.unknown_server_error
        assert "over message.max.bytes" in bad_broker.log_path.read_text(errors="replace")
        # The member rejoins with a smaller subscription and the group works.
        again = join(c, group, res.member_id, protocols=(("range", b"small"),))
        assert again.error_code == ErrorCode.none and again.generation_id == res.generation_id + 1
        assert sync(c, group, res.member_id, again.generation_id,
                    ((res.member_id, b"A"),)).error_code == ErrorCode.none


def test_join_past_socket_request_max_bytes_closes_only_that_connection(
        bad_broker: BrokerProcess, control: ControlPair) -> None:
    with RawClient(bad_broker.bootstrap, timeout=30) as c:
        try:
            c.send(11, 9, request(
                11, 9, group_id="bad-huge", session_timeout=timedelta(seconds=10),
                rebalance_timeout=timedelta(seconds=10), member_id="", group_instance_id=None,
                protocol_type="consumer", reason=None,
                protocols=(request_module(11, 9).JoinGroupRequestProtocol(
                    name="range", metadata=b"z" * (MAX_REQUEST + 1)),)))
        except OSError:
            pass  # the broker may close while the frame is still being sent
        assert closed_by_peer(c.sock)
    with RawClient(bad_broker.bootstrap) as c:
        assert stable_single(c, "bad-huge")[0]


# -- OffsetCommit from fenced members ------------------------------------------------------------


def test_commit_from_a_member_of_an_older_generation_or_unknown(
        bad_broker: BrokerProcess, control: ControlPair) -> None:
    group = "bad-fenced"
    with RawClient(bad_broker.bootstrap) as c:
        m1, gen1 = stable_single(c, group)
        assert commit(c, group, m1, gen1, offset=5) == ErrorCode.none
        # A second member: generation gen1 + 1 completes once m1 rejoins.
        with RawClient(bad_broker.bootstrap) as c2:
            first = join(c2, group)
            assert first.error_code == ErrorCode.member_id_required
            c2.send(11, 9, request(
                11, 9, group_id=group, session_timeout=timedelta(seconds=10),
                rebalance_timeout=timedelta(seconds=10), member_id=first.member_id,
                group_instance_id=None, protocol_type="consumer", reason=None,
                protocols=(request_module(11, 9).JoinGroupRequestProtocol(
                    name="range", metadata=b"\x00\x01"),)))
            # The group is rebalancing (once c2's join is in: another connection, so poll):
            # the heartbeat tells m1 to rejoin; a commit of the current generation is still
            # taken (PreparingRebalance, as Kafka).
            deadline = time.monotonic() + 10
            while heartbeat(c, group, m1, gen1) != ErrorCode.rebalance_in_progress:
                assert time.monotonic() < deadline, "the second member's join never arrived"
                time.sleep(0.02)
            assert commit(c, group, m1, gen1, offset=6) == ErrorCode.none
            rejoined = join(c, group, m1)
            _, joined2 = c2.receive(11, 9)
            gen2 = rejoined.generation_id
            assert gen2 == gen1 + 1 and joined2.generation_id == gen2
            # CompletingRebalance: the old generation is ILLEGAL_GENERATION, an unknown member
            # UNKNOWN_MEMBER_ID, a member of this generation REBALANCE_IN_PROGRESS.
            assert commit(c, group, m1, gen1, offset=7) == ErrorCode.illegal_generation
            assert commit(c, group, "nobody", gen2, offset=7) == ErrorCode.unknown_member_id
            assert commit(c, group, m1, gen2, offset=7) == ErrorCode.rebalance_in_progress
            # SyncGroup of the old generation: ILLEGAL_GENERATION.
            assert sync(c, group, m1, gen1).error_code == ErrorCode.illegal_generation
            leader = rejoined.leader
            follower = first.member_id if leader == m1 else m1
            lc, fc = (c, c2) if leader == m1 else (c2, c)
            fc.send(14, 5, request(14, 5, group_id=group, generation_id=gen2, member_id=follower,
                                   group_instance_id=None, protocol_type="consumer",
                                   protocol_name="range", assignments=()))
            assert sync(lc, group, leader, gen2, ((m1, b"1"), (first.member_id, b"2"))) \
                .error_code == ErrorCode.none
            assert fc.receive(14, 5)[1].error_code == ErrorCode.none
            # Stable again: the old generation stays fenced, the new one commits.
            assert commit(c, group, m1, gen1, offset=8) == ErrorCode.illegal_generation
            assert commit(c, group, m1, gen2, offset=9) == ErrorCode.none
            # Without member id and generation (a simple commit) while members are in.
            assert commit(c, group) == ErrorCode.unknown_member_id
            assert fetch_offset(c, group) == 9
            # A group that does not exist: GROUP_ID_NOT_FOUND from v9, ILLEGAL_GENERATION before.
            assert commit(c, "bad-no-such-group", "x", 3) == ErrorCode.group_id_not_found
            assert commit(c, "bad-no-such-group", "x", 3, version=8) == \
                ErrorCode.illegal_generation


def test_commit_from_a_replaced_static_member_is_fenced(bad_broker: BrokerProcess,
                                                        control: ControlPair) -> None:
    group = "bad-static"
    with RawClient(bad_broker.bootstrap) as c:
        old = join(c, group, instance="inst-1")
        assert old.error_code == ErrorCode.none
        assert sync(c, group, old.member_id, old.generation_id, ((old.member_id, b"A"),),
                    instance="inst-1").error_code == ErrorCode.none
        assert commit(c, group, old.member_id, old.generation_id, instance="inst-1") == \
            ErrorCode.none
        new = join(c, group, instance="inst-1")  # a restarted process: same instance id
        assert new.error_code == ErrorCode.none and new.member_id != old.member_id
        assert commit(c, group, old.member_id, old.generation_id, instance="inst-1") == \
            ErrorCode.fenced_instance_id
        assert heartbeat(c, group, old.member_id, old.generation_id) == \
            ErrorCode.unknown_member_id
        assert commit(c, group, new.member_id, new.generation_id, offset=4,
                      instance="inst-1") == ErrorCode.none


# -- ids -----------------------------------------------------------------------------------------


def test_member_id_of_100k_characters(bad_broker: BrokerProcess, control: ControlPair) -> None:
    group = "bad-long-member"
    with RawClient(bad_broker.bootstrap, timeout=20) as c:
        member, generation = stable_single(c, group)
        res = join(c, group, LONG_ID)
        assert res.error_code == ErrorCode.unknown_member_id
        assert join(c, "bad-long-member-new", LONG_ID).error_code == ErrorCode.unknown_member_id
        assert sync(c, group, LONG_ID, generation).error_code == ErrorCode.unknown_member_id
        assert heartbeat(c, group, LONG_ID, generation) == ErrorCode.unknown_member_id
        assert commit(c, group, LONG_ID, generation) == ErrorCode.unknown_member_id
        left = leave(c, group, LONG_ID)
        assert left.members[0].error_code == ErrorCode.unknown_member_id
        # The real member was not disturbed, and no group was made for the unknown id.
        assert heartbeat(c, group, member, generation) == ErrorCode.none
        listed = c.call(16, 5, request(16, 5, states_filter=(), types_filter=()))
        assert "bad-long-member-new" not in {g.group_id for g in listed.groups}
    assert bad_broker.log_path.stat().st_size < 1_000_000  # the id is not logged in full


def test_ids_longer_than_the_group_records_hold(bad_broker: BrokerProcess,
                                                control: ControlPair) -> None:
    """__consumer_offsets records (Kafka's formats) hold strings of at most 32,767 bytes; JoinGroup
    v6+ and OffsetCommit v8+ can carry longer ones. Refused up front (Kafka fails the write
    later): INVALID_GROUP_ID for the group id, INVALID_REQUEST for an instance id or protocol."""
    long_group = "G" * 40_000
    with RawClient(bad_broker.bootstrap, timeout=20) as c:
        assert join(c, long_group).error_code == ErrorCode.invalid_group_id
        assert commit(c, long_group) == ErrorCode.invalid_group_id
        assert join(c, "bad-long-instance", instance="i" * 40_000).error_code == \
            ErrorCode.invalid_request
        assert join(c, "bad-long-protocol", protocols=(("p" * 40_000, b""),)).error_code == \
            ErrorCode.invalid_request
        # A long client id is the prefix of member ids: cut so the group's record still fits.
        with RawClient(bad_broker.bootstrap, timeout=20, client_id="c" * 32_000) as long_client:
            res = join_new(long_client, "bad-long-client-id")
            assert res.error_code == ErrorCode.none and len(res.member_id) < 1100
            assert sync(long_client, "bad-long-client-id", res.member_id, res.generation_id,
                        ((res.member_id, b"A"),)).error_code == ErrorCode.none
    assert "Traceback" not in bad_broker.log_path.read_text(errors="replace")


def test_empty_group_id(bad_broker: BrokerProcess, control: ControlPair) -> None:
    with RawClient(bad_broker.bootstrap) as c:
        assert join(c, "").error_code == ErrorCode.invalid_group_id
        assert sync(c, "", "m", 1).error_code == ErrorCode.invalid_group_id
        assert heartbeat(c, "", "m", 1) == ErrorCode.invalid_group_id
        assert leave(c, "", "m").error_code == ErrorCode.invalid_group_id
        assert offset_delete(c, "").error_code == ErrorCode.invalid_group_id
        # OffsetCommit and OffsetFetch accept the empty id (Kafka keeps it for old clients).
        assert commit(c, "", offset=11) == ErrorCode.none
        assert fetch_offset(c, "") == 11


def test_broker_still_serves_a_real_group_after_the_bad_input(
        bad_broker: BrokerProcess, control: ControlPair, tmp_path: Path) -> None:
    c = Consumer({"bootstrap.servers": bad_broker.bootstrap, "group.id": "bad-after",
                  "group.protocol": "classic", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    p = Producer({"bootstrap.servers": bad_broker.bootstrap})
    for i in range(10):
        p.produce(TOPIC, f"v{i}".encode(), partition=i % 2)
    assert p.flush(10) == 0
    try:
        c.subscribe([TOPIC])
        got = 0
        deadline = time.monotonic() + 20
        while got < 10:
            assert time.monotonic() < deadline, got
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                got += 1
        c.commit(asynchronous=False)
    finally:
        c.close()
