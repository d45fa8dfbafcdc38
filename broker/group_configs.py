"""Per-group configs (KIP-932 dynamic group configs; reference section 2): the ``share.*`` configs
of share groups and the ``consumer.session.timeout.ms``/``consumer.heartbeat.interval.ms`` of
consumer groups (KIP-848, as Kafka 4.x's GroupConfig; defaults and bounds are the
``group.consumer.*`` broker configs).

A group's ``share.*`` configs are set with IncrementalAlterConfigs on a GROUP resource (type 32)
and described with DescribeConfigs. A group without an override uses the broker default: the
``group.share.*`` broker config named as the group config's ``synonym`` (e.g.
``share.record.lock.duration.ms`` -> ``group.share.record.lock.duration.ms``), or the built-in
default for the four configs that have no broker counterpart.

Invariants:
- Only validated values are stored: known name, right type, and, for the bounded numeric configs,
  inside the broker's ``[group.share.min.X, group.share.max.X]`` range at the time they were set
  (INVALID_CONFIG names the config and the range otherwise). ``share.heartbeat.interval.ms`` must
  stay below ``share.session.timeout.ms`` (effective values).
- The redelivery backoff configs (Shoal extension, ``broker/share/backoff.py``) have fixed
  bounds: ``share.delivery.backoff.ms`` 0..3600000 (0 = off, Kafka's behaviour),
  ``share.delivery.backoff.max.ms`` 1..3600000 and not below ``share.delivery.backoff.ms``
  (effective values), ``share.delivery.backoff.multiplier`` 1.0..10.0; ``share.ordering`` is
  ``none`` or ``key`` (broker/share/key_order.py).
- ``errors.deadletterqueue.topic.name`` (KIP-1191, broker/share/dead_letter.py) is empty or a
  legal topic name that starts with the broker's ``errors.deadletterqueue.topic.name.prefix``
  (as of when it is set) and not with ``__``; INVALID_CONFIG says which rule it broke.
- ``share.auto.offset.reset`` is stored normalized: ``latest``, ``earliest`` or
  ``by_duration:<ISO-8601 duration>`` with the duration (millisecond resolution) written as
  Java's ``Duration.toString`` writes it (``PT1H30M``, ``PT48H``, ``PT0.5S``), so every reader
  parses one form; ``ShareGroupConfig.auto_offset_reset_duration_ms`` has it in milliseconds.
- ``get(group_id)`` is computed on every call from the stored overrides and the broker configs, so
  a change applies to the next operation of every share-partition (Kafka reads lock duration,
  delivery count limit and record-lock limit per call, reference section 2). If the broker's
  bounds changed across a restart, a stored value outside them is clamped into them when read.
- Overrides live in ``<data>/group-configs.json``, rewritten atomically (as ``topics.json``)
  before a change becomes visible, so they survive restarts and a failed write changes nothing.
  Kafka keeps them in the cluster metadata. A request's changes are one write, in a worker thread
  (``plan`` each group, then ``commit`` under ``lock``), so a request of many groups costs the
  event loop no file I/O and the file is written once, not once per group (issue 25).
- At most ``group.config.max.groups`` groups have configs (Shoal extension; Kafka's metadata has
  no such file to rewrite): one more is refused (POLICY_VIOLATION, as Kafka's controller answers
  an operation that is too large), so the file, and each write of it, stays bounded.
- Writes follow the log directory's offline rule (issue 25, section 3): once a storage error took
  the data directory offline, ``check_online`` (the broker's ``log_dir.check``) refuses every
  write with an OSError, so the change is answered KAFKA_STORAGE_ERROR and nothing changes.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker.config import (
    CONSUMER_BOUNDED,
    SHARE_BOUNDED,
    BrokerConfig,
    ConfigDef,
    ConfigError,
    at_least,
    between,
    format_value,
    one_of,
    parse_value,
)
from broker.config_types import assignment_interval_problem
from broker.group_config_values import (  # noqa: F401  (re-exported: the group-config values)
    BY_DURATION,
    EARLIEST,
    LATEST,
    _auto_offset_reset_problem,
    format_iso_duration_ms,
    parse_auto_offset_reset,
    parse_iso_duration_ms,
    parse_iso_duration_nanos,
)
from broker.log.topics import atomic_write, topic_name_problem
from broker.share.dead_letter import dlq_topic_name_problem

log = logging.getLogger("shoal.group_configs")

FILE_NAME = "group-configs.json"

READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"


# --------------------------------------------------------------------------- redelivery backoff

# Bounds of the redelivery backoff configs (Shoal extension, broker/share/backoff.py). A record in
# backoff stays in the in-flight window, so an hour is the longest it may be held back.
MAX_DELIVERY_BACKOFF_MS = 3_600_000
MIN_BACKOFF_MULTIPLIER = 1.0
# share.ordering values (Shoal extension, broker/share/key_order.py).
ORDERING_NONE = "none"
ORDERING_KEY = "key"
MAX_BACKOFF_MULTIPLIER = 10.0
# Groups whose effective share configs GroupConfigs.get keeps computed (cleared when full).
_MAX_CACHED_GROUPS = 10_000


def _multiplier_problem(value: Any) -> str | None:
    # NaN fails both comparisons, infinity the upper one.
    if not MIN_BACKOFF_MULTIPLIER <= value <= MAX_BACKOFF_MULTIPLIER:
        return f"must be between {MIN_BACKOFF_MULTIPLIER} and {MAX_BACKOFF_MULTIPLIER}"
    return None


# --------------------------------------------------------------------------- the table

_DEFS: list[ConfigDef] = [
    ConfigDef("share.session.timeout.ms", "int", None,
              "A member that does not heartbeat this long is removed from the group.",
              at_least(1), dynamic=True, synonym="group.share.session.timeout.ms"),
    ConfigDef("share.heartbeat.interval.ms", "int", None,
              "How often members are told to heartbeat; below share.session.timeout.ms.",
              at_least(1), dynamic=True, synonym="group.share.heartbeat.interval.ms"),
    ConfigDef("share.record.lock.duration.ms", "int", None,
              "How long a record acquired by a consumer stays locked to it.",
              at_least(1), dynamic=True, synonym="group.share.record.lock.duration.ms"),
    ConfigDef("share.auto.offset.reset", "string", LATEST,
              "Where a share-partition with no consumption history starts: latest, earliest or "
              "by_duration:<ISO-8601 duration> (the first record at most that old).",
              _auto_offset_reset_problem, dynamic=True),
    ConfigDef("share.isolation.level", "string", READ_UNCOMMITTED,
              "read_uncommitted, or read_committed to deliver committed transactional records "
              "only.", one_of(READ_UNCOMMITTED, READ_COMMITTED), dynamic=True),
    ConfigDef("share.delivery.count.limit", "int", None,
              "Deliveries of a record before it is archived (never delivered again).",
              at_least(1), dynamic=True, synonym="group.share.delivery.count.limit"),
    ConfigDef("share.partition.max.record.locks", "int", None,
              "Maximum in-flight records of one share-partition.",
              at_least(1), dynamic=True, synonym="group.share.partition.max.record.locks"),
    ConfigDef("share.renew.acknowledge.enable", "bool", True,
              "Whether consumers may renew record locks (RENEW acknowledgements, KIP-1222).",
              dynamic=True),
    ConfigDef("share.assignment.interval.ms", "int", None,
              "Minimum time between target assignment computations. Only 0 is accepted: "
              "assignments are computed at once on every change, so any other value is refused "
              "(INVALID_CONFIG) rather than ignored.",
              assignment_interval_problem, dynamic=True,
              synonym="group.share.assignment.interval.ms"),
    ConfigDef("share.record.locks.count.inflight.only", "bool", False,
              "Shoal extension: count only non-terminal (available/acquired) records toward "
              "share.partition.max.record.locks, so one slow record does not stall a partition.",
              dynamic=True),
    ConfigDef("share.delivery.backoff.ms", "int", 0,
              "Shoal extension: a record released (RELEASE, lock expiry, member leaving) after its "
              "n-th delivery is acquirable again only after min(share.delivery.backoff.max.ms, "
              "this * share.delivery.backoff.multiplier^(n-1)) ms; 0 = at once, as in Kafka.",
              between(0, MAX_DELIVERY_BACKOFF_MS), dynamic=True),
    ConfigDef("share.delivery.backoff.max.ms", "int", 60_000,
              "Shoal extension: the longest redelivery backoff; at least "
              "share.delivery.backoff.ms.",
              between(1, MAX_DELIVERY_BACKOFF_MS), dynamic=True),
    ConfigDef("share.delivery.backoff.multiplier", "double", 2.0,
              "Shoal extension: the factor the redelivery backoff grows by per delivery.",
              _multiplier_problem, dynamic=True),
    ConfigDef("errors.deadletterqueue.topic.name", "string", "",
              "KIP-1191: the topic records this share group gives up on (REJECTed, or at the "
              "delivery count limit) are copied to before they are archived; empty = none. It "
              "must start with the broker's errors.deadletterqueue.topic.name.prefix and have "
              "the topic config errors.deadletterqueue.group.enable=true.",
              dynamic=True),
    ConfigDef("errors.deadletterqueue.copy.record.enable", "bool", False,
              "KIP-1191: copy the original key and value into the dead-letter record (otherwise "
              "only the context headers).", dynamic=True),
    ConfigDef("share.ordering", "string", ORDERING_NONE,
              "Shoal extension: none (Kafka's behaviour) or key: within a share-partition at most "
              "one record per key is acquired at a time and a key's records are delivered in "
              "offset order; records without a key are unordered. Applies to new acquisitions.",
              one_of(ORDERING_NONE, ORDERING_KEY), dynamic=True),
]

# Consumer groups (KIP-848 consumer protocol), as Kafka 4.x's GroupConfig.
_DEFS += [
    ConfigDef("consumer.session.timeout.ms", "int", None,
              "A consumer-protocol member that does not heartbeat this long is removed from the "
              "group.", at_least(1), dynamic=True, synonym="group.consumer.session.timeout.ms"),
    ConfigDef("consumer.heartbeat.interval.ms", "int", None,
              "How often consumer-protocol members are told to heartbeat; below "
              "consumer.session.timeout.ms.", at_least(1), dynamic=True,
              synonym="group.consumer.heartbeat.interval.ms"),
]

GROUP_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in _DEFS}

# Group config -> (min, max) broker configs bounding it.
_BOUNDS: dict[str, tuple[str, str]] = {
    f"share.{suffix}": (lo, hi) for suffix, (_default, lo, hi) in SHARE_BOUNDED.items()
}
_BOUNDS.update({
    f"consumer.{suffix}": (lo, hi) for suffix, (_default, lo, hi) in CONSUMER_BOUNDED.items()
})


@dataclass(frozen=True, slots=True)
class ShareGroupConfig:
    """Every effective share config of one group (attribute = config name in snake case)."""

    session_timeout_ms: int
    heartbeat_interval_ms: int
    record_lock_duration_ms: int
    auto_offset_reset: str  # "latest" | "earliest" | "by_duration:PT..."
    auto_offset_reset_duration_ms: int | None  # set for by_duration only
    isolation_level: str  # "read_uncommitted" | "read_committed"
    delivery_count_limit: int
    partition_max_record_locks: int
    renew_acknowledge_enable: bool
    assignment_interval_ms: int
    record_locks_count_inflight_only: bool
    delivery_backoff_ms: int = 0
    delivery_backoff_max_ms: int = 60_000
    delivery_backoff_multiplier: float = 2.0
    ordering: str = "none"  # "none" | "key" (share.ordering, broker/share/key_order.py)
    dlq_topic: str = ""  # errors.deadletterqueue.topic.name ("" = no dead-letter topic)
    dlq_copy_record: bool = False  # errors.deadletterqueue.copy.record.enable


@dataclass(frozen=True, slots=True)
class DescribedGroupConfig:
    """One group config for DescribeConfigs. ``source``: ``"group"`` (set on the group), else the
    source of the broker synonym (``"dynamic"``/``"static"``/``"default"``), or ``"default"``."""

    definition: ConfigDef
    value: Any
    source: str

    @property
    def name(self) -> str:
        return self.definition.name


def unknown_group_config_problem(name: str) -> str:
    """Why ``name`` cannot be set on a group: the closest group config first (a client may cut
    a long error message short), then every group config's name."""
    close = difflib.get_close_matches(name, list(GROUP_CONFIGS), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return (f"unknown group config {name!r}; {hint}the group configs are "
            f"{', '.join(GROUP_CONFIGS)}")


class GroupConfigLimitError(ValueError):
    """A group cannot get configs: ``group.config.max.groups`` groups already have some."""


def _online() -> None:
    """No log directory to follow (a GroupConfigs made on its own, in tests)."""


class GroupConfigs:
    """The share configs of every group, persisted in ``<data>/group-configs.json``."""

    def __init__(self, data_dir: Path, broker_config: BrokerConfig) -> None:
        """Load stored overrides; invalid entries are logged and dropped, not fatal.

        Raises:
            OSError, ValueError: the file exists but cannot be read or is not JSON.
        """
        self._path = data_dir / FILE_NAME
        self._broker = broker_config
        # Raises OSError while the data directory is offline (the broker installs its check).
        self.check_online: Callable[[], None] = _online
        # Held by a request from its first ``plan`` to the end of its ``commit``.
        self.lock = asyncio.Lock()
        self._overrides: dict[str, dict[str, Any]] = {}
        # get()'s answers, read on every share fetch and acknowledgement: dropped whenever a
        # group's overrides or any broker config change, so live changes still apply at once.
        self._effective: dict[str, ShareGroupConfig] = {}
        # Cluster mode (broker/cluster_member.py): ``commit`` hands the changed groups'
        # overrides (as text) to this, which makes them durable in etcd and returns once they
        # came back through the watch into ``install_texts``; the local file is not used.
        self.publish: Callable[[dict[str, dict[str, str] | None]], Awaitable[None]] | None = None
        broker_config.on_change(lambda _name: self._effective.clear())
        if self._path.exists():
            doc = json.loads(self._path.read_text(encoding="utf-8"))
            for group_id, configs in doc.get("groups", {}).items():
                for name, raw in configs.items():
                    d = GROUP_CONFIGS.get(name)
                    try:
                        if d is None:
                            raise ConfigError(f"unknown group config {name!r}")
                        # Bounds may have changed since: value() clamps instead of dropping.
                        value = self._parse(d, raw, check_bounds=False)
                    except ConfigError as exc:
                        log.warning("ignoring stored config of group %s: %s", group_id, exc)
                        continue
                    self._overrides.setdefault(group_id, {})[name] = value

    # ------------------------------------------------------------------ reads

    def get(self, group_id: str) -> ShareGroupConfig:
        """The group's effective share configs (live changes apply: the cached answer is dropped
        by every change of the group's overrides or of a broker config)."""
        found = self._effective.get(group_id)
        if found is None:
            if len(self._effective) >= _MAX_CACHED_GROUPS:
                self._effective.clear()
            found = self._effective[group_id] = self._compute(group_id)
        return found

    def _compute(self, group_id: str) -> ShareGroupConfig:
        v = self.value
        reset = v(group_id, "share.auto.offset.reset")
        _, reset_ms = parse_auto_offset_reset(reset)
        return ShareGroupConfig(
            session_timeout_ms=v(group_id, "share.session.timeout.ms"),
            heartbeat_interval_ms=v(group_id, "share.heartbeat.interval.ms"),
            record_lock_duration_ms=v(group_id, "share.record.lock.duration.ms"),
            auto_offset_reset=reset,
            auto_offset_reset_duration_ms=reset_ms,
            isolation_level=v(group_id, "share.isolation.level"),
            delivery_count_limit=v(group_id, "share.delivery.count.limit"),
            partition_max_record_locks=v(group_id, "share.partition.max.record.locks"),
            renew_acknowledge_enable=v(group_id, "share.renew.acknowledge.enable"),
            assignment_interval_ms=v(group_id, "share.assignment.interval.ms"),
            record_locks_count_inflight_only=v(group_id, "share.record.locks.count.inflight.only"),
            delivery_backoff_ms=v(group_id, "share.delivery.backoff.ms"),
            delivery_backoff_max_ms=v(group_id, "share.delivery.backoff.max.ms"),
            delivery_backoff_multiplier=v(group_id, "share.delivery.backoff.multiplier"),
            ordering=v(group_id, "share.ordering"),
            dlq_topic=v(group_id, "errors.deadletterqueue.topic.name"),
            dlq_copy_record=v(group_id, "errors.deadletterqueue.copy.record.enable"),
        )

    def consumer_timeouts(self, group_id: str) -> tuple[int, int]:
        """(consumer.session.timeout.ms, consumer.heartbeat.interval.ms) of a consumer group."""
        return (self.value(group_id, "consumer.session.timeout.ms"),
                self.value(group_id, "consumer.heartbeat.interval.ms"))

    def value(self, group_id: str, name: str) -> Any:
        """The effective value of one group config (override, else broker default, clamped into
        the broker bounds)."""
        d = GROUP_CONFIGS[name]
        value = self._overrides.get(group_id, {}).get(name)
        if value is None:
            value = self._broker.get(d.synonym) if d.synonym is not None else d.default
        bounds = _BOUNDS.get(name)
        if bounds is not None:
            value = min(max(value, self._broker.get(bounds[0])), self._broker.get(bounds[1]))
        return value

    def group_ids(self) -> list[str]:
        """The groups that have configs of their own, sorted (ListConfigResources)."""
        return sorted(self._overrides)

    def overrides(self, group_id: str) -> dict[str, Any]:
        """The configs set on the group (parsed values)."""
        return dict(self._overrides.get(group_id, {}))

    def describe(self, group_id: str) -> list[DescribedGroupConfig]:
        """Every group config with its effective value and where it comes from."""
        out = []
        own = self._overrides.get(group_id, {})
        for name, d in GROUP_CONFIGS.items():
            if name in own:
                source = "group"
            elif d.synonym is not None:
                source = self._broker.source(d.synonym)
            else:
                source = "default"
            out.append(DescribedGroupConfig(d, self.value(group_id, name), source))
        return out

    # ------------------------------------------------------------------ writes

    def alter(self, group_id: str, changes: Mapping[str, str | None], *,
              validate_only: bool = False) -> None:
        """Set (value) or remove (None) group configs, all or nothing, written before they apply.
        Synchronous (a file write on the caller's thread): the request path uses ``plan`` and
        ``commit`` instead.

        Raises:
            ConfigError: an unknown name, an invalid or out-of-bounds value, or a heartbeat
                interval not below the session timeout; nothing is changed.
            GroupConfigLimitError: the group would be one too many with configs.
            OSError: the file could not be written; nothing is changed.
        """
        new = self.plan(group_id, changes)
        if validate_only:
            return
        if self.refused_by_limit({group_id: new}):
            raise GroupConfigLimitError(self.limit_message(group_id))
        merged = self.staged({group_id: new})
        self.write(merged)
        self.install(merged, (group_id,))

    def plan(self, group_id: str, changes: Mapping[str, str | None]) -> dict[str, Any]:
        """The group's overrides once ``changes`` are applied (validated; nothing changes).

        Raises:
            ConfigError: an unknown name, an invalid or out-of-bounds value, or a heartbeat
                interval not below the session timeout.
        """
        new = dict(self._overrides.get(group_id, {}))
        for name, raw in changes.items():
            d = GROUP_CONFIGS.get(name)
            if d is None:
                raise ConfigError(unknown_group_config_problem(name))
            if raw is None:
                new.pop(name, None)
            else:
                new[name] = self._parse(d, raw)
        self._check_heartbeat(new)
        self._check_backoff(new)
        self._check_dead_letter(new)
        return new

    def refused_by_limit(self, plans: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """The groups of ``plans`` (group -> its new overrides, in request order) that would take
        the number of groups with configs past ``group.config.max.groups``; groups that already
        have configs, or lose them, are never refused."""
        most = self._broker.get("group.config.max.groups")
        have = self._overrides
        count = len(have) - sum(1 for g, new in plans.items() if not new and g in have)
        refused = []
        for group_id, new in plans.items():
            if new and group_id not in have:
                if count >= most:
                    refused.append(group_id)
                else:
                    count += 1
        return refused

    def limit_message(self, group_id: str) -> str:
        most = self._broker.get("group.config.max.groups")
        return (f"group {group_id!r} cannot get configs: {most} groups already have configs "
                "(group.config.max.groups); remove the configs of groups no longer used")

    def staged(self, plans: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        """Every group's overrides with ``plans`` applied (a new mapping; nothing changes)."""
        merged = dict(self._overrides)
        for group_id, new in plans.items():
            if new:
                merged[group_id] = dict(new)
            else:
                merged.pop(group_id, None)
        return merged

    def write(self, overrides: Mapping[str, Mapping[str, Any]]) -> None:
        """Make ``overrides`` (a ``staged`` mapping) durable, replacing the file atomically. Safe
        on a worker thread: it only reads ``overrides``, which nobody changes.

        Raises:
            OSError: the data directory is offline, or the file could not be written (the old
                one is intact).
        """
        self.check_online()
        doc = {"version": 1, "groups": {
            gid: {name: format_value(value) for name, value in sorted(configs.items())}
            for gid, configs in sorted(overrides.items())
        }}
        atomic_write(self._path, json.dumps(doc, indent=1, sort_keys=True).encode())

    def install(self, overrides: dict[str, dict[str, Any]], changed: Iterable[str]) -> None:
        """Make ``overrides`` (written by ``write``) the live ones; ``changed`` groups' cached
        effective configs are dropped, so their next read sees the change."""
        self._overrides = overrides
        for group_id in changed:
            self._effective.pop(group_id, None)

    async def commit(self, plans: Mapping[str, Mapping[str, Any]]) -> None:
        """Apply ``plans`` (group -> new overrides, from ``plan``): one write of the file in a
        worker thread, then the change becomes visible. The caller holds ``lock`` from the
        ``plan`` calls on, so no other change slips in between.

        Raises:
            OSError: the file could not be written; nothing changed.
        """
        if self.publish is not None:
            await self.publish({
                g: {n: t for n, v in new.items() if (t := format_value(v)) is not None} or None
                for g, new in plans.items()})
            return
        merged = self.staged(plans)
        await asyncio.to_thread(self.write, merged)
        self.install(merged, plans)

    def install_texts(self, group_id: str, texts: Mapping[str, str] | None) -> None:
        """Make a group's overrides, given as text, the live ones (cluster mode: from etcd).
        Values that do not parse are logged and left out, as when loading the file."""
        overrides: dict[str, Any] = {}
        for name, raw in (texts or {}).items():
            d = GROUP_CONFIGS.get(name)
            try:
                if d is None:
                    raise ConfigError(f"unknown group config {name!r}")
                overrides[name] = self._parse(d, raw, check_bounds=False)
            except ConfigError as exc:
                log.warning("ignoring config of group %s from the cluster metadata: %s",
                            group_id, exc)
        merged = dict(self._overrides)
        if overrides:
            merged[group_id] = overrides
        else:
            merged.pop(group_id, None)
        self.install(merged, (group_id,))

    # ------------------------------------------------------------------ helpers

    def _parse(self, d: ConfigDef, raw: Any, *, check_bounds: bool = True) -> Any:
        value = parse_value(d, raw)
        if d.name == "share.auto.offset.reset":
            value, _ = parse_auto_offset_reset(value)
        bounds = _BOUNDS.get(d.name)
        if bounds is not None and check_bounds:
            lo, hi = self._broker.get(bounds[0]), self._broker.get(bounds[1])
            if not lo <= value <= hi:
                raise ConfigError(f"{d.name}={raw}: must be between {lo} and {hi} "
                                  f"(broker configs {bounds[0]} and {bounds[1]})")
        return value

    def _check_heartbeat(self, overrides: Mapping[str, Any]) -> None:
        def effective(name: str) -> Any:
            d = GROUP_CONFIGS[name]
            return overrides.get(name, self._broker.get(d.synonym) if d.synonym else d.default)

        for kind in ("share", "consumer"):
            hb = effective(f"{kind}.heartbeat.interval.ms")
            session = effective(f"{kind}.session.timeout.ms")
            if hb >= session:
                raise ConfigError(f"{kind}.heartbeat.interval.ms ({hb}) must be less than "
                                  f"{kind}.session.timeout.ms ({session})")

    @staticmethod
    def _check_backoff(overrides: Mapping[str, Any]) -> None:
        def effective(name: str) -> Any:
            return overrides.get(name, GROUP_CONFIGS[name].default)

        backoff = effective("share.delivery.backoff.ms")
        most = effective("share.delivery.backoff.max.ms")
        if backoff > most:
            raise ConfigError(f"share.delivery.backoff.ms ({backoff}) must not be greater than "
                              f"share.delivery.backoff.max.ms ({most}); raise the maximum too")

    def _check_dead_letter(self, overrides: Mapping[str, Any]) -> None:
        name = overrides.get("errors.deadletterqueue.topic.name", "")
        if not name:
            return
        problem = topic_name_problem(name) or dlq_topic_name_problem(
            name, self._broker.get("errors.deadletterqueue.topic.name.prefix"))
        if problem:
            raise ConfigError(f"errors.deadletterqueue.topic.name={name}: {problem}")

