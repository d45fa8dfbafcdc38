"""The chaos soak's end-of-run checks: what the logs hold against what clients were told.

``read_log`` reads a whole topic as a fresh client would; ``violations`` returns every broken
promise as a sentence (empty when all hold); ``longest_gaps`` is the unavailability report.
"""

from __future__ import annotations

import time
from typing import Any
from collections import Counter

from confluent_kafka import Consumer, KafkaException, TopicPartition

from protocol import codec
from tests.chaos.load import CONSUMER_GROUP, EOS_GROUP, IN, OUT, SHARE_GROUP, Journal
from tests.integration.cluster.probe import metadata
from tests.integration.rawclient import RawClient

DELIVERY_LIMIT = 10  # the share group's share.delivery.count.limit (set by the test)


def read_log(bootstrap: str, topic: str, partitions: int, committed_only: bool = False,
             timeout: float = 120.0) -> dict[tuple[int, int], str]:
    """Every record of ``topic`` as {(partition, offset): value}, read from the start up to the
    end each partition has when the read begins (its last stable offset when
    ``committed_only``: aborted records are skipped). Fails if the end is not reached in
    ``timeout`` seconds."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"chaos-reader-{topic}",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "isolation.level": "read_committed" if committed_only else "read_uncommitted"})
    out: dict[tuple[int, int], str] = {}
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        pending = set(range(partitions))
        deadline = time.monotonic() + timeout
        while pending:
            assert time.monotonic() < deadline, \
                f"{topic} partitions {sorted(pending)} not read to their end in {timeout:.0f} s"
            for m in c.consume(500, 0.5):
                if m.error() is None:
                    out[(m.partition(), m.offset())] = m.value().decode()
                elif m.error().code() == -191:  # _PARTITION_EOF: this partition is read
                    pending.discard(m.partition())
    finally:
        c.close()
    return out


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The offsets ``group`` has committed for ``topic`` (-1001 when none), as a client reads
    them (a stable read: a pending transactional commit is waited for)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], 30)
    except KafkaException as e:
        raise AssertionError(f"reading {group}'s committed offsets failed ({e}); its "
                             f"coordinator says: {stable_fetch(bootstrap, group, topic, partitions)}"
                             ) from e
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got}


def committed_or_why(bootstrap: str, group: str, topic: str,
                     partitions: int) -> dict[int, int] | str:
    """``committed``, or why it could not be read yet (a sentence: e.g. the group's open
    transaction keeps its offsets unstable)."""
    try:
        return committed(bootstrap, group, topic, partitions)
    except AssertionError as e:
        return str(e)


def _ask_coordinator(bootstrap: str, group: str, api_key: int, version: int,
                     request: object) -> tuple[int, Any] | str:
    """(node, answer) of ``group``'s coordinator to ``request``; while it cannot be asked, why
    (a sentence)."""
    fc = codec.request_module(10, 4)
    try:
        with RawClient(bootstrap.split(",")[0]) as c:
            (coord,) = c.call(10, 4, fc.FindCoordinatorRequest(
                key_type=0, coordinator_keys=(group,))).coordinators
        if coord.error_code != 0:
            return f"FindCoordinator: error {coord.error_code}"
        with RawClient(f"{coord.host}:{coord.port}") as c:
            return int(coord.node_id), c.call(api_key, version, request)
    except (OSError, EOFError, ConnectionError) as e:
        return f"coordinator unreachable: {e!r}"


def stable_fetch(bootstrap: str, group: str, topic: str, partitions: int) -> str:
    """What ``group``'s coordinator answers a stable OffsetFetch (v9, RequireStable) with: its
    node, the group's error and each partition's (offset, error)."""
    of = codec.request_module(9, 9)
    got = _ask_coordinator(bootstrap, group, 9, 9, of.OffsetFetchRequest(
        require_stable=True, groups=(of.OffsetFetchRequestGroup(
            group_id=group, member_id=None, member_epoch=-1, topics=(of.OffsetFetchRequestTopics(
                name=topic, partition_indexes=tuple(range(partitions))),)),)))
    if isinstance(got, str):
        return got
    node, resp = got
    (g,) = resp.groups
    parts = {p.partition_index: (int(p.committed_offset), int(p.error_code))
             for t in g.topics for p in t.partitions}
    return f"broker {node}: group error {g.error_code}, partitions {parts}"


def ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's high watermark."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-ends"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in range(partitions)}
    finally:
        c.close()


def share_offsets(bootstrap: str, group: str, topic: str,
                  partitions: int) -> dict[int, tuple[int, int]] | str:
    """Per partition, (start offset, lag) of the share group as its coordinator describes it
    (DescribeShareGroupOffsets v1; the lag counts records still to be delivered or
    acknowledged); while the coordinator cannot say, why (a sentence)."""
    desc = codec.request_module(90, 1)
    got = _ask_coordinator(bootstrap, group, 90, 1, desc.DescribeShareGroupOffsetsRequest(
        groups=(desc.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=(
            desc.DescribeShareGroupOffsetsRequestTopic(
                topic_name=topic, partitions=tuple(range(partitions))),)),)))
    if isinstance(got, str):
        return got
    _node, resp = got
    (g,) = resp.groups
    if g.error_code != 0:
        return f"DescribeShareGroupOffsets: group error {g.error_code}"
    offsets = {p.partition_index: (int(p.start_offset), int(p.lag))
               for t in g.topics for p in t.partitions if p.error_code == 0}
    if len(offsets) < partitions:
        return f"DescribeShareGroupOffsets: partition errors {g.topics}"
    return offsets


def stable_ends(brokers: dict[int, str], topic: str, partitions: int) -> dict[int, object]:
    """Each partition's last stable offset (ListOffsets latest, read_committed) as its leader
    answers it (``brokers``: node id -> address); why not, in words, when it cannot. For a
    diagnosis: a read_committed reader stops there."""
    m = codec.request_module(2, 7)
    seen = metadata(next(iter(brokers.values())), [topic])
    out: dict[int, object] = {}
    for p in range(partitions):
        leader = -1 if seen is None else seen.leaders.get((topic, p), -1)
        if leader not in brokers:
            out[p] = f"no leader ({leader})"
            continue
        try:
            with RawClient(brokers[leader]) as c:
                resp = c.call(2, 7, m.ListOffsetsRequest(replica_id=-1, isolation_level=1, topics=(
                    m.ListOffsetsTopic(name=topic, partitions=(
                        m.ListOffsetsPartition(partition_index=p, timestamp=-1),)),)))
            (r,) = resp.topics[0].partitions
            out[p] = int(r.offset) if r.error_code == 0 else f"error {r.error_code}"
        except (OSError, EOFError, ConnectionError) as e:
            out[p] = repr(e)
    return out


def violations(j: Journal, bootstrap: str, in_partitions: int,
               out_partitions: int) -> list[str]:
    """Every invariant of the soak that does not hold, as a sentence with examples."""
    bad: list[str] = []
    log_in = read_log(bootstrap, IN, in_partitions)
    values = Counter(log_in.values())

    def some(items: object) -> str:
        return str(sorted(items)[:5])  # type: ignore[call-overload]

    wrong = {v: at for v, at in j.acked.items() if log_in.get(at) != v}
    if wrong:
        bad.append(f"{len(wrong)} acknowledged produces are not at their acknowledged offset "
                   f"(lost or overwritten), e.g. {some(wrong.items())}")
    twice = {v for v, n in values.items() if n > 1}
    if twice:
        bad.append(f"{len(twice)} records are in {IN} twice (idempotent producer), "
                   f"e.g. {some(twice)}")
    never = set(values) - j.share_accept_sent
    if never:
        bad.append(f"{len(never)} records were never delivered to the share group and "
                   f"ACCEPTed, e.g. {some(never)}")
    share = share_offsets(bootstrap, SHARE_GROUP, IN, in_partitions)
    if isinstance(share, str) or any(lag != 0 for _, lag in share.values()):
        bad.append(f"{SHARE_GROUP} still has records to deliver: (start offset, lag) per "
                   f"partition {share}")
    archived = {v: c for v, c in j.share_deliveries.items() if max(c) >= DELIVERY_LIMIT}
    if archived:
        bad.append(f"{len(archived)} records reached the delivery count limit (archived "
                   f"unless the last ACCEPT held), e.g. {some(archived.items())}")
    if j.share_after_confirm:
        bad.append(f"{len(j.share_after_confirm)} deliveries of records whose ACCEPT was "
                   f"confirmed, e.g. {j.share_after_confirm[:5]}")
    down = {v: c for v, c in j.share_deliveries.items() if c != sorted(c)}
    if down:
        bad.append(f"delivery counts decreased for {len(down)} records, e.g. "
                   f"{some(down.items())}")
    unseen = set(values) - j.group_seen
    if unseen:
        bad.append(f"{len(unseen)} records never reached the consumer group, "
                   f"e.g. {some(unseen)}")
    end = ends(bootstrap, IN, in_partitions)
    kept = committed(bootstrap, CONSUMER_GROUP, IN, in_partitions)
    for p, offset in sorted(j.group_commits.items()):
        if kept[p] < offset:
            bad.append(f"{CONSUMER_GROUP} committed {offset} on {IN}-{p} (confirmed) but "
                       f"{kept[p]} is what is kept")
    eos_at = committed(bootstrap, EOS_GROUP, IN, in_partitions)
    if eos_at != end:
        bad.append(f"{EOS_GROUP} committed {eos_at}, not the end of {IN} {end}")
    out = Counter(read_log(bootstrap, OUT, out_partitions, committed_only=True).values())
    dup = {v for v, n in out.items() if n > 1}
    missing = set(values) - set(out)
    extra = set(out) - set(values)
    if dup or missing or extra:
        bad.append(f"the EOS output does not hold each input exactly once: {len(dup)} twice "
                   f"(e.g. {some(dup)}), {len(missing)} missing (e.g. {some(missing)}), "
                   f"{len(extra)} not in the input (e.g. {some(extra)})")
    return bad


def longest_gaps(j: Journal, since: float, until: float) -> dict[str, float]:
    """Per partition of IN, the longest time in [since, until] with no acknowledged produce:
    how long the partition was unavailable to the producer at worst (seconds)."""
    out = {}
    for p, times in sorted(j.ack_times.items()):
        marks = [since] + sorted(t for t in times if since <= t <= until) + [until]
        out[f"{IN}-{p}"] = round(max(b - a for a, b in zip(marks, marks[1:])), 2)
    return out
