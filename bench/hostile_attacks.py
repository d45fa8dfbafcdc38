"""The attack processes of the hostile bench (scenario h, ``bench/hostile.py``).

``attack_worker(kind, params, out, stop)`` runs in a process of its own, one per step: it
puts its load in place (idle or half-sent connections, a slow reader, a wide Fetch or
ShareFetch, a forged batch, every API at large element counts, or many share-group members and
sessions), reports the step's figures on ``out``, then holds what it opened until ``stop`` is
set and closes everything. The share load reports twice: once loaded, then after verifying
that every member and session survived. Failures are reported, never raised.
"""

from __future__ import annotations

import resource
import selectors
import socket
import struct
import time
import traceback
import uuid
from typing import Any

from bench.hostile_frames import (
    call,
    close_all,
    close_share_session_frame,
    code_name,
    connect,
    decode,
    forged_produce_frame,
    heartbeat_frame,
    list_offsets_frame,
    read_frame,
    share_fetch_frame,
    wide_fetch_frame,
    wide_share_fetch_frame,
)

HEARTBEAT_S = 5.0
HALF_FRAME_SIZE = 50 * 1024 * 1024


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
                    s = connect(addr)
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
            s = connect(addr, p["timeout"])
            socks.append(s)
            frame = wide_fetch_frame(1, p["topic"], p["n"])
            res["frame_bytes"] = len(frame)
            res.update(_timed_call(s, 1, 12, frame, p["timeout"]))
        elif kind == "wide_share_fetch":
            res.update(_wide_share_fetch(addr, p, socks))
        elif kind == "forged_batch":
            s = connect(addr, p["timeout"])
            socks.append(s)
            resp = call(s, 0, 9, forged_produce_frame(1, p["topic"]))
            pr = resp.responses[0].partition_responses[0]
            res["error_code"] = int(pr.error_code)
            res["produce_error"] = code_name(pr.error_code)
            res["base_offset"] = int(pr.base_offset)
            lo = call(s, 2, 7, list_offsets_frame(2, p["topic"]))
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
        close_all(socks)


def _timed_call(s: socket.socket, api_key: int, version: int, frame: bytes,
                timeout: float) -> dict[str, Any]:
    t0 = time.monotonic()
    s.settimeout(timeout)
    try:
        s.sendall(frame)
        data = read_frame(s)
    except TimeoutError:
        return {"answered": False, "outcome": f"no answer within {timeout:.0f} s"}
    except ConnectionError as exc:
        return {"answered": False, "outcome": f"connection closed ({exc})",
                "response_s": round(time.monotonic() - t0, 3)}
    out: dict[str, Any] = {"answered": True, "response_s": round(time.monotonic() - t0, 3),
                           "response_bytes": len(data) + 4}
    try:
        body = decode(api_key, version, data)
        out["outcome"] = f"answered, {code_name(getattr(body, 'error_code', 'n/a'))}"
    except Exception as exc:  # noqa: BLE001
        out["outcome"] = f"answered, undecodable: {exc}"
    return out


def _slow_reader(addr: tuple[str, int], p: dict[str, Any],
                 socks: list[socket.socket]) -> dict[str, Any]:
    """Pipeline ``n`` 1 MiB Fetches of partition 0 without reading; stop sending when the
    broker stops reading (the send buffer stays full for 5 s)."""
    s = connect(addr)
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
    s = connect(addr, p["timeout"])
    socks.append(s)
    hb = call(s, 76, 1, heartbeat_frame(1, group, member, 0, (p["topic"],)))
    t_build = time.monotonic()
    frame = wide_share_fetch_frame(2, group, member, uuid.UUID(p["topic_id"]), p["n"])
    res: dict[str, Any] = {"frame_bytes": len(frame), "heartbeat_error": code_name(hb.error_code),
                           "build_s": round(time.monotonic() - t_build, 2)}
    res.update(_timed_call(s, 78, 1, frame, p["timeout"]))
    if res["answered"]:
        try:  # close the session and leave, so the session count of step 7 is its own
            s.settimeout(p["timeout"])
            closed = call(s, 78, 1, close_share_session_frame(3, group, member))
            res["close_session_error"] = code_name(closed.error_code)
            call(s, 76, 1, heartbeat_frame(4, group, member, -1, None))
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
            r = decode(76, 1, read_frame(s))
            if int(r.error_code) == 0:
                ok += 1
                epochs[(g, m)] = int(r.member_epoch)
            else:
                errors[code_name(r.error_code)] = errors.get(code_name(r.error_code), 0) + 1
    return ok


def _share_load(addr: tuple[str, int], p: dict[str, Any], socks: list[socket.socket],
                out: Any, stop: Any) -> dict[str, Any]:
    """``groups`` x ``members`` heartbeating members, one share session each, verified at the
    end. One connection per group (sessions belong to the connection that opened them)."""
    topic_id = uuid.UUID(p["topic_id"])
    groups = [f"hostile-share-{g}" for g in range(p["groups"])]
    members = {g: [str(uuid.uuid4()) for _ in range(p["members"])] for g in groups}
    epochs: dict[tuple[str, str], int] = {}
    conns = {g: connect(addr, p["timeout"]) for g in groups}
    socks.extend(conns.values())
    joined = join_errors = opened = 0
    open_errors: dict[str, int] = {}
    t0 = time.monotonic()
    for g in groups:  # pipelined per group: send every join, then read every answer
        s = conns[g]
        s.sendall(b"".join(heartbeat_frame(i, g, m, 0, (p["topic"],))
                           for i, m in enumerate(members[g])))
        for m in members[g]:
            r = decode(76, 1, read_frame(s))
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
            r = decode(78, 1, read_frame(s))
            if int(r.error_code) == 0:
                opened += 1
            else:
                open_errors[code_name(r.error_code)] = open_errors.get(code_name(r.error_code), 0) + 1
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
            r = decode(78, 1, read_frame(s))
            if int(r.error_code) == 0:
                still_sessions += 1
            else:
                verify_errors[code_name(r.error_code)] = verify_errors.get(code_name(r.error_code), 0) + 1
    res["heartbeat_errors_while_held"] = beat_errors
    want = len(groups) * p["members"]
    res.update(members_at_end=still_members, sessions_at_end=still_sessions,
               verify_errors=verify_errors,
               held=joined == want and opened == want and still_members == want
               and still_sessions == want)
    return res
