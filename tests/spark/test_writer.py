"""The ``shoal`` batch writer (issue 8, must-show 4) and its errors."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.share_helpers import drain, set_group_configs, share_consumer


def test_writer_round_trips_rows_that_a_share_consumer_reads(spark: Any, broker: BrokerProcess,
                                                            unique: str) -> None:
    topic = unique
    create_topic(broker.bootstrap, topic, partitions=2)
    rows = [(f"k{i}".encode(), f"v{i}".encode(), [("n", str(i).encode()), ("flag", None)])
            for i in range(10_000)]
    df = spark.createDataFrame(
        rows, "key binary, value binary, headers array<struct<key: string, value: binary>>")
    (df.repartition(3).write.format("shoal").option("kafka.bootstrap.servers", broker.bootstrap)
     .option("topic", topic).mode("append").save())

    group = f"{unique}-g"
    set_group_configs(broker.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    consumer = share_consumer(broker.bootstrap, group, topic)
    try:
        got: list[Any] = []
        for _ in range(60):
            got += drain(consumer, 0.5)
            if len(got) >= 10_000:
                break
    finally:
        consumer.close()
    assert len(got) == 10_000
    by_key = {m.key(): m for m in got}
    assert len(by_key) == 10_000
    for i in (0, 4_321, 9_999):
        m = by_key[f"k{i}".encode()]
        assert m.value() == f"v{i}".encode()
        assert m.headers() == [("n", str(i).encode()), ("flag", None)]


def test_writer_takes_string_values_and_a_topic_column(spark: Any, broker: BrokerProcess,
                                                       unique: str) -> None:
    create_topic(broker.bootstrap, unique, partitions=1)
    df = spark.createDataFrame([(unique, "hello"), (unique, "world")], "topic string, value string")
    df.write.format("shoal").option("kafka.bootstrap.servers", broker.bootstrap).mode("append").save()
    group = f"{unique}-g"
    set_group_configs(broker.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    consumer = share_consumer(broker.bootstrap, group, unique)
    try:
        got = drain(consumer, 3)
    finally:
        consumer.close()
    assert sorted(m.value() for m in got) == [b"hello", b"world"]


def test_writer_without_a_value_column_says_so(spark: Any, broker: BrokerProcess) -> None:
    df = spark.createDataFrame([("x",)], "payload string")
    with pytest.raises(Exception, match="needs a 'value' column"):
        (df.write.format("shoal").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("topic", "t").mode("append").save())
