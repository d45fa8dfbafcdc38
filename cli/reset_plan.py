"""Offset reset plans of ``shoal consumer-groups --reset-offsets`` (pure: no I/O, no clock).

A reset is: a scope (which partitions), a rule (where each goes) and the offsets the broker
reports (committed, log start, log end, and the first offset at a timestamp). ``plan`` turns
them into new offsets with kafka-consumer-groups.sh's rules:

- ``--to-earliest`` / ``--to-latest``: the log start / log end offset;
- ``--to-current``: the committed offset (the log end for a partition without one);
- ``--to-offset N`` and ``--shift-by N`` (from the committed offset; a partition without one
  cannot be shifted): clamped to [log start, log end], each clamp reported;
- ``--to-datetime`` / ``--by-duration`` (now - duration): the first offset whose timestamp is at
  or after the time, or the log end when no record is that new;
- ``--from-file``: the offsets of a CSV reset plan (``topic,partition,offset`` per line, or
  ``group,topic,partition,offset`` as Kafka writes plans for several groups), clamped too so a
  stale plan never commits an offset outside the log.

Parsing errors raise ``PlanError`` with a message that names the bad input and shows the form.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

TopicPartition = tuple[str, int]

EARLIEST, LATEST, CURRENT = "earliest", "latest", "current"
TO_OFFSET, SHIFT_BY, TIMESTAMP, FROM_FILE = "offset", "shift", "timestamp", "file"


class PlanError(ValueError):
    """Bad reset input (a usage error: the command exits 2)."""


@dataclass(frozen=True, slots=True)
class Rule:
    """Where partitions go: ``kind`` is one of the module's kinds, ``value`` its argument (an
    offset, a shift, epoch ms, or the file's offsets)."""

    kind: str
    value: int | Mapping[TopicPartition, int] | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    offsets: dict[TopicPartition, int]
    clamped: list[str]  # one line per adjusted partition, for stderr


def parse_topic_specs(specs: Iterable[str]) -> dict[str, list[int] | None]:
    """``--topic`` values (``TOPIC`` or ``TOPIC:0,1,2``) -> topic -> partitions (None = all).

    Raises:
        PlanError: a partition list that is not integers, or an empty topic name.
    """
    out: dict[str, list[int] | None] = {}
    for spec in specs:
        name, sep, plist = spec.partition(":")
        if not name:
            raise PlanError(f"invalid --topic {spec!r}; use TOPIC or TOPIC:0,1,2")
        if not sep:
            out[name] = None
            continue
        try:
            parts = {int(x) for x in plist.split(",") if x.strip()}
        except ValueError:
            raise PlanError(f"invalid --topic {spec!r}; use TOPIC or TOPIC:0,1,2") from None
        if not parts or min(parts) < 0:
            raise PlanError(f"invalid --topic {spec!r}; use TOPIC or TOPIC:0,1,2")
        previous = out.get(name, [])
        out[name] = None if name in out and previous is None else \
            sorted(parts | set(previous or ()))
    return out


_DURATION = re.compile(
    r"^(?P<sign>[-+]?)P(?:(?P<d>[-+]?\d+)D)?"
    r"(?:T(?:(?P<h>[-+]?\d+)H)?(?:(?P<m>[-+]?\d+)M)?(?:(?P<s>[-+]?\d+(?:[.,]\d{1,9})?)S)?)?$",
    re.IGNORECASE)


def parse_duration(text: str) -> int:
    """ISO-8601 duration ``PnDTnHnMn.nS`` (Java's ``Duration.parse``, as Kafka's --by-duration
    takes it) -> milliseconds.

    Raises:
        PlanError: not such a duration, or a negative one.
    """
    m = _DURATION.match(text.strip())
    if m is None or text.strip().upper().endswith("T") or \
            not any(m.group(k) for k in ("d", "h", "m", "s")):
        raise PlanError(f"invalid --by-duration {text!r}; use an ISO-8601 duration "
                        "PnDTnHnMnS, for example PT1H30M or P1DT12H")
    seconds = float((m.group("s") or "0").replace(",", "."))
    ms = ((int(m.group("d") or 0) * 24 + int(m.group("h") or 0)) * 60
          + int(m.group("m") or 0)) * 60_000 + round(seconds * 1000)
    if m.group("sign") == "-":
        ms = -ms
    if ms < 0:
        raise PlanError(f"invalid --by-duration {text!r}: it must not be negative")
    return ms


def parse_datetime(text: str) -> int:
    """``YYYY-MM-DDThh:mm:ss[.sss][Z|+hh:mm]`` -> epoch ms (local time without a zone, as
    Kafka's --to-datetime).

    Raises:
        PlanError: not such a date-time.
    """
    try:
        return int(datetime.fromisoformat(text.strip()).timestamp() * 1000)
    except ValueError:
        raise PlanError(f"invalid --to-datetime {text!r}; use YYYY-MM-DDThh:mm:ss.sss, for "
                        "example 2026-01-31T12:00:00.000 (local time) or "
                        "2026-01-31T12:00:00.000+01:00") from None


def parse_plan_csv(text: str, group_id: str, source: str = "--from-file"
                   ) -> dict[TopicPartition, int]:
    """A CSV reset plan: ``topic,partition,offset`` lines (or ``group,topic,partition,offset``,
    of which only ``group_id``'s lines count). Blank lines are skipped.

    Raises:
        PlanError: a malformed line (with its number), or a plan with nothing for the group.
    """
    out: dict[TopicPartition, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 4:
            group, *cells = cells
            if group != group_id:
                continue
        if len(cells) != 3 or not cells[0]:
            raise PlanError(f"{source} line {number}: {raw!r} is not topic,partition,offset "
                            "(or group,topic,partition,offset)")
        try:
            partition, offset = int(cells[1]), int(cells[2])
        except ValueError:
            raise PlanError(f"{source} line {number}: partition and offset must be integers "
                            f"in {raw!r}") from None
        if partition < 0 or offset < 0:
            raise PlanError(f"{source} line {number}: partition and offset must not be "
                            f"negative in {raw!r}")
        out[(cells[0], partition)] = offset
    if not out:
        raise PlanError(f"{source} has no offsets for group {group_id!r}; write lines of "
                        "topic,partition,offset")
    return out


def format_plan_csv(offsets: Mapping[TopicPartition, int]) -> str:
    """The plan as ``topic,partition,offset`` lines (what ``parse_plan_csv`` reads)."""
    return "".join(f"{t},{p},{o}\n" for (t, p), o in sorted(offsets.items()))


def plan(rule: Rule, scope: Sequence[TopicPartition], *, committed: Mapping[TopicPartition, int],
         earliest: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
         at_time: Mapping[TopicPartition, int] | None = None) -> Plan:
    """New offsets of ``scope`` under ``rule`` (see the module docstring). ``at_time`` holds
    ListOffsets answers for a TIMESTAMP rule (-1: no record that new).

    Raises:
        PlanError: SHIFT_BY for a partition with no committed offset.
    """
    out: dict[TopicPartition, int] = {}
    clamped: list[str] = []

    def bounded(tp: TopicPartition, wanted: int) -> int:
        low, high = earliest[tp], latest[tp]
        if wanted > high:
            clamped.append(f"new offset {wanted} of {tp[0]}-{tp[1]} is after its log end "
                           f"offset; using {high}")
            return high
        if wanted < low:
            clamped.append(f"new offset {wanted} of {tp[0]}-{tp[1]} is before its log start "
                           f"offset; using {low}")
            return low
        return wanted

    for tp in scope:
        if rule.kind == EARLIEST:
            out[tp] = earliest[tp]
        elif rule.kind == LATEST:
            out[tp] = latest[tp]
        elif rule.kind == CURRENT:
            current = committed.get(tp, -1)
            out[tp] = current if current >= 0 else latest[tp]
        elif rule.kind == TO_OFFSET:
            assert isinstance(rule.value, int)
            out[tp] = bounded(tp, rule.value)
        elif rule.kind == SHIFT_BY:
            assert isinstance(rule.value, int)
            current = committed.get(tp, -1)
            if current < 0:
                raise PlanError(f"partition {tp[0]}-{tp[1]} has no committed offset to shift "
                                "from; reset it with --to-earliest, --to-latest or --to-offset")
            out[tp] = bounded(tp, current + rule.value)
        elif rule.kind == TIMESTAMP:
            assert at_time is not None
            found = at_time.get(tp, -1)
            out[tp] = found if found >= 0 else latest[tp]
        elif rule.kind == FROM_FILE:
            assert isinstance(rule.value, Mapping)
            out[tp] = bounded(tp, rule.value[tp])
        else:
            raise AssertionError(f"unknown reset rule {rule.kind}")
    return Plan(out, clamped)
