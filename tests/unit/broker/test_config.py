"""Broker config names: unknown names are rejected with a suggestion, real Kafka configs that mean
nothing for Shoal are accepted with a warning, and declared configs work as before. Covers the
three ways a config arrives: a properties file or --override (``build_config``), a runtime change
(``BrokerConfig.set``/``check``), and IncrementalAlterConfigs on a BROKER resource."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker.app import Broker
from broker.config import (
    BROKER_CONFIGS,
    NO_EFFECT_KAFKA_CONFIGS,
    BrokerConfig,
    ConfigError,
    format_value,
)
from broker.handlers.describe_configs import ResourceType
from broker.handlers.incremental_alter_configs import AlterOp, OpType, alter
from broker.main import build_config

# (name given, name suggested or None). Names under group./share./offsets. used to be accepted
# and ignored without a word.
TYPOS = [
    ("group.share.record.lock.duraton.ms", "group.share.record.lock.duration.ms"),
    ("group.share.max.sesion.timeout.ms", "group.share.max.session.timeout.ms"),
    ("share.coordinator.state.topic.num.partition", "share.coordinator.state.topic.num.partitions"),
    ("offsets.topic.num.partition", "offsets.topic.num.partitions"),
    ("offsets.topic.replication.factr", "offsets.topic.replication.factor"),  # a no-effect name
    ("nodeid", "node.id"),
    ("zookeeper.connect", None),
    ("group.no.such.thing", None),
    ("sharex", None),
]


@pytest.mark.parametrize(("name", "suggested"), TYPOS, ids=[n for n, _ in TYPOS])
def test_unknown_name_is_rejected_with_a_suggestion(name: str, suggested: str | None) -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig({name: "5000"})
    message = str(info.value)
    assert message.startswith(f"unknown broker config {name!r}; ")
    if suggested is None:
        assert "did you mean" not in message and "check the spelling" in message
    else:
        assert f"did you mean {suggested!r}?" in message
    assert "docs/configuration.md" in message


def test_the_typo_from_the_report_reads_well() -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig({"group.share.record.lock.duraton.ms": "5000"})
    assert str(info.value) == (
        "unknown broker config 'group.share.record.lock.duraton.ms'; did you mean "
        "'group.share.record.lock.duration.ms'? See docs/configuration.md for the broker "
        "configs.")


@pytest.mark.parametrize("name", sorted(NO_EFFECT_KAFKA_CONFIGS))
def test_a_no_effect_kafka_config_is_accepted_with_one_warning(
        name: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="shoal.config"):
        cfg = BrokerConfig({name: "1"})
    warning = (f"broker config {name}=1 is accepted but has no effect in Shoal: "
               f"{NO_EFFECT_KAFKA_CONFIGS[name]}")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [(logging.WARNING, warning)]
    # Not stored: a BrokerConfig only holds declared configs.
    assert name not in dict(cfg.items())
    with pytest.raises(KeyError):
        cfg.get(name)


def test_no_effect_names_are_not_declared_configs() -> None:
    assert not set(NO_EFFECT_KAFKA_CONFIGS) & set(BROKER_CONFIGS)


def test_the_configuration_page_lists_every_no_effect_name() -> None:
    readme = (Path(__file__).parents[3] / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert [n for n in NO_EFFECT_KAFKA_CONFIGS if f"`{n}`" not in readme] == []


@pytest.mark.parametrize("name", ["transaction.state.log.min.isr", "group.share.enable"])
def test_a_no_effect_kafka_config_cannot_be_set_at_runtime(name: str) -> None:
    cfg = BrokerConfig()
    for change in (cfg.set, cfg.check):
        with pytest.raises(ConfigError, match=rf"^{name} has no effect in Shoal \(.*\) and "
                                              "cannot be changed while the broker runs$"):
            change(name, "1")


def test_a_typo_is_rejected_at_runtime_too() -> None:
    cfg = BrokerConfig()
    for change in (cfg.set, cfg.check):
        with pytest.raises(ConfigError, match="did you mean 'group.share.assignment.interval.ms'"):
            change("group.share.assignment.interval.msec", "2000")


def test_every_declared_config_is_accepted_at_its_default() -> None:
    cfg = BrokerConfig({name: format_value(d.default) for name, d in BROKER_CONFIGS.items()})
    assert dict(cfg.items()) == {name: d.default for name, d in BROKER_CONFIGS.items()}


def test_declared_configs_still_work() -> None:
    cfg = BrokerConfig({"group.share.record.lock.duration.ms": "20000",
                        "offsets.topic.num.partitions": "3",
                        "share.coordinator.append.fsync": "false"})
    assert cfg.get("group.share.record.lock.duration.ms") == 20000
    assert cfg.get("offsets.topic.num.partitions") == 3
    assert cfg.get("share.coordinator.append.fsync") is False
    cfg.set("producer.id.expiration.ms", "2000")
    assert cfg.get("producer.id.expiration.ms") == 2000


# ------------------------------------------------------------- properties file and --override

# The KRaft part of Kafka's config/server.properties and of share-group docker-compose setups.
KAFKA_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=localhost:9093
listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
group.coordinator.rebalance.protocols=classic,consumer,share
group.initial.rebalance.delay.ms=0
"""


def _args(tmp_path: Path, properties: str | None, *overrides: str) -> argparse.Namespace:
    config = None
    if properties is not None:
        config = tmp_path / "server.properties"
        config.write_text(properties)
    return argparse.Namespace(config=config, override=list(overrides), listen=None,
                              data_dir=str(tmp_path / "data"), metrics_listen=None)


def test_a_kafka_properties_file_loads_and_says_what_it_ignores(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="shoal.config"):
        cfg = build_config(_args(tmp_path, KAFKA_PROPERTIES))
    assert cfg.listen == ("127.0.0.1", 9092)
    given = [line.split("=")[0] for line in KAFKA_PROPERTIES.splitlines()]
    warned = [r.getMessage().split()[2].split("=")[0] for r in caplog.records]
    assert warned == [n for n in given if n in NO_EFFECT_KAFKA_CONFIGS]
    assert len(warned) == 11  # every line but the 12 declared configs


def test_a_typo_in_a_properties_file_stops_the_broker(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="did you mean 'group.share.record.lock.duration.ms'"):
        build_config(_args(tmp_path, KAFKA_PROPERTIES + "group.share.record.lock.duraton.ms=5000\n"))


def test_a_typo_in_an_override_stops_the_broker(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown broker config 'share.coordinator.append.fsynk'"):
        build_config(_args(tmp_path, None, "share.coordinator.append.fsynk=false"))


# ------------------------------------------------------------------ IncrementalAlterConfigs

ALTERS = [
    ("group.share.record.lock.duraton.ms", ErrorCode.invalid_config),
    ("group.no.such.thing", ErrorCode.invalid_config),
    ("transaction.state.log.min.isr", ErrorCode.invalid_config),  # no effect, not alterable
    ("producer.id.expiration.ms", ErrorCode.none),
    # Only 0 is honoured (assignments are computed at once): refused, not ignored (issue 25).
    ("group.share.assignment.interval.ms", ErrorCode.invalid_config),
]


@pytest.mark.parametrize(("name", "error"), ALTERS, ids=[n for n, _ in ALTERS])
def test_incremental_alter_configs_rejects_unknown_broker_configs(
        tmp_path: Path, name: str, error: ErrorCode) -> None:
    broker = Broker(BrokerConfig({"log.dirs": str(tmp_path)}))  # never started: no I/O
    code, message = alter(broker, ResourceType.BROKER, "", [AlterOp(name, OpType.SET, "2000")],
                          validate_only=False)
    assert code == error
    if error != ErrorCode.none:
        assert message is not None and name in message
    else:
        assert broker.config.get(name) == 2000


@pytest.mark.parametrize(("name", "value", "problem"), [
    ("group.consumer.session.timeout.ms", "30000", "must be between group.consumer.min"),
    ("group.consumer.heartbeat.interval.ms", "20000", "and group.consumer.max.heartbeat"),
    ("group.consumer.assignors", "sticky", "unknown assignor"),
    ("group.consumer.migration.policy", "sideways", "must be one of bidirectional, upgrade"),
])
def test_consumer_group_configs_are_checked(name: str, value: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        BrokerConfig().check(name, value)


def test_migration_policy_defaults_to_bidirectional_and_takes_kafkas_values() -> None:
    config = BrokerConfig()
    assert config.get("group.consumer.migration.policy") == "bidirectional"
    for value in ("upgrade", "Downgrade", "DISABLED", "bidirectional"):
        assert config.check("group.consumer.migration.policy", value) == value


def test_consumer_assignors_accept_kafka_class_names() -> None:
    from coordinator.group.consumer.assignor import consumer_assignors

    value = "org.apache.kafka.coordinator.group.assignor.RangeAssignor,uniform"
    assert BrokerConfig().check("group.consumer.assignors", value) == value
    assert consumer_assignors(value) == ("range", "uniform")


@pytest.mark.parametrize(("name", "default"), [
    ("log.cleanup.policy", "delete"), ("log.cleaner.enable", True),
    ("log.cleaner.backoff.ms", 15_000), ("log.cleaner.min.cleanable.ratio", 0.5),
    ("log.cleaner.min.compaction.lag.ms", 0), ("log.cleaner.max.compaction.lag.ms", 2**63 - 1),
    ("log.cleaner.delete.retention.ms", 86_400_000),
    ("log.cleaner.dedupe.buffer.size", 128 * 1024 * 1024),
])
def test_log_cleaner_configs_have_kafka_names_and_defaults(name: str, default: object) -> None:
    assert BrokerConfig().get(name) == default


@pytest.mark.parametrize("value", ["compact", "delete", "compact,delete", "delete, compact"])
def test_cleanup_policy_accepts_kafka_values(value: str) -> None:
    BrokerConfig({"log.cleanup.policy": value})


@pytest.mark.parametrize("value", ["", "shred", "compact,shred", "compact,,delete"])
def test_cleanup_policy_refuses_other_values(value: str) -> None:
    with pytest.raises(ConfigError, match="compact"):
        BrokerConfig({"log.cleanup.policy": value})
