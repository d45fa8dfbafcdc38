"""Structure-aware wire fuzzing of a real broker (issue 12, section 8).

For every (api key, version) the dispatcher serves (which is what ApiVersions advertises),
hypothesis builds valid-shaped request bodies from kio's generated types
(``tests/integration/wire/wirefuzz.py``) and damaged copies of them (bit flips, truncation, inflated
length fields, spliced bytes), and sends them to a broker of the module's own. Each example
asserts:

- a valid-shaped body gets exactly one well-formed answer with its correlation id (Produce with
  acks=0: none), on a connection that stays open;
- a damaged body gets a well-formed answer or the connection is closed (it may not decode);
- the broker log gains no ERROR line, traceback or "handler ... failed for client";
- a separate control connection still answers Metadata.

Two tests reach states single requests cannot: acknowledgements on a live share session
(``test_acknowledgements_on_a_live_session``) and random sequences of share-group operations by
three members (``test_share_group_sequences``).

``make test`` runs a bounded number of examples (about 15 s in all; ``SHOAL_FUZZ_EXAMPLES``,
``SHOAL_FUZZ_ACK_EXAMPLES`` and ``SHOAL_FUZZ_SEQ_EXAMPLES`` raise them); ``make test-slow`` runs
``test_black_box_fuzz_soak``: many more examples (``SHOAL_FUZZ_SOAK_EXAMPLES``), and raw random
frames pipelined over four more connections at the same time.
"""

from __future__ import annotations

import os
import random
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from broker.dispatch import default_dispatcher
from tests.conftest import BrokerProcess
from tests.integration.wire import wirefuzz as wf
from tests.integration.rawclient import RawClient, request, request_module
from tests.integration.share_helpers import produce, set_group_configs
from tests.unit.batches import make_batch

SERVED = [(k, v) for k, lo, hi in default_dispatcher().ranges() for v in range(lo, hi + 1)]
LONG_POLL = {1, 78}  # Fetch, ShareFetch: a damaged max_wait may legitimately make them wait
# JoinGroup, SyncGroup (given 8 s, above group.initial.rebalance.delay.ms): a classic group's
# rebalance waits for its other members to rejoin (up to their rebalance timeout, which a draw can
# make days), and members an earlier draw added to the same group id never come back: Kafka
# waits as well.
REBALANCE = {11, 14}
FAST = settings(max_examples=int(os.environ.get("SHOAL_FUZZ_EXAMPLES", "10")), deadline=None,
                database=None, derandomize=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much,
                                       HealthCheck.function_scoped_fixture])


class Target:
    """The fuzzed broker, its log watch, a control client and a probe connection."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.log = wf.LogWatch(broker.log_path)
        self.control = RawClient(broker.bootstrap, timeout=15)
        self.probe = wf.Probe(broker.bootstrap, timeout=15)

    def refresh_world(self) -> None:
        """Delete the topics earlier examples created, (re)create the fuzz topic the strategies
        name (a fuzzed DeleteTopics may drop it) and learn its topic id.

        Without the clean-up a long run creates thousands of partitions (three open files each)
        and the broker runs out of file descriptors (issue 12 section 5), which is not what this
        test is about.
        """
        listed = self.control.call(3, 12, request(3, 12, topics=None,
                                                  allow_auto_topic_creation=False,
                                                  include_topic_authorized_operations=False))
        extra = tuple(t.name for t in listed.topics if t.name and t.name != wf.TOPIC)
        if extra:
            self.control.call(20, 5, request(20, 5, topic_names=extra,
                                             timeout=timedelta(seconds=10)))
        m = request_module(19, 7)
        topic = m.CreatableTopic(name=wf.TOPIC, num_partitions=4, replication_factor=1,
                                 assignments=(), configs=())
        self.control.call(19, 7, request(19, 7, topics=(topic,), timeout=timedelta(seconds=5),
                                         validate_only=False))
        wanted = request_module(3, 12).MetadataRequestTopic(name=wf.TOPIC, topic_id=None)
        md = self.control.call(3, 12, request(3, 12, topics=(wanted,),
                                              allow_auto_topic_creation=False,
                                              include_topic_authorized_operations=False))
        for t in md.topics:
            if t.name == wf.TOPIC and t.topic_id is not None:
                wf.WORLD.topic_id = t.topic_id
        member = str(uuid.uuid4())
        joined = self.control.call(76, 1, request(76, 1, group_id=wf.GROUP, member_id=member,
                                                  member_epoch=0, rack_id=None,
                                                  subscribed_topic_names=(wf.TOPIC,)))
        if joined.error_code == ErrorCode.none:
            wf.WORLD.member_ids.append(member)

    def control_answers(self) -> None:
        md = self.control.call(3, 12, request(3, 12, topics=None, allow_auto_topic_creation=False,
                                              include_topic_authorized_operations=False))
        assert md.brokers, "control Metadata lists no broker"

    def assert_log_clean(self, what: str) -> None:
        bad = self.log.bad()
        assert bad is None, f"broker logged an unexpected failure after {what}:\n{bad}"

    def close(self) -> None:
        self.control.close()
        self.probe.close()


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    data = tmp_path_factory.mktemp("fuzz-broker") / "data"
    b = BrokerProcess(data)
    b.start()
    t = Target(b)
    t.refresh_world()
    yield t
    t.close()
    b.stop()


def _describe(api_key: int, api_version: int, req: object) -> str:
    text = repr(req)
    return f"api {api_key} v{api_version}: {text[:1500]}"


def _expects_answer(api_key: int, req: object) -> bool:
    return not (api_key == 0 and getattr(req, "acks", None) == 0)


def run_valid(t: Target, api_key: int, api_version: int, req: object) -> None:
    cid = t.probe.next_id()
    outcome, got = t.probe.exchange(api_key, api_version,
                                    wf.frame(api_key, api_version, cid, req), cid,
                                    8.0 if api_key in REBALANCE else None)
    what = _describe(api_key, api_version, req)
    t.assert_log_clean(what)
    if outcome == "waiting" and api_key in REBALANCE:
        return
    assert outcome == "answered", f"valid-shaped request was {outcome}: {what}"
    if _expects_answer(api_key, req):
        wf.check_response(api_key, api_version, cid, got)
    else:
        assert got == [], f"acks=0 produce was answered: {what}"


def run_mutated(t: Target, api_key: int, api_version: int, data: bytes, cid: int) -> None:
    # A damaged max_wait may make a long poll wait for days: give those 3 s, then drop them.
    outcome, got = t.probe.exchange(api_key, api_version, data, cid,
                                    3.0 if api_key in LONG_POLL else None)
    what = f"api {api_key} v{api_version} damaged frame {data[:200].hex()}"
    t.assert_log_clean(what)
    if outcome == "waiting":
        assert api_key in LONG_POLL, f"no answer and no close within 15 s: {what}"
        return
    if got:
        wf.check_response(api_key, api_version, cid, got)


def test_the_fuzzed_versions_are_the_advertised_ones(target: Target) -> None:
    resp = target.control.call(18, 3, request(18, 3, client_software_name="wirefuzz",
                                              client_software_version="1"))
    advertised = [(k.api_key, v) for k in resp.api_keys
                  for v in range(k.min_version, k.max_version + 1)]
    assert sorted(advertised) == sorted(SERVED)


@pytest.mark.parametrize(("api_key", "api_version"), SERVED,
                         ids=[f"api{k}-v{v}" for k, v in SERVED])
def test_valid_and_damaged_requests(target: Target, api_key: int, api_version: int) -> None:
    target.refresh_world()

    @FAST
    @given(st.data())
    def check(data: st.DataObject) -> None:
        req = data.draw(wf.body(api_key, api_version), label="body")
        run_valid(target, api_key, api_version, req)
        cid = target.probe.next_id()
        encoded = wf.frame(api_key, api_version, cid, req)
        head = wf.header_size(api_key, api_version)
        for _ in range(2):
            bad = data.draw(wf.mutated(encoded, head), label="damaged")
            run_mutated(target, api_key, api_version, bad, cid)
        target.control_answers()

    check()
    assert target.broker.alive()


# ---------------------------------------------------------------------------------------------
# Acknowledgements on a live share session: random bodies rarely name a member with a session
# and acquired records, so this test sets that up for each example and fuzzes what is sent in
# it (offset ranges around and far beyond the acquired ones, any acknowledge types).

ACK_GROUP = "fuzz-acks"
_OFFSET = st.one_of(st.integers(-2, 40), st.sampled_from([2**31 - 1, 2**32, 2**62, 2**63 - 1,
                                                          -(2**63)]))
_ACK_BATCH = st.tuples(_OFFSET, st.one_of(st.integers(0, 8), _OFFSET),
                       st.lists(st.one_of(st.integers(0, 4), st.integers(-128, 127)),
                                max_size=4))


def _batches(m: object, acks: list[tuple[int, int, list[int]]]) -> tuple[object, ...]:
    """Batches from (first offset, last offset or a small length, types)."""
    return tuple(m.AcknowledgementBatch(  # type: ignore[attr-defined]
        first_offset=f, last_offset=min(f + d, 2**63 - 1) if 0 <= d <= 8 else d,
        acknowledge_types=tuple(t)) for f, d, t in acks)


def _session_fetch(c: RawClient, member: str, epoch: int, acks: list[tuple[int, int, list[int]]],
                   version: int = 2, group: str = ACK_GROUP) -> object:
    m = request_module(78, version)
    batches = _batches(m, acks)
    topics = (m.FetchTopic(topic_id=wf.WORLD.topic_id, partitions=(
        m.FetchPartition(partition_index=0, acknowledgement_batches=batches),)),)
    return request(78, version, group_id=group, member_id=member,
                   share_session_epoch=epoch, max_wait=timedelta(milliseconds=50), min_bytes=1,
                   max_bytes=1 << 20, max_records=20, batch_size=20, topics=topics,
                   forgotten_topics_data=(), share_acquire_mode=0, is_renew_ack=False)


def _acknowledge(member: str, epoch: int, acks: list[tuple[int, int, list[int]]],
                 version: int, renew: bool, group: str = ACK_GROUP) -> object:
    m = request_module(79, version)
    batches = _batches(m, acks)
    return request(79, version, group_id=group, member_id=member, share_session_epoch=epoch,
                   topics=(m.AcknowledgeTopic(topic_id=wf.WORLD.topic_id, partitions=(
                       m.AcknowledgePartition(partition_index=0,
                                              acknowledgement_batches=batches),)),),
                   is_renew_ack=renew)


def _produce_some(c: RawClient, n: int) -> None:
    m = request_module(0, 9)
    batch = make_batch([(None, b"r%d" % i) for i in range(n)])
    resp = c.call(0, 9, request(0, 9, transactional_id=None, acks=1,
                                timeout=timedelta(seconds=10), topic_data=(m.TopicProduceData(
                                    name=wf.TOPIC, partition_data=(m.PartitionProduceData(
                                        index=0, records=batch),)),)))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none


def test_acknowledgements_on_a_live_session(target: Target) -> None:
    target.refresh_world()
    set_group_configs(target.broker.bootstrap, ACK_GROUP, {"share.auto.offset.reset": "earliest"})
    produce(target.broker.bootstrap, wf.TOPIC, 40, partitions=1)

    @settings(FAST, max_examples=int(os.environ.get("SHOAL_FUZZ_ACK_EXAMPLES", "40")))
    @given(st.lists(_ACK_BATCH, min_size=1, max_size=3), st.sampled_from(["fetch", "ack"]),
           st.sampled_from([1, 2]), st.booleans())
    def check(acks: list[tuple[int, int, list[int]]], rpc: str, version: int,
              renew: bool) -> None:
        member = str(uuid.uuid4())[:20]
        _produce_some(target.control, 5)  # accepted records are gone; keep some to acquire
        with RawClient(target.broker.bootstrap, timeout=15) as c:
            opened = c.call(78, 2, _session_fetch(c, member, 0, []))
            assert opened.error_code == ErrorCode.none, opened
            if rpc == "fetch":
                req = _session_fetch(c, member, 1, acks, version)
                api_key = 78
            else:
                req = _acknowledge(member, 1, acks, version, renew and version >= 2)
                api_key = 79
            run_valid(target, api_key, version, req)
        # The session's connection is gone (its records are released); the broker still serves.
        target.control_answers()

    check()
    assert target.broker.alive()


# ---------------------------------------------------------------------------------------------
# Share-group sequences: single requests cannot reach states that need an order (a member with
# a session whose group is then deleted, offsets altered under acquired records, ...). Each
# example runs a random sequence of share-group operations on a group of its own with three
# members, each on its own connection; every answer must be well-formed and the log clean.

_EPOCH = st.one_of(st.sampled_from(["current"] * 6 + [0, -1]), st.sampled_from(["current"] * 6 + [0, -1]),
                   st.integers(-2, 5))
_STEP = st.one_of(
    st.tuples(st.just("heartbeat"), st.integers(0, 2), _EPOCH),
    st.tuples(st.just("fetch"), st.integers(0, 2), _EPOCH, st.lists(_ACK_BATCH, max_size=2)),
    st.tuples(st.just("ack"), st.integers(0, 2), _EPOCH, st.lists(_ACK_BATCH, max_size=2)),
    st.tuples(st.just("produce"), st.integers(1, 5)),
    st.tuples(st.just("reconnect"), st.integers(0, 2)),
    st.tuples(st.just("alter_offsets"), st.integers(0, 3), _OFFSET),
    st.tuples(st.just("delete_offsets")),
    st.tuples(st.just("describe")),
    st.tuples(st.just("delete_group")),
)


class _Members:
    """Three members of one share group: connection, member epoch, session epoch each."""

    def __init__(self, bootstrap: str, group: str) -> None:
        self.bootstrap, self.group = bootstrap, group
        self.ids = [f"{group[-8:]}-m{i}" for i in range(3)]
        self.conns = [RawClient(bootstrap, timeout=15) for _ in self.ids]
        self.member_epoch = [0, 0, 0]
        self.session_epoch = [0, 0, 0]

    def close(self) -> None:
        for c in self.conns:
            c.close()


def _pick(epoch: object, current: int) -> int:
    return current if epoch == "current" else int(epoch)  # type: ignore[call-overload]


def _run_step(t: Target, ms: _Members, step: tuple) -> None:  # type: ignore[type-arg]
    kind, group = step[0], ms.group
    calls: list[tuple[RawClient, int, int, object]] = []
    if kind == "heartbeat":
        i, e = step[1], _pick(step[2], ms.member_epoch[step[1]])
        calls.append((ms.conns[i], 76, 1, request(
            76, 1, group_id=group, member_id=ms.ids[i], member_epoch=e, rack_id=None,
            subscribed_topic_names=(wf.TOPIC,) if e == 0 else None)))
    elif kind in ("fetch", "ack"):
        i, e = step[1], _pick(step[2], ms.session_epoch[step[1]])
        acks = step[3] if e != 0 or kind == "ack" else []
        req = (_session_fetch(ms.conns[i], ms.ids[i], e, acks, group=group) if kind == "fetch"
               else _acknowledge(ms.ids[i], e, acks, 2, False, group=group))
        calls.append((ms.conns[i], 78 if kind == "fetch" else 79, 2, req))
    elif kind == "produce":
        _produce_some(t.control, step[1])
    elif kind == "reconnect":
        ms.conns[step[1]].close()
        ms.conns[step[1]] = RawClient(ms.bootstrap, timeout=15)
    elif kind == "alter_offsets":
        m = request_module(91, 0)
        calls.append((t.control, 91, 0, request(91, 0, group_id=group, topics=(
            m.AlterShareGroupOffsetsRequestTopic(topic_name=wf.TOPIC, partitions=(
                m.AlterShareGroupOffsetsRequestPartition(partition_index=step[1],
                                                         start_offset=step[2]),)),))))
    elif kind == "delete_offsets":
        m = request_module(92, 0)
        calls.append((t.control, 92, 0, request(92, 0, group_id=group, topics=(
            m.DeleteShareGroupOffsetsRequestTopic(topic_name=wf.TOPIC),))))
    elif kind == "describe":
        m = request_module(90, 1)
        calls.append((t.control, 77, 1, request(77, 1, group_ids=(group,),
                                                 include_authorized_operations=True)))
        calls.append((t.control, 90, 1, request(90, 1, groups=(
            m.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None),))))
    else:
        calls.append((t.control, 42, 2, request(42, 2, groups_names=(group,))))
    for conn, api_key, version, req in calls:
        resp = conn.call(api_key, version, req)  # decodes it and checks the correlation id
        t.assert_log_clean(f"{step}: {_describe(api_key, version, req)}")
        if getattr(resp, "error_code", None) == ErrorCode.none:
            if kind == "heartbeat":
                i = step[1]
                ms.member_epoch[i] = resp.member_epoch  # type: ignore[attr-defined]
            elif kind in ("fetch", "ack"):
                i, e = step[1], _pick(step[2], ms.session_epoch[step[1]])
                ms.session_epoch[i] = 0 if e == -1 else e + 1


def test_share_group_sequences(target: Target) -> None:
    target.refresh_world()
    counter = iter(range(10**6))

    @settings(FAST, max_examples=int(os.environ.get("SHOAL_FUZZ_SEQ_EXAMPLES", "25")))
    @given(st.lists(_STEP, min_size=3, max_size=14))
    def check(steps: list[tuple]) -> None:  # type: ignore[type-arg]
        group = f"fuzz-seq-{next(counter)}-{uuid.uuid4().hex[:8]}"
        set_group_configs(target.broker.bootstrap, group, {"share.auto.offset.reset": "earliest"})
        ms = _Members(target.broker.bootstrap, group)
        try:
            for step in steps:
                _run_step(target, ms, step)
        finally:
            ms.close()
        target.control_answers()

    check()
    assert target.broker.alive()


# ---------------------------------------------------------------------------------------------
# Inputs the fuzzer found crashing a handler, kept as fixed cases (table-driven, with ids).


def _metadata_unnamed(version: int) -> object:
    m = request_module(3, version)
    return request(3, version, topics=(m.MetadataRequestTopic(name=None, topic_id=None),),
                   allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                   include_topic_authorized_operations=False)


FOUND = {
    # Metadata v10/v11 listing a topic with neither name nor id: the response could not encode
    # a null name ("could not encode a response"), and the connection was dropped.
    "metadata-v10-null-name": (3, 10, lambda: _metadata_unnamed(10)),
    "metadata-v11-null-name": (3, 11, lambda: _metadata_unnamed(11)),
    "metadata-v12-null-name": (3, 12, lambda: _metadata_unnamed(12)),
}


@pytest.mark.parametrize("name", list(FOUND))
def test_found_by_fuzzing(target: Target, name: str) -> None:
    api_key, api_version, build = FOUND[name]
    run_valid(target, api_key, api_version, build())
    target.control_answers()


# ---------------------------------------------------------------------------------------------
# make test-slow: black-box soak, several connections, pipelined, raw random frames too


def _random_frame(rng: random.Random, cid: int) -> bytes:
    key, version = rng.choice(SERVED)
    if rng.random() < 0.3:
        key, version = rng.randrange(-5, 120), rng.randrange(-2, 20)
    header = struct.pack(">hhih", key, version, cid, 3) + b"rnd"
    if rng.random() < 0.5:
        header += b"\x00"
    body = rng.randbytes(rng.randrange(0, 300))
    if rng.random() < 0.3:
        at = rng.randrange(0, len(body) + 1)
        body = body[:at] + rng.choice(wf.INFLATED) + body[at:]
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def _pipeline_worker(bootstrap: str, seed: int, frames: int, errors: list[str]) -> None:
    """Send ``frames`` raw random frames pipelined in bursts; reconnect whenever closed."""
    rng = random.Random(seed)
    host, _, port = bootstrap.rpartition(":")
    sent = 0
    while sent < frames:
        try:
            with socket.create_connection((host, int(port)), timeout=5) as s:
                count = rng.randrange(1, 20)
                burst = b"".join(_random_frame(rng, sent + i) for i in range(count))
                sent += count
                s.sendall(burst)
                s.settimeout(0.5)
                try:
                    while s.recv(65536):
                        pass
                except (TimeoutError, ConnectionError):
                    pass
        except OSError as exc:  # the broker must keep accepting
            errors.append(f"seed {seed}: {exc!r}")
            return


@pytest.mark.slow
def test_black_box_fuzz_soak(target: Target) -> None:
    soak = settings(FAST, max_examples=int(os.environ.get("SHOAL_FUZZ_SOAK_EXAMPLES", "10000")))
    target.refresh_world()
    errors: list[str] = []
    workers = [threading.Thread(target=_pipeline_worker,
                                args=(target.broker.bootstrap, seed, 4000, errors))
               for seed in range(4)]
    for w in workers:
        w.start()
    try:
        @soak
        @given(st.sampled_from(SERVED), st.data())
        def check(api: tuple[int, int], data: st.DataObject) -> None:
            api_key, api_version = api
            req = data.draw(wf.body(api_key, api_version), label="body")
            run_valid(target, api_key, api_version, req)
            cid = target.probe.next_id()
            encoded = wf.frame(api_key, api_version, cid, req)
            bad = data.draw(wf.mutated(encoded, wf.header_size(api_key, api_version)))
            run_mutated(target, api_key, api_version, bad, cid)
            target.control_answers()

        check()
    finally:
        for w in workers:
            w.join(120)
    assert not errors, errors
    time.sleep(0.5)
    target.control_answers()
    target.assert_log_clean("the raw pipelined frames")
