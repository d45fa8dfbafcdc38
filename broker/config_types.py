"""The pieces every config table is made of: ``ConfigDef``, its validators, and how a raw value
becomes a typed, validated one (``parse_value``) and is shown again (``format_value``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

LONG_MAX = 2**63 - 1


class ConfigError(ValueError):
    """An unknown name or an invalid value; the message says which and why."""


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    type: str  # "int" | "long" | "bool" | "string" | "list" | "double"
    default: Any
    doc: str
    validator: Callable[[Any], str | None] | None = None
    dynamic: bool = False  # may be changed at runtime with IncrementalAlterConfigs
    synonym: str | None = None  # for topic configs: the broker config that supplies the default
    sensitive: bool = False


def at_least(n: int) -> Callable[[Any], str | None]:
    return lambda v: None if v >= n else f"must be at least {n}"


def assignment_interval_problem(v: Any) -> str | None:
    """``share.assignment.interval.ms`` and its broker default: only 0 is honoured (issue 25)."""
    if v == 0:
        return None
    return ("must be 0: Shoal computes a share group's target assignment at once on every "
            "membership or subscription change, with no rate limit to configure")


def between(lo: int, hi: int) -> Callable[[Any], str | None]:
    return lambda v: None if lo <= v <= hi else f"must be between {lo} and {hi}"


def one_of(*allowed: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in allowed else f"must be one of {', '.join(allowed)}"


def cleanup_policy_problem(v: Any) -> str | None:
    """``cleanup.policy``: a comma-separated list of ``compact`` and ``delete`` (Kafka's values)."""
    items = [x.strip() for x in str(v).split(",")]
    if not items or any(x not in ("compact", "delete") for x in items):
        return "must be a list of compact and delete (compact, delete or compact,delete)"
    return None


def cleanup_policies(value: Any) -> frozenset[str]:
    """The set of policies in a valid ``cleanup.policy`` value."""
    return frozenset(x.strip() for x in str(value).split(","))


def _ratio(v: Any) -> str | None:
    return None if 0.0 <= v <= 1.0 else "must be between 0 and 1"


def _minus_one_or_at_least(n: int) -> Callable[[Any], str | None]:
    return lambda v: None if v == -1 or v >= n else f"must be -1 (unlimited) or at least {n}"


def parse_value(d: ConfigDef, raw: Any) -> Any:
    """Convert a raw (usually string) value to the config's type and validate it.

    Raises:
        ConfigError: the value has the wrong type or fails the validator.
    """
    try:
        if raw is None:
            value: Any = None
        elif d.type in ("int", "long"):
            value = int(str(raw).strip())
        elif d.type == "double":
            value = float(str(raw).strip())
        elif d.type == "bool":
            s = str(raw).strip().lower()
            if s not in ("true", "false"):
                raise ValueError(raw)
            value = s == "true"
        else:
            value = str(raw).strip()
    except ValueError:
        raise ConfigError(f"{d.name}: {raw!r} is not a valid {d.type}") from None
    if value is not None and d.validator is not None:
        problem = d.validator(value)
        if problem:
            raise ConfigError(f"{d.name}={raw}: {problem}")
    return value


def format_value(value: Any) -> str | None:
    """How a config value is shown in DescribeConfigs."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_listener(value: str) -> tuple[str, int]:
    """``PLAINTEXT://host:port`` or ``host:port`` to (host, port).

    Raises:
        ConfigError: no port, or a port outside 0..65535.
    """
    s = value.split(",")[0].strip()
    if "://" in s:
        s = s.split("://", 1)[1]
    host, sep, port = s.rpartition(":")
    if not sep:
        raise ConfigError(f"listener {value!r} has no port (expected host:port)")
    try:
        p = int(port)
    except ValueError:
        raise ConfigError(f"listener {value!r}: port {port!r} is not a number") from None
    if not 0 <= p <= 65535:
        raise ConfigError(f"listener {value!r}: port {p} is out of range")
    return (host.strip("[]") or "0.0.0.0", p)
