"""Options of the ``shoal-share`` source and the ``shoal`` writer, parsed and checked once.

Spark hands a data source its options as a case-insensitive dict of strings. Everything a
mistyped or missing option can break is checked here, on the driver, before a consumer or
producer exists, and the error names the option and says what to pass instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from client.security import (
    SecurityConfigError,
    SecuritySettings,
    is_security_property,
    librdkafka_config,
)


class OptionError(ValueError):
    """A missing or invalid option; the message names it."""


def _get(options: Mapping[str, str], *names: str) -> str | None:
    lowered = {k.lower(): v for k, v in options.items()}
    for name in names:
        value = lowered.get(name.lower())
        if value is not None and str(value).strip() != "":
            return str(value).strip()
    return None


def _required(options: Mapping[str, str], *names: str) -> str:
    value = _get(options, *names)
    if value is None:
        raise OptionError(f"option {names[0]!r} is required, e.g. "
                          f".option({names[0]!r}, ...)")
    return value


def _int(options: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option {name!r} must be an integer, not {raw!r}") from None
    if not lo <= value <= hi:
        raise OptionError(f"option {name!r} must be between {lo} and {hi}, not {value}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    if raw.lower() in ("true", "1", "yes"):
        return True
    if raw.lower() in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name!r} must be true or false, not {raw!r}")


def _choice(options: Mapping[str, str], name: str, allowed: tuple[str, ...], default: str) -> str:
    raw = _get(options, name)
    if raw is None:
        return default
    if raw.lower() not in allowed:
        raise OptionError(f"option {name!r} must be one of {', '.join(allowed)}, not {raw!r}")
    return raw.lower()


def _security(options: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The ``kafka.``-prefixed security options (``kafka.security.protocol``,
    ``kafka.sasl.mechanism``, ``kafka.ssl.ca.location``, ...) without the prefix, checked.

    Raises:
        OptionError: a bad value (the message names the ``kafka.`` option, never a password).
    """
    props = {k[len("kafka."):].lower(): str(v).strip() for k, v in options.items()
             if k.lower().startswith("kafka.") and is_security_property(k[len("kafka."):].lower())
             and str(v).strip() != ""}
    try:
        SecuritySettings.from_properties(props)
    except SecurityConfigError as exc:
        raise OptionError(f"{exc} (set as Spark options with the 'kafka.' prefix, e.g. "
                          ".option('kafka.security.protocol', 'SASL_SSL'))") from None
    return tuple(sorted(props.items()))


def _topics(raw: str, name: str) -> tuple[str, ...]:
    topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
    if not topics:
        raise OptionError(f"option {name!r} names no topic")
    return topics


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """What ``spark.readStream.format("shoal-share")`` was asked for."""

    bootstrap_servers: str
    group_id: str
    topics: tuple[str, ...]
    # One ShareFetch fills one micro-batch, hard-capped at this many records (record_limit mode).
    max_records_per_batch: int = 10_000
    # False: a dry run. Records are released, never accepted, when their batch commits.
    acknowledge: bool = True
    # True: fail the query when the broker refuses the acknowledgement of a committed batch
    # (its locks lapsed, so its records may go to another consumer or be archived).
    fail_on_data_loss: bool = True
    # How long latestOffset() waits for records before reporting "no new data".
    poll_timeout_ms: int = 500
    # Keep the locks of an in-flight batch alive with RENEW while Spark processes it.
    renew_locks: bool = True
    # Trigger.AvailableNow ends after polls have come back empty for this long.
    available_now_quiet_ms: int = 2_000
    # Spark partitions per micro-batch; 0 means one per topic-partition in the batch.
    num_partitions: int = 0
    # A second member polls the next batch while Spark processes the current one.
    prefetch: bool = True
    client_id: str = "shoal-spark-source"
    # How records reach the executors: "inline" in the input partitions, or "tcp" from a
    # server in the driver at driver_host (pipeline/transport.py).
    transport: str = "inline"
    driver_host: str = "127.0.0.1"
    # Security properties from ``kafka.security.protocol``, ``kafka.sasl.*`` and ``kafka.ssl.*``
    # (client/security.py), without the prefix. Kept out of repr: they hold passwords.
    security: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        bootstrap = _required(options, "kafka.bootstrap.servers", "bootstrap.servers")
        group = _required(options, "group.id", "kafka.group.id")
        if _get(options, "subscribePattern", "assign") is not None:
            raise OptionError("only 'subscribe' is supported: a share group subscribes to topic "
                              "names ('subscribePattern' and 'assign' do not apply)")
        topics = _topics(_required(options, "subscribe"), "subscribe")
        return cls(
            bootstrap_servers=bootstrap, group_id=group, topics=topics,
            max_records_per_batch=_int(options, "maxRecordsPerBatch", 10_000, 1, 10_000_000),
            acknowledge=_bool(options, "acknowledge", True),
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            poll_timeout_ms=_int(options, "pollTimeoutMs", 500, 0, 600_000),
            renew_locks=_bool(options, "renewLocks", True),
            available_now_quiet_ms=_int(options, "availableNowQuietMs", 2_000, 0, 3_600_000),
            num_partitions=_int(options, "numPartitions", 0, 0, 100_000),
            prefetch=_bool(options, "prefetch", True),
            client_id=_get(options, "kafka.client.id", "client.id") or "shoal-spark-source",
            transport=_choice(options, "transport", ("inline", "tcp"), "inline"),
            driver_host=_get(options, "driverHost") or "127.0.0.1",
            security=_security(options),
        )


@dataclass(frozen=True, slots=True)
class WriterOptions:
    """What ``df.write.format("shoal")`` was asked for."""

    bootstrap_servers: str
    topic: str | None
    # Extra librdkafka producer settings, from options named ``kafka.<setting>``; security
    # properties in Java's names (sasl.jaas.config, PEM ssl.truststore/keystore) are translated
    # to librdkafka's. Kept out of repr: they may hold passwords.
    producer_config: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriterOptions:
        bootstrap = _required(options, "kafka.bootstrap.servers", "bootstrap.servers")
        extra = {k[len("kafka."):]: str(v) for k, v in options.items()
                 if k.lower().startswith("kafka.") and k.lower() != "kafka.bootstrap.servers"}
        try:
            translated = librdkafka_config(extra)
        except SecurityConfigError as exc:
            raise OptionError(f"option 'kafka.sasl.jaas.config': {exc}") from None
        return cls(bootstrap_servers=bootstrap, topic=_get(options, "topic"),
                   producer_config=tuple(sorted(translated.items())))
