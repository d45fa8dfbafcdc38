"""The recovery phases of the cluster bench (``bench/cluster.py``, phases 3 and 4).

``recovery``: a probe share consumer (``probe_consumer_worker``, in a process of its own)
reads a 12-partition topic; one broker is killed with kill -9 and started again at once; the
figures are the seconds from the kill until the restarted broker answers Metadata, a surviving
broker names it leader of its partitions again, a record produced to each of them is
acknowledged (acks=all) and delivered by the probe. ``controller_failover``: kill -9 of the
controller's broker; seconds until another controller is named and a topic can be created and
is led on every partition; the broker is started again afterwards. Every wait is bounded.
"""

from __future__ import annotations

import queue
import time
import traceback
from typing import Any

from bench import clients
from bench.cluster_procs import T, Member, group_coordinator, metadata, until
from bench.procs import CTX, join_processes, start_process
from bench.scenarios import Settings


def probe_consumer_worker(p: dict[str, Any], stop: Any, out: Any) -> None:
    """A ShareConsumer (explicit ACCEPT) that reports (partition, value, monotonic time) of every
    record whose value starts with ``probe-``. Short reconnect backoffs, so that the figure is
    the broker's recovery rather than librdkafka's backoff (at most 10 s by default)."""
    clients._watch_parent()
    consumer = None
    try:
        from confluent_kafka import AcknowledgeType, ShareConsumer

        consumer = ShareConsumer({"bootstrap.servers": p["bootstrap"], "group.id": p["group"],
                                  "share.acknowledgement.mode": "explicit", "log_level": 3,
                                  "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200})
        consumer.subscribe([p["topic"]])
        while not stop.is_set():
            for msg in consumer.poll(0.1):
                if msg.error() is not None:
                    continue
                value = msg.value() or b""
                if value.startswith(b"probe-"):
                    out.put((msg.partition(), value, time.monotonic()))
                consumer.acknowledge(msg, AcknowledgeType.ACCEPT)
        consumer.close()
        consumer = None
    except Exception:  # noqa: BLE001 - reported to the parent
        out.put((-1, traceback.format_exc(limit=5).encode(), time.monotonic()))


def _wait_delivered(out: Any, want: set[tuple[int, bytes]], seen: dict[tuple[int, bytes], float],
                    timeout: float) -> float:
    """Read the probe consumer's reports until every (partition, value) in ``want`` came;
    returns the time of the last one."""
    deadline = time.monotonic() + timeout
    while not want <= seen.keys():
        try:
            part, value, t = out.get(timeout=max(0.05, deadline - time.monotonic()))
        except queue.Empty as exc:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(want - seen.keys())} probe records never delivered "
                                   f"within {timeout:.0f} s") from exc
            continue
        if part < 0:
            raise RuntimeError(f"probe consumer failed: {value.decode(errors='replace')}")
        seen.setdefault((part, value), t)
    return max(seen[k] for k in want)


def _produce_each(prod: Any, topic: str, parts: list[int], value: bytes, timeout: float) -> float:
    """Produce ``value`` to each partition (acks=all) until acknowledged; the time of the last
    acknowledgement."""
    acked: dict[int, float] = {}
    failed: list[int] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            acked[msg.partition()] = time.monotonic()
        else:
            failed.append(msg.partition())

    pending, deadline = list(parts), time.monotonic() + timeout
    while pending:
        if time.monotonic() > deadline:
            raise TimeoutError(f"produce to {topic} partitions {pending} not acknowledged")
        failed.clear()
        for part in pending:
            prod.produce(topic, value, partition=part, on_delivery=on_delivery)
        prod.flush(max(1.0, deadline - time.monotonic()))
        pending = [q for q in parts if q not in acked]
        if pending:
            time.sleep(0.05)
    return max(acked.values())


def recovery(settings: Settings, members: list[Member], partitions: int) -> dict[str, Any]:
    """kill -9 of a broker and its restart: seconds from the kill to its partitions served."""
    from confluent_kafka import Producer

    boots = [m.bootstrap for m in members]
    admin = clients.Admin(",".join(boots))
    topic, group = settings.topic("recovery"), f"bench-{settings.run_id}-recovery"
    admin.create_topic(topic, partitions)
    admin.set_group_configs(group, {"share.auto.offset.reset": "earliest"})
    admin.close()
    stop, out = CTX.Event(), CTX.Queue()
    proc = start_process(probe_consumer_worker, {"bootstrap": ",".join(boots), "group": group,
                                                 "topic": topic}, stop, out, name="probe")
    prod = Producer({"bootstrap.servers": ",".join(boots), "acks": "all", "linger.ms": 0,
                     "message.timeout.ms": 20_000, "reconnect.backoff.ms": 20,
                     "reconnect.backoff.max.ms": 200})
    seen: dict[tuple[int, bytes], float] = {}
    try:
        every = list(range(partitions))
        _produce_each(prod, topic, every, b"probe-before", T)
        _wait_delivered(out, {(p, b"probe-before") for p in every}, seen, T)
        controller, _, leaders = metadata(boots[0], [topic])
        coordinator = group_coordinator(boots[0], group)
        candidates = [m for m in members if m.node_id not in (controller, coordinator)] or \
            [m for m in members if m.node_id != controller]
        victim = candidates[-1]
        survivor = next(m for m in members if m is not victim)
        mine = sorted(p for p, leader in leaders[topic].items() if leader == victim.node_id)
        settings.log(f"  recovery: kill -9 of broker {victim.node_id} (leads partitions {mine}; "
                     f"controller {controller}, probe group coordinator {coordinator})")
        t_kill = time.monotonic()
        victim.kill9()
        victim.start(timeout=T)  # Metadata on its own port
        t_ready = time.monotonic()

        def led_again() -> bool:
            _, _, now = metadata(survivor.bootstrap, [topic])
            return all(now[topic][p] == victim.node_id for p in mine)

        until(f"broker {victim.node_id} leading its partitions again", led_again)
        t_led = time.monotonic()
        t_acked = _produce_each(prod, topic, mine, b"probe-after", T)
        t_delivered = _wait_delivered(out, {(p, b"probe-after") for p in mine}, seen, T)
        fig = {"victim": victim.node_id, "victim_partitions": mine, "controller": controller,
               "probe_group_coordinator": coordinator,
               "restarted_answering_metadata_s": round(t_ready - t_kill, 3),
               "leader_again_s": round(t_led - t_kill, 3),
               "produce_acked_s": round(t_acked - t_kill, 3),
               "share_delivered_s": round(t_delivered - t_kill, 3)}
        fig["served_again_s"] = max(fig["leader_again_s"], fig["produce_acked_s"],
                                    fig["share_delivered_s"])
        return fig
    finally:
        stop.set()
        join_processes([proc], 15)
        prod.flush(1)


def controller_failover(settings: Settings, members: list[Member]) -> dict[str, Any]:
    """kill -9 of the controller's broker: seconds to a new controller and a created topic."""
    from confluent_kafka.admin import AdminClient, NewTopic

    controller, _, _ = metadata(members[0].bootstrap)
    victim = next(m for m in members if m.node_id == controller)
    others = [m for m in members if m is not victim]
    settings.log(f"  controller failover: kill -9 of broker {controller} (the controller)")
    t_kill = time.monotonic()
    victim.kill9()

    def new_controller() -> int | None:
        cid, _, _ = metadata(others[0].bootstrap)
        return cid if cid not in (controller, -1) else None

    elected = until("a new controller", new_controller)
    t_elected = time.monotonic()
    topic = settings.topic("after-failover")
    admin = AdminClient({"bootstrap.servers": ",".join(m.bootstrap for m in others),
                         "reconnect.backoff.max.ms": 200})

    def created() -> bool:
        fut = admin.create_topics([NewTopic(topic, 4, 1)], operation_timeout=5,
                                  request_timeout=5)[topic]
        try:
            fut.result(10)
        except Exception as exc:  # noqa: BLE001 - TOPIC_ALREADY_EXISTS after a retry is fine
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
        _, _, leaders = metadata(others[0].bootstrap, [topic])
        return len(leaders.get(topic, {})) == 4 and all(x >= 0 for x in leaders[topic].values())

    until(f"topic {topic} created and led", created, every=0.1)
    t_created = time.monotonic()
    victim.start(timeout=T)
    t_back = time.monotonic()
    return {"old_controller": controller, "new_controller": elected,
            "new_controller_s": round(t_elected - t_kill, 3),
            "topic_created_s": round(t_created - t_kill, 3),
            "old_controller_restarted_s": round(t_back - t_created, 3)}
