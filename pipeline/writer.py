"""``df.write.format("shoal")``: a batch writer that produces DataFrame rows to topics.

Columns, as Spark's Kafka sink names them: ``value`` (required; binary or string), ``key``
(optional), ``headers`` (optional ``array<struct<key: string, value: binary>>``), ``topic``
(optional when the ``topic`` option is set; the option wins, as in Spark's Kafka sink) and
``partition`` (optional int). Each Spark task runs one confluent-kafka Producer with
``acks=all`` and idempotence, flushes it before it reports success, and fails the task if any
record was not acknowledged. Like Spark's Kafka sink it is at-least-once: a retried task
produces its rows again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from pipeline.options import OptionError, WriterOptions
from pipeline.rows import headers_of

log = logging.getLogger("pipeline.writer")

_FLUSH_TIMEOUT_S = 120.0


@dataclass
class ProducedCount(WriterCommitMessage):
    records: int


class ShoalSink(DataSource):
    """The ``shoal`` data source: a batch writer (register with ``spark.dataSource.register``)."""

    @classmethod
    def name(cls) -> str:
        return "shoal"

    def writer(self, schema: StructType, overwrite: bool) -> ShoalWriter:
        options = WriterOptions.parse(self.options)
        names = set(schema.fieldNames())
        if "value" not in names:
            raise OptionError("the DataFrame needs a 'value' column (binary or string) to write "
                              f"to Shoal; it has {sorted(names)}")
        if options.topic is None and "topic" not in names:
            raise OptionError("say where to write: .option('topic', ...) or a 'topic' column")
        return ShoalWriter(options)


def _bytes(v: Any) -> bytes | None:
    if v is None:
        return None
    if isinstance(v, str):
        return v.encode()
    return bytes(v)


class ShoalWriter(DataSourceWriter):
    def __init__(self, options: WriterOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> ProducedCount:
        # Lazy: confluent-kafka is optional (the spark extra); only executors that write need it.
        from confluent_kafka import KafkaException, Producer

        config = {"bootstrap.servers": self.options.bootstrap_servers, "acks": "all",
                  "enable.idempotence": True, "linger.ms": 5}
        config.update(dict(self.options.producer_config))
        producer = Producer(config)
        failures: list[str] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None and len(failures) < 10:
                failures.append(f"{msg.topic()}: {err}")

        count = 0
        for row in iterator:
            d = row.asDict() if hasattr(row, "asDict") else dict(row)
            topic = self.options.topic or d.get("topic")
            if not topic:
                raise ValueError(f"row {count} has no topic and no 'topic' option is set")
            kwargs: dict[str, Any] = {"value": _bytes(d.get("value")), "key": _bytes(d.get("key")),
                                      "on_delivery": delivered}
            headers = headers_of(d.get("headers"))
            if headers:
                kwargs["headers"] = headers
            if d.get("partition") is not None:
                kwargs["partition"] = int(d["partition"])
            while True:
                try:
                    producer.produce(topic, **kwargs)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.1)
                except KafkaException as e:
                    raise RuntimeError(f"producing to {topic!r} failed: {e}") from e
            producer.poll(0)
            count += 1
        left = producer.flush(_FLUSH_TIMEOUT_S)
        if left:
            raise RuntimeError(f"{left} records were still unacknowledged after "
                               f"{_FLUSH_TIMEOUT_S:.0f} s; is the broker at "
                               f"{self.options.bootstrap_servers} up?")
        if failures:
            raise RuntimeError(f"the broker refused records: {'; '.join(failures)}")
        return ProducedCount(count)

    def commit(self, messages: list[Any]) -> None:
        total = sum(m.records for m in messages if isinstance(m, ProducedCount))
        log.info("wrote %d records to Shoal", total)

    def abort(self, messages: list[Any]) -> None:
        done = sum(m.records for m in messages if isinstance(m, ProducedCount))
        log.warning("write to Shoal aborted; %d records from finished tasks were already "
                    "produced and stay in the topic", done)
