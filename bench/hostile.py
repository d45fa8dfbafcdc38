"""Scenario (h): hostile load (issue 12, sections 1, 4 and 8).

A fresh Shoal broker of its own serves a control pair (a ``confluent_kafka`` producer and a
Fetch-based ``confluent_kafka`` consumer in one process, one record round trip every 20 ms)
while attack processes, built on raw sockets so that the bench's own event loop is never the
bottleneck, do the following one after the other, each holding what it opened until the end:

1. ``flood``: 3,000 idle connections;
2. ``half_sent``: 200 connections that send the size prefix of a 50 MB frame and 1 KiB of it,
   then stall;
3. ``slow_reader``: one connection pipelining 1,000 Fetch requests (1 MiB each) that never reads;
4. ``wide_fetch``: a Fetch listing 100,000 partitions (answered or timed out);
5. ``wide_share_fetch``: a ShareFetch opening a share session with 2,000,000 partitions (a
   12 MB frame; answered or timed out), then the session is closed (epoch -1);
6. ``forged_batch``: a Produce of a 69-byte batch that claims 2^31-1 records (the log end offset
   it leaves is reported);
7. ``element_counts`` (issue 25): every array of every advertised API at 30,000 entries, one
   request after the other (``bench/element_counts.py``; about 90 requests of up to 2 MB);
8. ``share_load``: 10 share groups of 200 members (ShareGroupHeartbeat from raw clients) and
   one share session each (ShareFetch, epoch 0): 2,000 sessions. Held means every join and
   every session open succeeded and, at the end, every member's heartbeat and every session's
   epoch-1 fetch still succeed.

Counts scale with ``--scale`` (with small minimums). Figures: the control pair's round trip
p50/p99 over the attack (and per step), the broker's RSS growth (peak during the attack minus
the baseline before it), whether a Metadata round trip succeeds at the end, each step's
outcome. Targets: control p99 <= 100 ms, RSS growth <= 200 MB, broker serving at the end.

Every step has a timeout; the attack processes close their sockets when told to stop and are
terminated if they do not; the broker is stopped in a ``finally`` block.
"""

from __future__ import annotations

import datetime
import io
import json
import os
import queue
import resource
import selectors
import signal
import socket
import struct
import tempfile
import time
import traceback
import uuid
from array import array
from pathlib import Path
from typing import Any

from bench.procs import (
    CTX,
    Monitor,
    ShoalBroker,
    join_processes,
    metadata_ok,
    recv_exact,
    remove_tree,
    rss_bytes,
    start_process,
)

CONTROL_RATE = 50  # round trips per second
CONTROL_TIMEOUT_S = 10.0  # a control record not back within this counts as lost
BASELINE_S = 3.0
HOLD_S = 3.0
HEARTBEAT_S = 5.0
STEP_TIMEOUT_S = 90.0
HALF_FRAME_SIZE = 50 * 1024 * 1024
FORGED_COUNT = 2**31 - 1
TARGET_P99_MS = 100.0
TARGET_RSS_MB = 200.0
FULL = {"flood": 3000, "half_sent": 200, "slow_reader": 1000, "wide_fetch": 100_000,
        "wide_share_fetch": 2_000_000, "element_counts": 30_000, "members": 200, "groups": 10}
MINIMUM = {"flood": 10, "half_sent": 2, "slow_reader": 10, "wide_fetch": 100,
           "wide_share_fetch": 1000, "element_counts": 300, "members": 2, "groups": 10}
CLIENT_ID = b"shoal-bench-hostile"


def counts(scale: float) -> dict[str, int]:
    return {k: max(MINIMUM[k], int(v * min(scale, 1.0))) if k != "groups" else v
            for k, v in FULL.items()}


def raise_nofile() -> tuple[int, int]:
    """Raise this process's open-file soft limit to the hard limit; returns (soft, hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)


# ---------------------------------------------------------------------------------------------
# Raw request frames. Wide requests are written directly (the kio writer would take minutes for
# two million partitions); the smoke test checks them against kio's encoding of small ones.


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _cstr(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    b = s.encode()
    return _uvarint(len(b) + 1) + b


def _frame(api_key: int, version: int, correlation_id: int, body: bytes | bytearray,
           flexible: bool = True) -> bytes:
    head = struct.pack(">hhih", api_key, version, correlation_id, len(CLIENT_ID)) + CLIENT_ID
    if flexible:
        head += b"\x00"
    return struct.pack(">i", len(head) + len(body)) + head + body


def wide_share_fetch_frame(correlation_id: int, group: str, member: str, topic_id: uuid.UUID,
                           partitions: int) -> bytes:
    """ShareFetch v1 opening a session (epoch 0) on ``partitions`` partitions of one topic."""
    buf = io.BytesIO()
    buf.write(_cstr(group) + _cstr(member))
    # epoch, max_wait, min_bytes, max_bytes, max_records, batch_size
    buf.write(struct.pack(">iiiiii", 0, 0, 1, 1 << 20, 500, 500))
    buf.write(_uvarint(2) + topic_id.bytes + _uvarint(partitions + 1))
    one = bytearray(6)
    one[4:6] = b"\x01\x00"  # no acknowledgement batches, no tagged fields
    pack = struct.Struct(">i").pack_into
    chunk = bytearray()
    for p in range(partitions):
        pack(one, 0, p)
        chunk += one
        if len(chunk) > 1 << 20:
            buf.write(chunk)
            chunk = bytearray()
    buf.write(chunk)
    buf.write(b"\x00" + b"\x01" + b"\x00")  # topic tags, no forgotten topics, request tags
    return _frame(78, 1, correlation_id, buf.getvalue())


def close_share_session_frame(correlation_id: int, group: str, member: str) -> bytes:
    body = _cstr(group) + _cstr(member) + struct.pack(">iiiiii", -1, 0, 0, 0, 0, 0)
    return _frame(78, 1, correlation_id, body + b"\x01\x01\x00")


def wide_fetch_frame(correlation_id: int, topic: str, partitions: int, max_bytes: int = 1 << 20,
                     partition_max_bytes: int = 1 << 20) -> bytes:
    """Fetch v12 (no session, no wait) of ``partitions`` partitions of one topic from offset 0."""
    buf = io.BytesIO()
    buf.write(struct.pack(">iiiibii", -1, 0, 1, max_bytes, 0, 0, -1))
    buf.write(_uvarint(2) + _cstr(topic) + _uvarint(partitions + 1))
    entry = struct.Struct(">iiqiqib")
    for p in range(partitions):
        buf.write(entry.pack(p, -1, 0, -1, -1, partition_max_bytes, 0))
    buf.write(b"\x00" + b"\x01" + _cstr("") + b"\x00")  # topic tags, forgotten, rack, tags
    return _frame(1, 12, correlation_id, buf.getvalue())


def forged_batch(count: int = FORGED_COUNT) -> bytes:
    """A 69-byte v2 batch with one real record that claims ``count`` records (valid CRC)."""
    import crc32c

    record = b"\x00\x00\x00\x01\x02x\x00"  # attributes, ts delta, offset delta, key -1, "x", 0 headers
    records = _uvarint(len(record) * 2) + record  # the record length is a zig-zag varint
    after_crc = struct.pack(">hiqqqhii", 0, count - 1, 0, 0, -1, -1, -1, count) + records
    crc = crc32c.crc32c(after_crc)
    head = struct.pack(">qiibI", 0, 4 + 1 + 4 + len(after_crc), 0, 2, crc)
    return head + after_crc


def _kio_frame(api_key: int, version: int, correlation_id: int, **fields: Any) -> bytes:
    from protocol.codec import encode_request, request_module
    from protocol.messages import make

    m = request_module(api_key, version)
    cls = next(getattr(m, n) for n in dir(m) if n.endswith("Request")
               and getattr(getattr(m, n), "__module__", "") == m.__name__)
    return encode_request(api_key, version, correlation_id, CLIENT_ID.decode(),
                          make(cls, **fields))


def _entity(api_key: int, version: int, type_name: str, **fields: Any) -> Any:
    from protocol.codec import request_module
    from protocol.messages import make

    return make(getattr(request_module(api_key, version), type_name), **fields)


def forged_produce_frame(correlation_id: int, topic: str) -> bytes:
    part = _entity(0, 9, "PartitionProduceData", index=0, records=forged_batch())
    data = _entity(0, 9, "TopicProduceData", name=topic, partition_data=(part,))
    return _kio_frame(0, 9, correlation_id, transactional_id=None, acks=1,
                      timeout=datetime.timedelta(seconds=10), topic_data=(data,))


def heartbeat_frame(correlation_id: int, group: str, member: str, epoch: int,
                    topics: tuple[str, ...] | None) -> bytes:
    return _kio_frame(76, 1, correlation_id, group_id=group, member_id=member,
                      member_epoch=epoch, rack_id=None, subscribed_topic_names=topics)


def share_fetch_frame(correlation_id: int, group: str, member: str, epoch: int,
                      topic_id: uuid.UUID) -> bytes:
    part = _entity(78, 1, "FetchPartition", partition_index=0, acknowledgement_batches=())
    topic = _entity(78, 1, "FetchTopic", topic_id=topic_id, partitions=(part,))
    return _kio_frame(78, 1, correlation_id, group_id=group, member_id=member,
                      share_session_epoch=epoch, max_wait=datetime.timedelta(0), min_bytes=1,
                      max_bytes=1 << 16, max_records=1, batch_size=1,
                      topics=(topic,) if epoch == 0 else (), forgotten_topics_data=())


def list_offsets_frame(correlation_id: int, topic: str) -> bytes:
    part = _entity(2, 7, "ListOffsetsPartition", partition_index=0, current_leader_epoch=-1,
                   timestamp=-1)
    t = _entity(2, 7, "ListOffsetsTopic", name=topic, partitions=(part,))
    return _kio_frame(2, 7, correlation_id, replica_id=-1, isolation_level=0, topics=(t,))


def _code(code: Any) -> str:
    """An error code's name (``none``, ``share_session_limit_reached``, ...)."""
    return str(getattr(code, "name", code))


def decode(api_key: int, version: int, frame: bytes) -> Any:
    from protocol.codec import decode_response

    return decode_response(api_key, version, frame)[1]


# ---------------------------------------------------------------------------------------------
# Socket helpers (blocking, every operation bounded)


def _connect(addr: tuple[str, int], timeout: float = 10.0) -> socket.socket:
    s = socket.create_connection(addr, timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _read_frame(s: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exact(s, 4))
    return recv_exact(s, size)


def _call(s: socket.socket, api_key: int, version: int, frame: bytes) -> Any:
    s.sendall(frame)
    return decode(api_key, version, _read_frame(s))


def _close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        try:
            s.close()
        except OSError:
            pass
    socks.clear()


# ---------------------------------------------------------------------------------------------
# The attack process: one per step, reports on ``out`` when its load is in place, then holds it
# until ``stop`` is set (or ``hold_timeout`` passes) and closes everything.


def attack_worker(kind: str, p: dict[str, Any], out: Any, stop: Any) -> None:
    from bench.clients import _watch_parent

    _watch_parent()
    raise_nofile()
    socks: list[socket.socket] = []
    addr = (p["host"], p["port"])
    t0 = time.monotonic()
    try:
        res: dict[str, Any] = {"ok": True, "kind": kind}
        if kind in ("flood", "half_sent"):
            # A broker with connection limits may refuse some: counted, not an error.
            prefix = struct.pack(">i", HALF_FRAME_SIZE) + b"\x00" * 1024
            refused: list[str] = []
            opened = 0
            deadline = time.monotonic() + p["timeout"]
            for _ in range(p["n"]):
                if time.monotonic() > deadline:
                    refused.append(f"step timeout ({p['timeout']:.0f} s) reached")
                    break
                try:
                    s = _connect(addr)
                    socks.append(s)
                    if kind == "half_sent":
                        s.sendall(prefix)
                    opened += 1
                except OSError as exc:
                    refused.append(repr(exc))
            res.update(opened=opened, refused=len(refused),
                       first_refusal=refused[0] if refused else None)
        elif kind == "slow_reader":
            res.update(_slow_reader(addr, p, socks))
        elif kind == "wide_fetch":
            s = _connect(addr, p["timeout"])
            socks.append(s)
            frame = wide_fetch_frame(1, p["topic"], p["n"])
            res["frame_bytes"] = len(frame)
            res.update(_timed_call(s, 1, 12, frame, p["timeout"]))
        elif kind == "wide_share_fetch":
            res.update(_wide_share_fetch(addr, p, socks))
        elif kind == "forged_batch":
            s = _connect(addr, p["timeout"])
            socks.append(s)
            resp = _call(s, 0, 9, forged_produce_frame(1, p["topic"]))
            pr = resp.responses[0].partition_responses[0]
            res["error_code"] = int(pr.error_code)
            res["produce_error"] = _code(pr.error_code)
            res["base_offset"] = int(pr.base_offset)
            lo = _call(s, 2, 7, list_offsets_frame(2, p["topic"]))
            res["log_end_offset"] = int(lo.topics[0].partitions[0].offset)
        elif kind == "element_counts":
            from bench.element_counts import attack

            res.update(attack(addr, p["n"], p["timeout"]))
        elif kind == "share_load":
            res.update(_share_load(addr, p, socks, out, stop))
        else:
            raise ValueError(kind)
        res["seconds"] = round(time.monotonic() - t0, 3)
        out.put(res)
        if kind != "share_load":
            stop.wait(p.get("hold_timeout", 600))
    except Exception:  # noqa: BLE001 - reported to the parent
        out.put({"ok": False, "kind": kind, "error": traceback.format_exc(limit=4),
                 "seconds": round(time.monotonic() - t0, 3)})
    finally:
        _close_all(socks)


def _timed_call(s: socket.socket, api_key: int, version: int, frame: bytes,
                timeout: float) -> dict[str, Any]:
    t0 = time.monotonic()
    s.settimeout(timeout)
    try:
        s.sendall(frame)
        data = _read_frame(s)
    except TimeoutError:
        return {"answered": False, "outcome": f"no answer within {timeout:.0f} s"}
    except ConnectionError as exc:
        return {"answered": False, "outcome": f"connection closed ({exc})",
                "response_s": round(time.monotonic() - t0, 3)}
    out: dict[str, Any] = {"answered": True, "response_s": round(time.monotonic() - t0, 3),
                           "response_bytes": len(data) + 4}
    try:
        body = decode(api_key, version, data)
        out["outcome"] = f"answered, {_code(getattr(body, 'error_code', 'n/a'))}"
    except Exception as exc:  # noqa: BLE001
        out["outcome"] = f"answered, undecodable: {exc}"
    return out


def _slow_reader(addr: tuple[str, int], p: dict[str, Any],
                 socks: list[socket.socket]) -> dict[str, Any]:
    """Pipeline ``n`` 1 MiB Fetches of partition 0 without reading; stop sending when the
    broker stops reading (the send buffer stays full for 5 s)."""
    s = _connect(addr)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    socks.append(s)
    s.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(s, selectors.EVENT_WRITE)
    sent = 0
    pending = b""
    deadline = time.monotonic() + p["timeout"]
    try:
        while sent < p["n"] or pending:
            if not pending:
                pending = wide_fetch_frame(sent + 1, p["topic"], 1)
            if not sel.select(timeout=5.0) or time.monotonic() > deadline:
                break
            try:
                k = s.send(pending)
            except BlockingIOError:
                continue
            pending = pending[k:]
            if not pending:
                sent += 1
    finally:
        sel.close()
    return {"requests_sent": sent, "requests_wanted": p["n"]}


def _wide_share_fetch(addr: tuple[str, int], p: dict[str, Any],
                      socks: list[socket.socket]) -> dict[str, Any]:
    group, member = "hostile-wide", str(uuid.uuid4())
    s = _connect(addr, p["timeout"])
    socks.append(s)
    hb = _call(s, 76, 1, heartbeat_frame(1, group, member, 0, (p["topic"],)))
    t_build = time.monotonic()
    frame = wide_share_fetch_frame(2, group, member, uuid.UUID(p["topic_id"]), p["n"])
    res: dict[str, Any] = {"frame_bytes": len(frame), "heartbeat_error": _code(hb.error_code),
                           "build_s": round(time.monotonic() - t_build, 2)}
    res.update(_timed_call(s, 78, 1, frame, p["timeout"]))
    if res["answered"]:
        try:  # close the session and leave, so the session count of step 7 is its own
            s.settimeout(p["timeout"])
            closed = _call(s, 78, 1, close_share_session_frame(3, group, member))
            res["close_session_error"] = _code(closed.error_code)
            _call(s, 76, 1, heartbeat_frame(4, group, member, -1, None))
        except (OSError, ConnectionError) as exc:
            res["close_session_error"] = repr(exc)
    return res


def _heartbeat_round(conns: dict[str, socket.socket], members: dict[str, list[str]],
                     epochs: dict[tuple[str, str], int], errors: dict[str, int],
                     timeout: float) -> int:
    """One pipelined heartbeat per live member; returns how many were answered without error."""
    ok = 0
    for g, s in conns.items():
        s.settimeout(timeout)
        live = [m for m in members[g] if (g, m) in epochs]
        s.sendall(b"".join(heartbeat_frame(i, g, m, epochs[(g, m)], None)
                           for i, m in enumerate(live)))
        for m in live:
            r = decode(76, 1, _read_frame(s))
            if int(r.error_code) == 0:
                ok += 1
                epochs[(g, m)] = int(r.member_epoch)
            else:
                errors[_code(r.error_code)] = errors.get(_code(r.error_code), 0) + 1
    return ok


def _share_load(addr: tuple[str, int], p: dict[str, Any], socks: list[socket.socket],
                out: Any, stop: Any) -> dict[str, Any]:
    """``groups`` x ``members`` heartbeating members, one share session each, verified at the
    end. One connection per group (sessions belong to the connection that opened them)."""
    topic_id = uuid.UUID(p["topic_id"])
    groups = [f"hostile-share-{g}" for g in range(p["groups"])]
    members = {g: [str(uuid.uuid4()) for _ in range(p["members"])] for g in groups}
    epochs: dict[tuple[str, str], int] = {}
    conns = {g: _connect(addr, p["timeout"]) for g in groups}
    socks.extend(conns.values())
    joined = join_errors = opened = 0
    open_errors: dict[str, int] = {}
    t0 = time.monotonic()
    for g in groups:  # pipelined per group: send every join, then read every answer
        s = conns[g]
        s.sendall(b"".join(heartbeat_frame(i, g, m, 0, (p["topic"],))
                           for i, m in enumerate(members[g])))
        for m in members[g]:
            r = decode(76, 1, _read_frame(s))
            if int(r.error_code) == 0:
                joined += 1
                epochs[(g, m)] = int(r.member_epoch)
            else:
                join_errors += 1
    t_join = time.monotonic() - t0
    for g in groups:
        s = conns[g]
        s.sendall(b"".join(share_fetch_frame(i, g, m, 0, topic_id)
                           for i, m in enumerate(members[g])))
        for _ in members[g]:
            r = decode(78, 1, _read_frame(s))
            if int(r.error_code) == 0:
                opened += 1
            else:
                open_errors[_code(r.error_code)] = open_errors.get(_code(r.error_code), 0) + 1
    res: dict[str, Any] = {"groups": len(groups), "members_per_group": p["members"],
                           "members_joined": joined, "join_errors": join_errors,
                           "join_s": round(t_join, 2), "sessions_opened": opened,
                           "session_open_errors": open_errors,
                           "load_s": round(time.monotonic() - t0, 2)}
    out.put({"ok": True, "kind": "share_load", "phase": "loaded", **res})
    # Heartbeat every member every HEARTBEAT_S (as a real client would) until told to stop.
    beat_errors: dict[str, int] = {}
    while not stop.wait(HEARTBEAT_S):
        _heartbeat_round(conns, members, epochs, beat_errors, p["timeout"])
    # Verify: every member still heartbeats, every session still answers epoch 1.
    verify_errors: dict[str, int] = {}
    still_members = _heartbeat_round(conns, members, epochs, verify_errors, p["timeout"])
    still_sessions = 0
    for g in groups:
        s = conns[g]
        s.sendall(b"".join(share_fetch_frame(i, g, m, 1, topic_id)
                           for i, m in enumerate(members[g])))
        for _ in members[g]:
            r = decode(78, 1, _read_frame(s))
            if int(r.error_code) == 0:
                still_sessions += 1
            else:
                verify_errors[_code(r.error_code)] = verify_errors.get(_code(r.error_code), 0) + 1
    res["heartbeat_errors_while_held"] = beat_errors
    want = len(groups) * p["members"]
    res.update(members_at_end=still_members, sessions_at_end=still_sessions,
               verify_errors=verify_errors,
               held=joined == want and opened == want and still_members == want
               and still_sessions == want)
    return res


# ---------------------------------------------------------------------------------------------
# The control pair


def control_worker(p: dict[str, Any], out: Any, ready: Any, stop: Any) -> None:
    """Produce one record every 1/rate s (acks=all) and consume it with an assigned consumer;
    each record's round trip is produce() to its arrival from poll(). Reports
    (send time, round trip ms or -1 if it never arrived) pairs."""
    from bench.clients import _watch_parent

    _watch_parent()
    try:
        from confluent_kafka import Consumer, Producer, TopicPartition

        topic = p["topic"]
        prod = Producer({"bootstrap.servers": p["bootstrap"], "acks": "all", "linger.ms": 0,
                         "client.id": "hostile-control-producer", "log_level": 3})
        cons = Consumer({"bootstrap.servers": p["bootstrap"], "group.id": "hostile-control",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                         "fetch.min.bytes": 1, "client.id": "hostile-control-consumer",
                         "log_level": 3})
        cons.assign([TopicPartition(topic, 0, 0)])
        prod.list_topics(topic, timeout=30)
        sent = array("d")
        got = array("d")
        interval = 1.0 / p["rate"]
        seq = 0
        next_at = time.monotonic()
        ready_set = False
        while not stop.is_set():
            now = time.monotonic()
            if now >= next_at:
                t = time.monotonic()
                prod.produce(topic, struct.pack(">qd", seq, t), partition=0)
                prod.poll(0)
                sent.append(t)
                got.append(-1.0)
                seq += 1
                next_at += interval
                if next_at < now:  # we fell behind (the broker stalled us): do not burst
                    next_at = now + interval
            # poll(), not consume(n): consume waits for n records or the whole timeout.
            msg = cons.poll(max(0.0, min(0.05, next_at - time.monotonic())))
            if msg is not None and msg.error() is None and msg.value() is not None \
                    and len(msg.value()) == 16:
                arrived = time.monotonic()
                i, _t = struct.unpack(">qd", msg.value())
                if 0 <= i < len(got) and got[i] < 0:
                    got[i] = (arrived - sent[i]) * 1000
                    if not ready_set:
                        ready.set()
                        ready_set = True
        # Let records in flight arrive (bounded).
        deadline = time.monotonic() + p.get("drain_s", 5.0)
        while time.monotonic() < deadline and any(v < 0 for v in got[-200:]):
            msg = cons.poll(0.1)
            if msg is not None and msg.error() is None and msg.value() is not None \
                    and len(msg.value()) == 16:
                i, _t = struct.unpack(">qd", msg.value())
                if 0 <= i < len(got) and got[i] < 0:
                    got[i] = (time.monotonic() - sent[i]) * 1000
        prod.flush(5)
        cons.close()
        out.put({"ok": True, "sent": sent.tobytes(), "rtt_ms": got.tobytes()})
    except Exception:  # noqa: BLE001
        out.put({"ok": False, "error": traceback.format_exc(limit=5)})


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    k = min(len(values) - 1, max(0, int(round(q / 100 * len(values) + 0.5)) - 1))
    return values[k]


def control_figures(sent: list[float], rtt: list[float], t0: float, t1: float,
                    end: float) -> dict[str, Any]:
    """Round trips of the records sent in [t0, t1); a lost record counts as ``end - sent``."""
    vals = []
    lost = 0
    for ts, ms in zip(sent, rtt, strict=True):
        if t0 <= ts < t1:
            if ms < 0:
                lost += 1
                ms = (end - ts) * 1000
            vals.append(ms)
    vals.sort()
    p50, p99 = _percentile(vals, 50), _percentile(vals, 99)
    return {"round_trips": len(vals), "lost": lost,
            "p50_ms": None if p50 is None else round(p50, 2),
            "p99_ms": None if p99 is None else round(p99, 2),
            "max_ms": round(vals[-1], 2) if vals else None}


# ---------------------------------------------------------------------------------------------
# The scenario


def _create_topic(addr: tuple[str, int], name: str, partitions: int) -> uuid.UUID:
    with _connect(addr, 30) as s:
        t = _entity(19, 7, "CreatableTopic", name=name, num_partitions=partitions,
                    replication_factor=1, assignments=(), configs=())
        resp = _call(s, 19, 7, _kio_frame(19, 7, 1, topics=(t,),
                                          timeout=datetime.timedelta(seconds=30),
                                          validate_only=False))
        if int(resp.topics[0].error_code) != 0:
            raise RuntimeError(f"CreateTopics {name}: {resp.topics[0].error_code}")
        return resp.topics[0].topic_id


def _fill(addr: tuple[str, int], topic: str, mb: int) -> None:
    """Append ``mb`` MiB of 64 KiB records to partition 0 (the slow reader's data)."""
    import crc32c

    from bench.clients import payload

    value = payload(64 * 1024)
    with _connect(addr, 30) as s:
        for i in range(mb * 16 // 8):
            recs = bytearray()
            for d in range(8):
                rec = (b"\x00\x00" + _zigzag(d) + b"\x01" + _zigzag(len(value)) + value
                       + b"\x00")
                recs += _zigzag(len(rec)) + rec
            after = struct.pack(">hiqqqhii", 0, 7, 0, 0, -1, -1, -1, 8) + bytes(recs)
            batch = struct.pack(">qiibI", 0, 9 + len(after), 0, 2, crc32c.crc32c(after)) + after
            part = _entity(0, 9, "PartitionProduceData", index=0, records=batch)
            data = _entity(0, 9, "TopicProduceData", name=topic, partition_data=(part,))
            resp = _call(s, 0, 9, _kio_frame(0, 9, i + 1, transactional_id=None, acks=1,
                                             timeout=datetime.timedelta(seconds=10),
                                             topic_data=(data,)))
            code = resp.responses[0].partition_responses[0].error_code
            if int(code) != 0:
                raise RuntimeError(f"filling {topic}: {code}")


def _zigzag(v: int) -> bytes:
    return _uvarint((v << 1) ^ (v >> 63))


def _wait_report(out: Any, proc: Any, timeout: float, step: str) -> dict[str, Any]:
    """The next report on ``out``; an error if ``proc`` died without one or ``timeout`` passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return dict(out.get(timeout=0.5))
        except queue.Empty:
            if not proc.is_alive():
                try:
                    return dict(out.get(timeout=1.0))
                except queue.Empty:
                    return {"ok": False, "kind": step,
                            "error": f"the {step} process exited ({proc.exitcode}) without a report"}
    return {"ok": False, "kind": step, "error": f"no report within {timeout:.0f} s"}


def _loop_hold(pid: int, path: Path) -> dict[str, Any]:
    """The broker's loop-hold figures since the step started (bench/loop_hold.py): the ten
    APIs that held the loop longest, GC pauses and the loop lag."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    os.kill(pid, signal.SIGUSR2)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_mtime_ns != before:
            break
        time.sleep(0.05)
    try:
        got = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return {"error": f"no loop-hold figures from the broker: {exc}"}
    got["apis"] = dict(list(got["apis"].items())[:10])
    return got


STEPS = ["flood", "half_sent", "slow_reader", "wide_fetch", "wide_share_fetch",
         "forged_batch", "element_counts", "share_load"]


def scenario_h(scale: float, work_dir: Path, log_path: Path, overrides: dict[str, str],
               log: Any = print, steps: list[str] | None = None) -> dict[str, Any]:
    """(h) hostile load against a fresh broker; returns the figures (see the module doc).
    ``steps``: a subset of ``STEPS`` to run (all by default)."""
    limits = raise_nofile()  # the broker inherits the raised soft limit
    n = counts(scale)
    data = Path(tempfile.mkdtemp(prefix="shoal-bench-hostile-", dir=work_dir))
    hold_file = os.environ.get("SHOAL_BENCH_LOOP_HOLD")  # per-API loop hold (bench/loop_hold.py)
    broker = ShoalBroker(data / "data", log_path, overrides,
                         wrapper=["-m", "bench.loop_hold"] if hold_file else None)
    fig: dict[str, Any] = {"scale": scale, "counts": n, "nofile_limit": list(limits),
                           "control_rate": CONTROL_RATE, "steps": {},
                           "targets": {"control_p99_ms": TARGET_P99_MS,
                                       "rss_growth_mb": TARGET_RSS_MB}}
    stops: list[Any] = []
    procs: list[Any] = []
    monitor = None
    try:
        broker.start()
        addr = ("127.0.0.1", broker.port)
        monitor = Monitor(broker.pid)
        _create_topic(addr, "hostile-control", 1)
        data_id = _create_topic(addr, "hostile-data", 4)
        _create_topic(addr, "hostile-forged", 1)
        _fill(addr, "hostile-data", 8)
        out, ctl_out = CTX.Queue(), CTX.Queue()
        ready, ctl_stop = CTX.Event(), CTX.Event()
        ctl = start_process(control_worker, {"bootstrap": broker.bootstrap,
                                             "topic": "hostile-control", "rate": CONTROL_RATE},
                            ctl_out, ready, ctl_stop, name="hostile-control")
        procs.append(ctl)
        if not ready.wait(60):
            raise RuntimeError("the control pair did not complete a round trip within 60 s")
        time.sleep(0.5)
        t_base = time.monotonic()
        time.sleep(BASELINE_S)
        base_rss = rss_bytes(broker.pid) or 0
        t_attack = time.monotonic()
        common = {"host": addr[0], "port": addr[1], "timeout": STEP_TIMEOUT_S,
                  "topic": "hostile-data", "topic_id": str(data_id)}
        per_step = {"flood": {"n": n["flood"]}, "half_sent": {"n": n["half_sent"]},
                    "slow_reader": {"n": n["slow_reader"]},
                    "wide_fetch": {"n": n["wide_fetch"]},
                    "wide_share_fetch": {"n": n["wide_share_fetch"]},
                    "forged_batch": {"topic": "hostile-forged"},
                    "element_counts": {"n": n["element_counts"]},
                    "share_load": {"groups": n["groups"], "members": n["members"]}}
        windows: dict[str, tuple[float, float]] = {}
        share_stop = share_proc = None
        for step in (steps or STEPS):
            stop = CTX.Event()
            stops.append(stop)
            if step == "share_load":
                share_stop = stop
            log(f"  h: {step} {per_step[step]}")
            if hold_file:
                os.kill(broker.pid, signal.SIGUSR1)
            t0 = time.monotonic()
            proc = start_process(attack_worker, step, {**common, **per_step[step]}, out, stop,
                                 name=f"hostile-{step}")
            procs.append(proc)
            if step == "share_load":
                share_proc = proc
            res = _wait_report(out, proc, STEP_TIMEOUT_S + 60, step)
            windows[step] = (t0, time.monotonic())
            res.pop("kind", None)
            res.pop("phase", None)
            fig["steps"][step] = res
            if hold_file:
                res["loop_hold"] = _loop_hold(broker.pid, Path(hold_file))
            if not proc.is_alive() and not res.get("ok"):
                log(f"  h: {step} failed: {str(res.get('error', '')).strip().splitlines()[-1:]}")
        time.sleep(HOLD_S)
        t_verify = time.monotonic()
        if share_stop is not None and share_proc is not None:
            share_stop.set()
            final = _wait_report(out, share_proc, STEP_TIMEOUT_S, "share_load")
            final.pop("kind", None)
            if final.get("ok"):
                fig["steps"]["share_load"] = final
            else:
                fig["steps"]["share_load"]["verify"] = final.get("error")
        t_end = time.monotonic()
        peak = max((r for t, r, _ in monitor.timeline if t_attack <= t <= t_end), default=0)
        fig["serving_at_end"] = metadata_ok(*addr, timeout=10)
        ctl_stop.set()
        for stop in stops:
            stop.set()
        ctl_res = ctl_out.get(timeout=60)
        if not ctl_res.get("ok"):
            raise RuntimeError(f"control pair: {ctl_res.get('error')}")
        sent, rtt = array("d"), array("d")
        sent.frombytes(ctl_res["sent"])
        rtt.frombytes(ctl_res["rtt_ms"])
        end = time.monotonic()
        fig["control_baseline"] = control_figures(list(sent), list(rtt), t_base, t_attack, end)
        fig["control"] = control_figures(list(sent), list(rtt), t_attack, t_verify, end)
        for step, (a, b) in windows.items():
            fig["steps"][step]["control"] = control_figures(list(sent), list(rtt), a, b, end)
            fig["steps"][step]["window_s"] = round(b - a, 2)
            inside = [r for t, r, _ in monitor.timeline if a <= t <= b]
            if inside:  # what the broker held while this step was being set up
                fig["steps"][step]["rss_peak_mb"] = round(max(inside) / 2**20, 1)
        fig["rss_baseline_mb"] = round(base_rss / 2**20, 1)
        fig["rss_peak_mb"] = round(peak / 2**20, 1)
        fig["rss_growth_mb"] = round((peak - base_rss) / 2**20, 1)
        fig["rss_end_mb"] = monitor.rss_mb()
        fig["attack_s"] = round(t_verify - t_attack, 1)
        share = fig["steps"].get("share_load", {})
        fig["share_load_held"] = share.get("held")
        counts_step = fig["steps"].get("element_counts")
        if counts_step is not None:  # issue 25: its own control p99 and RSS growth
            counts_step["rss_growth_mb"] = round(
                counts_step.get("rss_peak_mb", base_rss / 2**20) - base_rss / 2**20, 1)
        p99 = fig["control"]["p99_ms"]
        fig["verdicts"] = {
            "control_p99": "PASS" if p99 is not None and p99 <= TARGET_P99_MS else "FAIL",
            "rss_growth": "PASS" if fig["rss_growth_mb"] <= TARGET_RSS_MB else "FAIL",
            "serving_at_end": "PASS" if fig["serving_at_end"] else "FAIL",
            "share_load_held": "PASS" if share.get("held") or "share_load" not in
            (steps or STEPS) else "FAIL",
        }
        if counts_step is not None:
            c99 = counts_step["control"]["p99_ms"]
            fig["verdicts"]["element_counts_control_p99"] = (
                "PASS" if c99 is not None and c99 <= TARGET_P99_MS else "FAIL")
            fig["verdicts"]["element_counts_rss_growth"] = (
                "PASS" if counts_step["rss_growth_mb"] <= TARGET_RSS_MB else "FAIL")
        fig["serving"] = 1 if fig["serving_at_end"] else 0
        fig["held"] = 1 if share.get("held") else 0
    finally:
        for stop in stops:
            stop.set()
        join_processes(procs, 30)
        if monitor is not None:
            monitor.close()
        fig["broker_alive_at_end"] = broker.alive()
        fig["broker_exit_code"] = broker.stop()
        remove_tree(data)
    return fig


def summary_line(fig: dict[str, Any]) -> str:
    c = fig.get("control", {})
    return (f"control p50 {c.get('p50_ms')} ms, p99 {c.get('p99_ms')} ms "
            f"({c.get('lost')} lost), RSS growth {fig.get('rss_growth_mb')} MB, serving at end "
            f"{fig.get('serving_at_end')}, share load held {fig.get('share_load_held')}"
            + _counts_summary(fig))


def _counts_summary(fig: dict[str, Any]) -> str:
    step = fig.get("steps", {}).get("element_counts")
    if not step or "control" not in step:
        return ""
    return (f"; element counts: control p99 {step['control'].get('p99_ms')} ms, RSS growth "
            f"{step.get('rss_growth_mb')} MB over {step.get('requests')} requests")


if __name__ == "__main__":  # python -m bench.hostile [scale]: the scenario alone, JSON out
    import sys

    from bench.procs import install_signal_cleanup, stop_everything

    install_signal_cleanup()
    work = Path(tempfile.mkdtemp(prefix="shoal-bench-"))
    try:
        # python -m bench.hostile [scale] [step,step...]: e.g. ``1 element_counts``
        chosen = sys.argv[2].split(",") if len(sys.argv) > 2 else None
        result = scenario_h(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0, work,
                            work / "broker.log", {}, steps=chosen)
        print(json.dumps(result, indent=2, default=str))
    finally:
        stop_everything()
        remove_tree(work)
