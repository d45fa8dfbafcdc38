"""Group-config values with a grammar of their own: ISO-8601 durations (Java's
``Duration.parse``, as Kafka's ``share.auto.offset.reset=by_duration:<duration>`` takes them)
and ``share.auto.offset.reset`` itself. Pure functions; ``broker/group_configs.py`` uses them.
"""

from __future__ import annotations

import re
from typing import Any

from broker.config import ConfigError

LATEST = "latest"
EARLIEST = "earliest"
BY_DURATION = "by_duration"


# --------------------------------------------------------------------------- ISO-8601 durations

# The grammar java.time.Duration.parse accepts (Kafka parses by_duration with it): an optional
# sign, "P", optional whole days, then optionally "T" followed by at least one of whole hours,
# whole minutes and seconds with up to nine fraction digits ("." or ","). Every number may carry
# its own sign. Letters are case-insensitive. "P", "PT" and "P1DT" are invalid.
_ISO_DURATION = re.compile(
    r"(?P<sign>[-+]?)P(?:(?P<d>[-+]?\d+)D)?"
    r"(?P<t>T(?:(?P<h>[-+]?\d+)H)?(?:(?P<m>[-+]?\d+)M)?"
    r"(?:(?P<s>[-+]?\d+)(?:[.,](?P<f>\d{0,9}))?S)?)?",
    re.IGNORECASE,
)
_NANOS_PER_SECOND = 1_000_000_000


def parse_iso_duration_nanos(text: str) -> int:
    """Nanoseconds of an ISO-8601 duration such as ``PT1H30M``, ``P2D`` or ``PT0.5S`` (may be
    negative).

    Raises:
        ValueError: ``text`` is not a duration in that grammar.
    """
    m = _ISO_DURATION.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"{text!r} is not an ISO-8601 duration such as PT1H or P1DT12H")
    d, h, mi, s = m.group("d"), m.group("h"), m.group("m"), m.group("s")
    if d is None and m.group("t") is None:
        raise ValueError(f"{text!r} has no duration components")
    if m.group("t") is not None and h is None and mi is None and s is None:
        raise ValueError(f"{text!r} has no components after 'T'")
    seconds = int(d or 0) * 86_400 + int(h or 0) * 3_600 + int(mi or 0) * 60 + int(s or 0)
    nanos = seconds * _NANOS_PER_SECOND
    fraction = m.group("f")
    if fraction:
        frac_nanos = int(fraction.ljust(9, "0"))
        # The fraction takes the sign of its seconds ("PT-1.5S" is -1.5 s).
        nanos += -frac_nanos if (s or "").startswith("-") else frac_nanos
    return -nanos if m.group("sign") == "-" else nanos


def parse_iso_duration_ms(text: str) -> int:
    """Milliseconds of an ISO-8601 duration, truncated towards zero.

    Raises:
        ValueError: ``text`` is not a duration in that grammar.
    """
    nanos = parse_iso_duration_nanos(text)
    return -(-nanos // 1_000_000) if nanos < 0 else nanos // 1_000_000


def format_iso_duration_ms(ms: int) -> str:
    """A non-negative millisecond count as Java's ``Duration.toString`` writes it (``PT1H30M``,
    ``PT48H``, ``PT0.25S``, ``PT0S``)."""
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    out = "PT"
    if hours:
        out += f"{hours}H"
    if minutes:
        out += f"{minutes}M"
    if seconds or millis or out == "PT":
        out += f"{seconds}.{millis:03d}".rstrip("0").rstrip(".") + "S"
    return out


def parse_auto_offset_reset(value: str) -> tuple[str, int | None]:
    """The normalized ``share.auto.offset.reset`` value and its duration in ms (by_duration only).

    ``latest`` and ``earliest`` are case-insensitive; ``by_duration:<ISO-8601 duration>`` needs a
    non-negative duration (Kafka ``ShareGroupAutoOffsetResetStrategy``).

    Raises:
        ConfigError: anything else.
    """
    s = value.strip()
    lower = s.lower()
    if lower in (LATEST, EARLIEST):
        return lower, None
    prefix = BY_DURATION + ":"
    if lower.startswith(prefix):
        try:
            nanos = parse_iso_duration_nanos(s[len(prefix):])
        except ValueError as exc:
            raise ConfigError(f"share.auto.offset.reset={value}: {exc}") from None
        if nanos < 0:
            raise ConfigError(f"share.auto.offset.reset={value}: the duration must not be "
                              "negative")
        ms = nanos // 1_000_000
        return f"{prefix}{format_iso_duration_ms(ms)}", ms
    raise ConfigError(f"share.auto.offset.reset={value}: must be latest, earliest or "
                      "by_duration:<ISO-8601 duration> (e.g. by_duration:PT1H)")


def _auto_offset_reset_problem(value: Any) -> str | None:
    try:
        parse_auto_offset_reset(str(value))
    except ConfigError as exc:
        return str(exc).split(": ", 1)[1]
    return None
