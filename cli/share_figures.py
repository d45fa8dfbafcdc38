"""Age and drain figures for ``shoal share-groups --describe``, read from the broker's /metrics.

The Kafka protocol has no field for them (DescribeShareGroupOffsets carries start offset and lag
only), and a new Shoal-only RPC would be one more thing for proxies and ACLs to know. The broker
already publishes every figure on its Prometheus endpoint (docs/queues.md "Age and drain
metrics"), so the CLI reads them there:

- ``--metrics-url URL`` names the endpoint (``http://host:9404/metrics``);
- otherwise the CLI asks the group coordinator for its ``metrics.listen`` config
  (DescribeConfigs, BROKER resource; DESCRIBE_CONFIGS on the cluster) and, when the broker serves
  metrics, scrapes ``http://<coordinator host>:<port>/metrics`` (a wildcard listen address is
  replaced by the host the CLI reached the coordinator at).

With neither (metrics off, or the config not readable) describe prints Kafka's columns only, so
scripts written for kafka-share-groups.sh keep working. An explicit ``--metrics-url`` that cannot
be read is an error; a discovered one that cannot be read only leaves the columns out, with a
note on stderr.
"""

from __future__ import annotations

import math
import re
import urllib.error
import urllib.request
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from cli.wire import CliError, Connection, Node
from protocol.codec import request_module
from protocol.messages import make

DESCRIBE_CONFIGS = 32
BROKER_RESOURCE = 4
METRICS_LISTEN = "metrics.listen"
MAX_SCRAPE_BYTES = 64 << 20

AGE = "shoal_share_partition_oldest_unacked_append_age_seconds"
IN_FLIGHT = "shoal_share_partition_acquired_records"
ETA = "shoal_share_partition_drain_eta_seconds"
RATE = "shoal_share_partition_drain_rate"
SINCE_PROGRESS = "shoal_share_partition_seconds_since_progress"
_WANTED = (AGE, IN_FLIGHT, ETA, RATE, SINCE_PROGRESS)

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:\\.|[^"\\])*)"')
_WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")


@dataclass(frozen=True, slots=True)
class PartitionFigures:
    """One share-partition's figures as the broker published them."""

    in_flight: int | None = None
    oldest_unacked_s: float | None = None
    drain_eta_s: float | None = None  # math.inf: records wait and none completes
    drain_rate: float | None = None
    #: Seconds without a completed record while records wait (math.inf: none since the
    #: share-partition was loaded on its broker; 0.0 without lag).
    since_progress_s: float | None = None


Figures = dict[tuple[str, str, int], PartitionFigures]


def _unescape(value: str) -> str:
    return value.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")


def parse(text: str, group_ids: set[str]) -> Figures:
    """(group, topic, partition) -> figures, from Prometheus text, for ``group_ids`` only."""
    values: dict[tuple[str, str, int], dict[str, float]] = {}
    for line in text.splitlines():
        if not line.startswith("shoal_share_partition_"):
            continue
        m = _SAMPLE.match(line)
        if m is None or m.group(1) not in _WANTED:
            continue
        labels = {k: _unescape(v) for k, v in _LABEL.findall(m.group(2))}
        group = labels.get("group")
        if group not in group_ids:
            continue
        try:
            key = (group, labels["topic"], int(labels["partition"]))
            value = float(m.group(3))
        except (KeyError, ValueError):
            continue
        values.setdefault(key, {})[m.group(1)] = value
    out: Figures = {}
    for key, v in values.items():
        in_flight = v.get(IN_FLIGHT)
        out[key] = PartitionFigures(
            in_flight=None if in_flight is None else int(in_flight),
            oldest_unacked_s=v.get(AGE), drain_eta_s=v.get(ETA), drain_rate=v.get(RATE),
            since_progress_s=v.get(SINCE_PROGRESS))
    return out


def discover_url(conn: Connection, node: Node) -> str | None:
    """The coordinator's /metrics URL from its ``metrics.listen`` config, or None."""
    try:
        m = request_module(DESCRIBE_CONFIGS, conn.version(DESCRIBE_CONFIGS))
        resource = make(m.DescribeConfigsResource, resource_type=BROKER_RESOURCE,
                        resource_name=str(node.node_id), configuration_keys=(METRICS_LISTEN,))
        _, resp = conn.call(DESCRIBE_CONFIGS, "DescribeConfigsRequest", resources=(resource,),
                            include_synonyms=False, include_documentation=False)
    except CliError:
        return None  # a broker without DescribeConfigs: no figures
    for r in resp.results:
        if r.error_code != ErrorCode.none:
            return None  # e.g. not authorized to describe broker configs
        for c in r.configs:
            if c.name == METRICS_LISTEN and c.value:
                host, sep, port = c.value.rpartition(":")
                if not sep or not port.isdigit() or int(port) == 0:
                    return None
                if host in _WILDCARD_HOSTS:
                    host = node.host
                if ":" in host and not host.startswith("["):
                    host = f"[{host}]"
                return f"http://{host}:{port}/metrics"
    return None


def scrape(url: str, timeout_s: float) -> str:
    """GET ``url``; its body as text.

    Raises:
        CliError: the endpoint cannot be read.
    """
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return str(resp.read(MAX_SCRAPE_BYTES).decode("utf-8", errors="replace"))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise CliError(f"cannot read metrics at {url}: {reason}") from None


def fmt_seconds(value: float | None) -> str | None:
    """A table cell: seconds with one decimal, ``inf`` for never, None (``-``) if unknown."""
    if value is None or value < 0:
        return None
    if math.isinf(value):
        return "inf"
    return f"{value:.1f}"


def json_seconds(value: float | None) -> float | None:
    """A JSON value: seconds rounded to ms; None when unknown or infinite (JSON has no inf;
    ``drain_eta_s`` null with ``lag`` > 0 means nothing completes)."""
    if value is None or value < 0 or math.isinf(value):
        return None
    return round(value, 3)
