"""Broker and topic configuration, using Kafka's config names.

Configs come from (lowest to highest precedence) the built-in defaults below, a Java-style
``.properties`` file (``--config``), and command-line options. Each broker config is declared once
in ``BROKER_CONFIGS`` with its type, default, validator and a line of documentation; the same table
feeds DescribeConfigs and validates IncrementalAlterConfigs. Topic configs
(``TOPIC_CONFIGS``) fall back to the broker config named in ``synonym`` as in Kafka.

Any other name is rejected with a ``ConfigError`` that suggests the closest declared name, so a
typo in a properties file or ``--override`` stops the broker instead of being ignored. The one
exception is ``NO_EFFECT_KAFKA_CONFIGS``: real Kafka broker configs that mean nothing for a single
Shoal process. They are accepted at startup, so a ``server.properties`` copied from a Kafka install
keeps working, and each one logs a warning that it has no effect (as Kafka's
``AbstractConfig.logUnused`` warns about supplied configs it does not use).

Invariant: a ``BrokerConfig`` only ever holds validated values of the declared type.

The tables live beside this module: ``config_types.py`` (``ConfigDef``, validators, value
parsing), ``config_defs.py`` (the broker table and the no-effect Kafka configs) and
``topic_configs.py`` (the topic table and its broker synonyms).
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from broker.config_defs import (
    _SASL_MECHANISMS,
    _SEE_README,
    BROKER_CONFIGS,
    CONSUMER_BOUNDED,
    LISTENER_PREFIX,
    NO_EFFECT_KAFKA_CONFIGS,
    SHARE_BOUNDED,
    share_bounds_problem,
    unknown_broker_config_problem,
)
from broker.config_types import (
    LONG_MAX,
    ConfigDef,
    ConfigError,
    at_least,
    between,
    cleanup_policies,
    cleanup_policy_problem,
    format_value,
    one_of,
    parse_listener,
    parse_value,
)
from broker.security.listeners import Listener, ListenerError, parse_listeners
from broker.topic_configs import TOPIC_CONFIGS, topic_config_value

# The config package's front door: the tables and helpers live in config_types, config_defs and
# topic_configs; callers import them from here.
__all__ = ["BROKER_CONFIGS", "CONSUMER_BOUNDED", "LISTENER_PREFIX", "LONG_MAX",
           "NO_EFFECT_KAFKA_CONFIGS", "SHARE_BOUNDED", "TOPIC_CONFIGS", "BrokerConfig",
           "ConfigDef", "ConfigError", "at_least", "between", "cleanup_policies",
           "cleanup_policy_problem", "format_value", "one_of", "parse_listener", "parse_value",
           "read_properties", "share_bounds_problem", "topic_config_value",
           "unknown_broker_config_problem"]


log = logging.getLogger("shoal.config")


def read_properties(path: Path) -> dict[str, str]:
    """Parse a Java-style properties file (``key=value`` or ``key: value``; ``#``/``!`` comments).

    Raises:
        ConfigError: a non-comment line has no separator.
    """
    out: dict[str, str] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        s = line.strip()
        if not s or s[0] in "#!":
            continue
        for sep in ("=", ":"):
            if sep in s:
                k, v = s.split(sep, 1)
                out[k.strip()] = v.strip()
                break
        else:
            raise ConfigError(f"{path}:{lineno}: expected key=value, got {s!r}")
    return out


class BrokerConfig:
    """Validated broker configs; dynamic ones can change while the broker runs."""

    def __init__(self, overrides: Mapping[str, Any] | None = None) -> None:
        self._values: dict[str, Any] = {d.name: d.default for d in BROKER_CONFIGS.values()}
        self._explicit: set[str] = set()
        # Where a value came from, for DescribeConfigs (Kafka's STATIC_BROKER_CONFIG vs
        # DYNAMIC_BROKER_CONFIG): values given at startup, and names changed while running.
        self._static: dict[str, Any] = {}
        self._dynamic: set[str] = set()
        self._listeners: list[Callable[[str], None]] = []
        # listener.name.<listener>.<config> values (startup only), and the raw values of the
        # accepted no-effect Kafka configs (controller.listener.names drops listeners).
        self._per_listener: dict[str, Any] = {}
        self._no_effect: dict[str, str] = {}
        for name, raw in (overrides or {}).items():
            self.set(name, raw, initial=True)
        problem = share_bounds_problem(self.get)
        if problem:
            raise ConfigError(problem)
        self._check_listeners()

    def set(self, name: str, raw: Any, *, initial: bool = False) -> None:
        """Set a config from its raw value. At startup (``initial``) a name in
        ``NO_EFFECT_KAFKA_CONFIGS`` is accepted, logged and not stored.

        Raises:
            ConfigError: unknown name (the message suggests the closest known one), invalid
                value, or not dynamic (after startup).
        """
        d = BROKER_CONFIGS.get(name)
        if d is None:
            if initial and name in NO_EFFECT_KAFKA_CONFIGS:
                log.warning("broker config %s=%s is accepted but has no effect in Shoal: %s",
                            name, raw, NO_EFFECT_KAFKA_CONFIGS[name])
                self._no_effect[name] = str(raw)
                return
            if initial and name.startswith(LISTENER_PREFIX):
                self._per_listener[name] = _parse_per_listener(name, raw)
                return
            raise ConfigError(unknown_broker_config_problem(name))
        if not initial and not d.dynamic:
            raise ConfigError(f"{name} cannot be changed while the broker runs; restart with it set")
        value = parse_value(d, raw) if initial else self.check(name, raw)
        self._values[name] = value
        self._explicit.add(name)
        if initial:
            self._static[name] = value
        else:
            self._dynamic.add(name)
        for cb in self._listeners:
            cb(name)

    def check(self, name: str, raw: Any) -> Any:
        """The parsed value ``set`` would store for a runtime change, without storing it.

        Raises:
            ConfigError: unknown name, invalid value, or inconsistent with related configs.
        """
        d = BROKER_CONFIGS.get(name)
        if d is None:
            raise ConfigError(unknown_broker_config_problem(name))
        value = parse_value(d, raw)
        if name.startswith(("group.share.", "group.consumer.")):
            problem = share_bounds_problem(lambda n: value if n == name else self._values[n])
            if problem:
                raise ConfigError(f"{name}={raw}: {problem}")
        return value

    def reset(self, name: str) -> None:
        """Drop a runtime change: back to the startup value, or the default if none was given.

        Raises:
            ConfigError: unknown or not dynamic.
        """
        d = BROKER_CONFIGS.get(name)
        if d is None or not d.dynamic:
            raise ConfigError(f"{name} is not a dynamic broker config")
        self._dynamic.discard(name)
        if name in self._static:
            self._values[name] = self._static[name]
        else:
            self._values[name] = d.default
            self._explicit.discard(name)
        for cb in self._listeners:
            cb(name)

    def source(self, name: str) -> str:
        """``"dynamic"`` (changed at runtime), ``"static"`` (given at startup) or ``"default"``."""
        if name in self._dynamic:
            return "dynamic"
        if name in self._static:
            return "static"
        return "default"

    def static_value(self, name: str) -> Any:
        """The value given at startup, or None if the config was not given."""
        return self._static.get(name)

    def dynamic_names(self) -> list[str]:
        """Names of the configs changed while the broker runs."""
        return sorted(self._dynamic)

    def on_change(self, cb: Callable[[str], None]) -> None:
        self._listeners.append(cb)

    def get(self, name: str) -> Any:
        return self._values[name]

    def is_default(self, name: str) -> bool:
        return name not in self._explicit

    def items(self) -> list[tuple[str, Any]]:
        return sorted((k, v) for k, v in self._values.items() if k in BROKER_CONFIGS)

    def as_mapping(self) -> dict[str, Any]:
        """Every declared value plus the ``listener.name.*`` ones, for
        ``broker.security.listeners.listener_config`` and the TLS/SASL builders."""
        return {**self._values, **self._per_listener}

    @property
    def listeners(self) -> list[Listener]:
        """The listeners to serve (without controller listeners), as ``_check_listeners``
        validated them."""
        return parse_listeners(
            self._values["listeners"], self._values["listener.security.protocol.map"],
            self._values["advertised.listeners"], self._values["inter.broker.listener.name"],
            exclude=self._no_effect.get("controller.listener.names", "").split(","))

    def _check_listeners(self) -> None:
        """Raises:
            ConfigError: the listener configs are inconsistent (``parse_listeners``).
        """
        try:
            names = {x.name.lower() for x in self.listeners}
        except ListenerError as exc:
            raise ConfigError(str(exc)) from None
        for key in self._per_listener:
            listener = key[len(LISTENER_PREFIX):].split(".", 1)[0]
            if listener not in names:
                log.warning("broker config %s is for listener %s, which is not in listeners",
                            key, listener.upper())

    # Typed accessors for the hot paths.
    @property
    def node_id(self) -> int:
        return int(self._values["node.id"])

    @property
    def data_dir(self) -> Path:
        return Path(self._values["log.dirs"].split(",")[0])

    @property
    def listen(self) -> tuple[str, int]:
        return parse_listener(self._values["listeners"])

    @property
    def advertised(self) -> tuple[str, int]:
        adv = self._values["advertised.listeners"]
        return parse_listener(adv) if adv else self.listen


def _parse_per_listener(name: str, raw: Any) -> Any:
    """Parse ``listener.name.<listener>.<config>``: a declared config (validated as such) or a
    SASL mechanism's ``<mechanism>.sasl.*`` config (kept as text).

    Raises:
        ConfigError: no listener name, or an unknown config after it.
    """
    listener, _, key = name[len(LISTENER_PREFIX):].partition(".")
    if not listener or not key:
        raise ConfigError(f"{name}: expected {LISTENER_PREFIX}<listener>.<config>")
    if listener != listener.lower():
        raise ConfigError(f"{name}: the listener name in {LISTENER_PREFIX}<listener>. must be "
                          f"lower case ({listener.lower()})")
    d = BROKER_CONFIGS.get(key)
    if d is not None:
        return parse_value(d, raw)
    mechanism, _, sasl_key = key.partition(".")
    if mechanism.upper() in _SASL_MECHANISMS and sasl_key.startswith("sasl."):
        return str(raw).strip()
    close = difflib.get_close_matches(key, list(BROKER_CONFIGS), n=1)
    hint = f"did you mean {LISTENER_PREFIX}{listener}.{close[0]}?" if close else \
        "check the spelling or remove it."
    raise ConfigError(f"unknown broker config {name!r}; {hint} {_SEE_README}")
