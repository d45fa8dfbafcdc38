"""DescribeConfigs (32) v1-4: the configs of topics and of this broker, with where each comes from.

Every config in the declaring table (``broker/config.py``) is reported with its effective value,
its source, whether it can be altered, its type and (v3+, when asked) its documentation. Sources
use Kafka's ``ConfigSource`` numbering. A topic config without an override takes the value of its
broker synonym (``retention.ms`` -> ``log.retention.ms``), and reports that synonym's source, as
Kafka does. Synonyms (when asked) list every level that supplies a value, highest precedence
first, so a client can tell what a DELETE would fall back to.

Resources are described by functions in ``DESCRIBERS``, keyed by resource type. A describer
returns data, never raises: ``(error code, message, entries)``. GROUP (32) resources list the
KIP-932 share group configs (``broker/group_configs.py``), source GROUP_CONFIG when set on the
group, else that of the broker config they fall back to.
Unknown resource types are answered with INVALID_REQUEST, per resource.

Authorization (``broker/authz.py``, ``config_authorization``): DESCRIBE_CONFIGS on the topic
(TOPIC_AUTHORIZATION_FAILED), on the cluster for BROKER and BROKER_LOGGER resources
(CLUSTER_AUTHORIZATION_FAILED) and on the group (GROUP_AUTHORIZATION_FAILED); a refused resource
is answered with that error and no configs. Other types stay INVALID_REQUEST.

Broker resources are named ``""`` (Kafka: the cluster-wide default) or our node id. A single
broker has one set of broker configs, so both names describe it; any other id is INVALID_REQUEST.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import CLUSTER, Operation, Resource, refusal
from broker.authz import ResourceType as AclType
from broker.config import BROKER_CONFIGS, TOPIC_CONFIGS, ConfigDef, format_value
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from broker.wire_limits import YIELD_EVERY, Steps, paced
from broker.log.topics import topic_name_problem
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.app import Broker
    from broker.handlers._requests import DescribeConfigsRequest

API_KEY = 32
VERSIONS = (1, 4)


class ResourceType(IntEnum):
    """Kafka's ``ConfigResource.Type`` ids."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class ConfigSource(IntEnum):
    """Kafka's ``DescribeConfigsResponse.ConfigSource`` ids."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class ConfigType(IntEnum):
    """Kafka's ``DescribeConfigsResponse.ConfigType`` ids (v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


_TYPES = {"bool": ConfigType.BOOLEAN, "string": ConfigType.STRING, "int": ConfigType.INT,
          "long": ConfigType.LONG, "double": ConfigType.DOUBLE, "list": ConfigType.LIST}

_BROKER_SOURCES = {"dynamic": ConfigSource.DYNAMIC_BROKER_CONFIG,
                   "static": ConfigSource.STATIC_BROKER_CONFIG,
                   "default": ConfigSource.DEFAULT_CONFIG}


@dataclass(frozen=True, slots=True)
class Synonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One described config, independent of the wire version."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool = False
    sensitive: bool = False
    type: ConfigType = ConfigType.UNKNOWN
    documentation: str | None = None
    synonyms: tuple[Synonym, ...] = ()


Described = tuple[ErrorCode, str | None, list[ConfigEntry]]
Describer = Callable[["Broker", str], Described]


def config_type(d: ConfigDef) -> ConfigType:
    return ConfigType.PASSWORD if d.sensitive else _TYPES.get(d.type, ConfigType.UNKNOWN)


def _shown(d: ConfigDef, value: Any) -> str | None:
    return None if d.sensitive else format_value(value)


def broker_synonyms(broker: Broker, name: str) -> tuple[Synonym, ...]:
    """The levels supplying a broker config, highest precedence first."""
    d = BROKER_CONFIGS[name]
    out: list[Synonym] = []
    if broker.config.source(name) == "dynamic":
        out.append(Synonym(name, _shown(d, broker.config.get(name)),
                           ConfigSource.DYNAMIC_BROKER_CONFIG))
    if broker.config.static_value(name) is not None:
        out.append(Synonym(name, _shown(d, broker.config.static_value(name)),
                           ConfigSource.STATIC_BROKER_CONFIG))
    if d.default is not None:
        out.append(Synonym(name, _shown(d, d.default), ConfigSource.DEFAULT_CONFIG))
    return tuple(out)


def broker_entries(broker: Broker) -> list[ConfigEntry]:
    """Every declared broker config; the non-dynamic ones are read-only (need a restart)."""
    out = []
    for name, d in BROKER_CONFIGS.items():
        out.append(ConfigEntry(
            name=name, value=_shown(d, broker.config.get(name)),
            source=_BROKER_SOURCES[broker.config.source(name)], read_only=not d.dynamic,
            sensitive=d.sensitive, type=config_type(d), documentation=d.doc,
            synonyms=broker_synonyms(broker, name)))
    return out


def topic_entries(broker: Broker, overrides: dict[str, Any]) -> list[ConfigEntry]:
    """Every topic config for a topic with these (parsed) overrides.

    Also used by CreateTopics v5+, which returns the configs of the topic it creates.
    """
    out = []
    for name, d in TOPIC_CONFIGS.items():
        synonyms: list[Synonym] = []
        if name in overrides:
            synonyms.append(Synonym(name, _shown(d, overrides[name]), ConfigSource.TOPIC_CONFIG))
        if d.synonym is not None:
            synonyms.extend(broker_synonyms(broker, d.synonym))
        elif d.default is not None:
            synonyms.append(Synonym(name, _shown(d, d.default), ConfigSource.DEFAULT_CONFIG))
        top = synonyms[0] if synonyms else Synonym(name, None, ConfigSource.DEFAULT_CONFIG)
        out.append(ConfigEntry(
            name=name, value=top.value, source=top.source, read_only=False,
            sensitive=d.sensitive, type=config_type(d), documentation=d.doc,
            synonyms=tuple(synonyms)))
    return out


def describe_topic(broker: Broker, name: str) -> Described:
    problem = topic_name_problem(name)
    if problem:
        return ErrorCode.invalid_topic_exception, problem, []
    topic = broker.topics.get(name)
    if topic is None:
        return ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist", []
    return ErrorCode.none, None, topic_entries(broker, topic.configs)


def broker_resource_problem(broker: Broker, name: str) -> str | None:
    """Why a BROKER resource name is not ours, or None (``""`` or our node id)."""
    if name == "" or name == str(broker.node_id):
        return None
    return f"unexpected broker id {name!r}: this broker is {broker.node_id} (or use \"\")"


def describe_broker(broker: Broker, name: str) -> Described:
    problem = broker_resource_problem(broker, name)
    if problem:
        return ErrorCode.invalid_request, problem, []
    return ErrorCode.none, None, broker_entries(broker)


_GROUP_SOURCES = {"group": ConfigSource.GROUP_CONFIG, **_BROKER_SOURCES}


def describe_group(broker: Broker, name: str) -> Described:
    """Every share group config of a group (existing or not, as Kafka answers) with its effective
    value; synonyms: the group's own value, then the broker config it falls back to."""
    if not name:
        return ErrorCode.invalid_request, "group id must not be empty", []
    out = []
    own = broker.group_configs.overrides(name)
    for c in broker.group_configs.describe(name):
        d = c.definition
        synonyms: list[Synonym] = []
        if d.name in own:
            synonyms.append(Synonym(d.name, _shown(d, own[d.name]), ConfigSource.GROUP_CONFIG))
        if d.synonym is not None:
            synonyms.extend(broker_synonyms(broker, d.synonym))
        else:
            synonyms.append(Synonym(d.name, _shown(d, d.default), ConfigSource.DEFAULT_CONFIG))
        out.append(ConfigEntry(
            name=d.name, value=_shown(d, c.value), source=_GROUP_SOURCES[c.source],
            read_only=False, sensitive=False, type=config_type(d), documentation=d.doc,
            synonyms=tuple(synonyms)))
    return ErrorCode.none, None, out


# Resource type -> describer.
DESCRIBERS: dict[int, Describer] = {
    ResourceType.TOPIC: describe_topic,
    ResourceType.BROKER: describe_broker,
    ResourceType.GROUP: describe_group,
}


def describe(broker: Broker, resource_type: int, name: str) -> Described:
    """Describe one resource, whatever its type (unknown types: INVALID_REQUEST)."""
    describer = DESCRIBERS.get(resource_type)
    if describer is None:
        return ErrorCode.invalid_request, f"unsupported resource type {resource_type}", []
    return describer(broker, name)


def config_authorization(ctx: RequestContext, operation: Operation, resource_type: int,
                         name: str) -> tuple[ErrorCode, str] | None:
    """Why ``ctx``'s principal may not do ``operation`` (DESCRIBE_CONFIGS or ALTER_CONFIGS) on a
    config resource, as (error, message), or None when allowed or not an ACL resource type."""
    if resource_type == ResourceType.TOPIC:
        resource, error = Resource(AclType.TOPIC, name), ErrorCode.topic_authorization_failed
    elif resource_type == ResourceType.GROUP:
        resource, error = Resource(AclType.GROUP, name), ErrorCode.group_authorization_failed
    elif resource_type in (ResourceType.BROKER, ResourceType.BROKER_LOGGER):
        resource, error = CLUSTER, ErrorCode.cluster_authorization_failed
    else:
        return None
    if ctx.authorized(operation, resource):
        return None
    return error, refusal(ctx.principal, operation, resource)


def _entry(m: Any, e: ConfigEntry, synonyms: bool, documentation: bool) -> Any:
    syn = tuple(make(m.DescribeConfigsSynonym, name=s.name, value=s.value, source=int(s.source))
                for s in e.synonyms) if synonyms else ()
    return make(m.DescribeConfigsResourceResult, name=e.name, value=e.value,
                read_only=e.read_only, config_source=int(e.source), is_sensitive=e.sensitive,
                synonyms=syn, config_type=int(e.type),
                documentation=e.documentation if documentation else None)


def handle(ctx: RequestContext, req: DescribeConfigsRequest) -> Any:
    # Over YIELD_EVERY resources the event loop is served every YIELD_EVERY (issue 25).
    return paced(_answer(ctx, req), len(req.resources) > YIELD_EVERY)


def _answer(ctx: RequestContext, req: DescribeConfigsRequest) -> Steps[Any]:
    m = response_module(API_KEY, ctx.api_version)
    synonyms = bool(req.include_synonyms)
    documentation = bool(getattr(req, "include_documentation", False))
    results = []
    r: Any  # the DescribeConfigsResource of req's version (enumerate over their union)
    entries: Sequence[Any]
    message: str | None
    for i, r in enumerate(req.resources):
        if i and i % YIELD_EVERY == 0:
            yield
        refused = config_authorization(ctx, Operation.DESCRIBE_CONFIGS, r.resource_type,
                                       r.resource_name)
        if refused is not None:
            error, message, entries = refused[0], refused[1], []
        else:
            error, message, entries = describe(ctx.broker, r.resource_type, r.resource_name)
        keys = set(r.configuration_keys) if r.configuration_keys else None
        configs = tuple(_entry(m, e, synonyms, documentation) for e in entries
                        if keys is None or e.name in keys)
        results.append(make(m.DescribeConfigsResult, error_code=error, error_message=message,
                            resource_type=r.resource_type, resource_name=r.resource_name,
                            configs=configs))
    return make(m.DescribeConfigsResponse, throttle_time=NO_THROTTLE, results=tuple(results))
