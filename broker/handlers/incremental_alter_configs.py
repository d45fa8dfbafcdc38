"""IncrementalAlterConfigs (44) v0-1: SET, DELETE, APPEND and SUBTRACT topic and broker configs.

Each resource is changed atomically: every operation is checked first (known name, alterable,
valid value, the whole resulting set valid) and only then is anything applied, so a resource is
either fully changed or untouched. ``validate_only`` stops after the checks. Resources are
independent: one failing does not stop the others. Expected failures are response data:

- unknown config name, invalid value, APPEND/SUBTRACT on a non-list config -> INVALID_CONFIG;
- a broker config that is not dynamic -> INVALID_CONFIG, saying a restart is needed;
- an unknown operation, a null value for SET/APPEND/SUBTRACT, the same config twice in one
  resource, the same resource twice in one request, an unsupported resource type -> INVALID_REQUEST;
- unknown topic -> UNKNOWN_TOPIC_OR_PARTITION;
- no ALTER_CONFIGS on the resource (``broker/authz.py``): on the topic ->
  TOPIC_AUTHORIZATION_FAILED, on the cluster for BROKER -> CLUSTER_AUTHORIZATION_FAILED, on the
  group -> GROUP_AUTHORIZATION_FAILED (checked after the duplicate check, before the others).

Topic changes are checked per resource (``plan_topic``), then the valid ones of the request are
written together, once, and apply only once written (``Broker.set_topics_configs``; a failed
write or an offline log directory: KAFKA_STORAGE_ERROR for each, nothing changed); they take
effect on the live logs at once (segment, retention, cleanup, flush settings). Broker
changes through ``BrokerConfig.set``/``reset`` (DELETE falls back to the startup value, else the
default). Dynamic broker configs are kept in memory only: a restart goes back to the config file.

Resources are altered by functions in ``ALTERERS``, keyed by resource type. GROUP (32) resources
take the KIP-932 share group configs (``broker/group_configs.py``; out-of-bounds values ->
INVALID_CONFIG naming the allowed range), persisted in ``<data>/group-configs.json``: each is
checked on its own, then the valid ones of the request are written together, once, in a worker
thread, and apply only once written (a failed write: KAFKA_STORAGE_ERROR for each of them, and
nothing changed). Configs for one group more than ``group.config.max.groups`` allows:
POLICY_VIOLATION. Legacy AlterConfigs (33) reuses ``alter``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.log.topics import TopicError
from broker.config import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    ConfigError,
    format_value,
    topic_config_value,
    unknown_broker_config_problem,
)
from broker.authz import Operation
from broker.context import RequestContext
from broker.group_configs import GROUP_CONFIGS
from broker.handlers._common import NO_THROTTLE, OK
from broker.wire_limits import YIELD_EVERY, Steps, run_steps, run_steps_async
from broker.handlers.describe_configs import (
    ResourceType,
    broker_resource_problem,
    config_authorization,
)
from broker.log.topics import topic_name_problem
from storage.log_dir import describe
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.app import Broker
    from broker.handlers._requests import AlterConfigsRequest, IncrementalAlterConfigsRequest

API_KEY = 44
VERSIONS = (0, 1)

log = logging.getLogger("shoal.configs")


class OpType(IntEnum):
    """Kafka's ``AlterConfigOp.OpType`` ids."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


_OPS = frozenset(int(o) for o in OpType)

@dataclass(frozen=True, slots=True)
class AlterOp:
    name: str
    op: int
    value: str | None


Altered = tuple[ErrorCode, str | None]
Alterer = Callable[["Broker", str, Sequence[AlterOp], bool], Altered]


def _items(value: str | None) -> list[str]:
    return [x.strip() for x in value.split(",") if x.strip()] if value else []


def apply_list_op(op: AlterOp, current: str | None) -> str:
    """APPEND adds the items not already present; SUBTRACT removes the given items."""
    have = _items(current)
    given = _items(op.value)
    if op.op == OpType.APPEND:
        return ",".join(have + [x for x in given if x not in have])
    return ",".join(x for x in have if x not in given)


def _list_op_problem(op: AlterOp, type_: str) -> str | None:
    if op.op in (OpType.APPEND, OpType.SUBTRACT) and type_ != "list":
        return (f"{OpType(op.op).name} is only allowed for list configs; {op.name} is "
                f"a {type_} config")
    return None


def plan_topic(broker: Broker, name: str, ops: Sequence[AlterOp]
               ) -> tuple[Altered, dict[str, Any] | None]:
    """Check a TOPIC resource: its answer, and on success the topic's new configs for
    ``apply_topic_plans`` (nothing changes here)."""
    problem = topic_name_problem(name)
    if problem:
        return (ErrorCode.invalid_topic_exception, problem), None
    topic = broker.topics.get(name)
    if topic is None:
        return (ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist"), None
    raw: dict[str, str | None] = {k: format_value(v) for k, v in topic.configs.items()}
    for op in ops:
        d = TOPIC_CONFIGS.get(op.name)
        if d is None:
            return (ErrorCode.invalid_config, f"unknown topic config {op.name!r}"), None
        problem = _list_op_problem(op, d.type)
        if problem:
            return (ErrorCode.invalid_config, problem), None
        if op.op == OpType.SET:
            raw[op.name] = op.value
        elif op.op == OpType.DELETE:
            raw.pop(op.name, None)
        else:
            current = raw.get(op.name)
            if current is None:
                current = format_value(topic_config_value(op.name, {}, broker.config))
            raw[op.name] = apply_list_op(op, current)
    try:
        return (OK, None), broker.validate_topic_configs(raw)
    except TopicError as exc:
        return (exc.error, exc.message), None


def apply_topic_plans(broker: Broker, plans: dict[str, dict[str, Any]]
                      ) -> dict[str, Altered]:
    """Apply the checked topic configs of a request together: one durable write, then visible
    (``Broker.set_topics_configs``). The answer of each topic whose change failed (a storage
    error: KAFKA_STORAGE_ERROR, nothing changed); empty when all went in."""
    if not plans:
        return {}
    try:
        broker.set_topics_configs(plans)
    except OSError as exc:
        log.error("writing the configs of %d topic(s) failed, none changed: %s", len(plans),
                  describe(exc))
        return {name: (ErrorCode.kafka_storage_error,
                       f"the configs of topic {name!r} were not changed: {describe(exc)}; check "
                       "the data directory's disk, then retry") for name in plans}
    return {}


async def apply_topic_plans_in_cluster(broker: Broker, plans: dict[str, dict[str, Any]]
                                       ) -> dict[str, Altered]:
    """``apply_topic_plans`` of a cluster member: each topic's configs go to etcd
    (``ClusterMember.set_topic_configs``), answered once this broker has them; the answer of
    each topic whose change failed (etcd away: REQUEST_TIMED_OUT, nothing changed)."""
    assert broker.member is not None
    failed: dict[str, Altered] = {}
    for name, configs in plans.items():
        try:
            await broker.member.set_topic_configs(name, configs)
        except TopicError as exc:
            failed[name] = (exc.error, exc.message)
    return failed


def alter_topic(broker: Broker, name: str, ops: Sequence[AlterOp], validate_only: bool) -> Altered:
    """One TOPIC resource on its own (``alter``); handlers batch with ``plan_topic``."""
    answer, plan = plan_topic(broker, name, ops)
    if plan is not None and not validate_only:
        return apply_topic_plans(broker, {name: plan}).get(name, answer)
    return answer


def alter_broker(broker: Broker, name: str, ops: Sequence[AlterOp], validate_only: bool) -> Altered:
    problem = broker_resource_problem(broker, name)
    if problem:
        return ErrorCode.invalid_request, problem
    sets: dict[str, Any] = {}
    resets: list[str] = []
    for op in ops:
        d = BROKER_CONFIGS.get(op.name)
        if d is None:
            return ErrorCode.invalid_config, unknown_broker_config_problem(op.name)
        if not d.dynamic:
            return (ErrorCode.invalid_config,
                    f"{op.name} cannot be changed while the broker runs; set it in the config "
                    "file and restart the broker")
        problem = _list_op_problem(op, d.type)
        if problem:
            return ErrorCode.invalid_config, problem
        if op.op == OpType.DELETE:
            resets.append(op.name)
            continue
        value = op.value
        if op.op != OpType.SET:
            value = apply_list_op(op, format_value(broker.config.get(op.name)))
        try:
            broker.config.check(op.name, value)
        except ConfigError as exc:
            return ErrorCode.invalid_config, str(exc)
        sets[op.name] = value
    if not validate_only:
        for n in resets:
            broker.config.reset(n)
        for n, v in sets.items():
            broker.config.set(n, v)
    return OK, None


def plan_group(broker: Broker, name: str, ops: Sequence[AlterOp]
               ) -> tuple[Altered, dict[str, Any] | None]:
    """Check a GROUP resource (``broker/group_configs.py``; the group need not exist yet): its
    answer, and on success the group's new overrides for ``GroupConfigs.commit``."""
    if not name:
        return (ErrorCode.invalid_request, "group id must not be empty"), None
    changes: dict[str, str | None] = {}
    for op in ops:
        d = GROUP_CONFIGS.get(op.name)
        if d is not None:
            problem = _list_op_problem(op, d.type)
            if problem:
                return (ErrorCode.invalid_config, problem), None
        changes[op.name] = None if op.op == OpType.DELETE else op.value
    try:
        return (OK, None), broker.group_configs.plan(name, changes)
    except ConfigError as exc:
        return (ErrorCode.invalid_config, str(exc)), None


def alter_group(broker: Broker, name: str, ops: Sequence[AlterOp], validate_only: bool) -> Altered:
    """Validate a GROUP resource only: IncrementalAlterConfigs applies the valid ones of a
    request together (``handle``), and AlterConfigs does not take groups."""
    return plan_group(broker, name, ops)[0]


# Resource type -> alterer.
ALTERERS: dict[int, Alterer] = {
    ResourceType.TOPIC: alter_topic,
    ResourceType.BROKER: alter_broker,
    ResourceType.GROUP: alter_group,
}


def alter_request_problem(ops: Sequence[AlterOp]) -> str | None:
    """The request-level rule one resource's operations break (INVALID_REQUEST), or None."""
    seen: set[str] = set()
    for op in ops:
        if op.op not in _OPS:
            return f"unknown config operation {op.op} for {op.name}"
        if op.name in seen:
            return f"config {op.name} appears more than once"
        seen.add(op.name)
        if op.value is None and op.op != OpType.DELETE:
            return f"null value is not allowed for {op.name}"
    return None


def alter(broker: Broker, resource_type: int, name: str, ops: Sequence[AlterOp],
          validate_only: bool) -> Altered:
    """Check the request-level rules for one resource, then hand it to its alterer."""
    alterer = ALTERERS.get(resource_type)
    if alterer is None:
        return ErrorCode.invalid_request, f"unsupported resource type {resource_type}"
    problem = alter_request_problem(ops)
    if problem is not None:
        return ErrorCode.invalid_request, problem
    return alterer(broker, name, ops, validate_only)


def duplicate_resources(resources: Sequence[Any]) -> set[tuple[int, str]]:
    """(type, name) pairs named more than once in a request; none of them is altered."""
    counts = Counter((r.resource_type, r.resource_name) for r in resources)
    return {k for k, n in counts.items() if n > 1}


def handle(ctx: RequestContext, req: IncrementalAlterConfigsRequest) -> Any:
    if any(r.resource_type == ResourceType.GROUP for r in req.resources) \
            or ctx.broker.member is not None:
        return _handle_with_groups(ctx, req)
    if request_size(req) > YIELD_EVERY or ctx.broker.group_configs.lock.locked():
        return _plain_locked(ctx, req)
    return run_steps(_plain(ctx, req))


async def _plain_locked(ctx: RequestContext, req: IncrementalAlterConfigsRequest) -> Any:
    """A large request is checked and answered a slice at a time, the event loop served every
    YIELD_EVERY resources and configs (issue 25), under the config lock: no other config change
    lands between its plans and their apply (a change arriving meanwhile waits for the lock)."""
    async with ctx.broker.group_configs.lock:
        return await run_steps_async(_plain(ctx, req))


def request_size(req: IncrementalAlterConfigsRequest | AlterConfigsRequest) -> int:
    """Resources and configs in an (Incremental)AlterConfigs request."""
    return sum(1 + len(r.configs) for r in req.resources)


def _plain(ctx: RequestContext, req: IncrementalAlterConfigsRequest) -> Steps[Any]:
    results = yield from _check_all(ctx, req, {})
    return (yield from _answer(ctx, req, results))


async def _handle_with_groups(ctx: RequestContext, req: IncrementalAlterConfigsRequest) -> Any:
    """Group changes are planned per resource under the group configs' lock, then written once
    for the whole request, off the event loop, before they become visible."""
    configs = ctx.broker.group_configs
    async with configs.lock:
        plans: dict[str, dict[str, Any]] = {}
        in_cluster: dict[str, dict[str, Any]] | None = \
            {} if ctx.broker.member is not None else None
        results = await run_steps_async(_check_all(ctx, req, plans, in_cluster))
        if in_cluster:
            for name, answer in (await apply_topic_plans_in_cluster(ctx.broker,
                                                                    in_cluster)).items():
                results[(ResourceType.TOPIC, name)] = answer
        if plans and not req.validate_only:
            for group_id in configs.refused_by_limit(plans):
                del plans[group_id]
                results[(ResourceType.GROUP, group_id)] = (ErrorCode.policy_violation,
                                                           configs.limit_message(group_id))
            if plans:
                try:
                    await configs.commit(plans)
                except OSError as exc:
                    log.error("writing group configs failed: %s", describe(exc))
                    for group_id in plans:
                        results[(ResourceType.GROUP, group_id)] = (
                            ErrorCode.kafka_storage_error,
                            f"the group configs could not be written: {describe(exc)}")
    return await run_steps_async(_answer(ctx, req, results))


def _check_all(ctx: RequestContext, req: IncrementalAlterConfigsRequest, plans: dict[str, dict[str, Any]],
               topic_plans_out: dict[str, dict[str, Any]] | None = None
               ) -> Steps[dict[tuple[int, str], Altered]]:
    """Every resource's answer; broker resources are applied here, the valid topic resources
    together at the end (one durable write), the valid group resources' new overrides are put in
    ``plans`` (a duplicate resource is answered alike
    everywhere, so one answer per (type, name) suffices). With ``topic_plans_out`` (a cluster
    member) the topic plans are put there for the caller to apply through etcd."""
    dups = duplicate_resources(req.resources)
    results: dict[tuple[int, str], Altered] = {}
    topic_plans: dict[str, dict[str, Any]] = {}
    work = 0
    for r in req.resources:
        if work >= YIELD_EVERY:  # the loop is served every YIELD_EVERY resources and configs
            work = 0
            yield
        work += 1 + len(r.configs)
        key = (r.resource_type, r.resource_name)
        if key in dups:
            results[key] = ErrorCode.invalid_request, "resource appears more than once"
            continue
        refused = config_authorization(ctx, Operation.ALTER_CONFIGS, r.resource_type,
                                       r.resource_name)
        ops = [AlterOp(c.name, c.config_operation, c.value) for c in r.configs]
        if refused is not None:
            results[key] = refused
        elif r.resource_type == ResourceType.GROUP and alter_request_problem(ops) is None:
            results[key], plan = plan_group(ctx.broker, r.resource_name, ops)
            if plan is not None:
                plans[r.resource_name] = plan
        elif r.resource_type == ResourceType.TOPIC and alter_request_problem(ops) is None:
            results[key], plan = plan_topic(ctx.broker, r.resource_name, ops)
            if plan is not None and not req.validate_only:
                topic_plans[r.resource_name] = plan
        else:
            results[key] = alter(ctx.broker, r.resource_type, r.resource_name, ops,
                                 req.validate_only)
    if topic_plans_out is not None:
        topic_plans_out.update(topic_plans)
        return results
    for name, answer in apply_topic_plans(ctx.broker, topic_plans).items():
        results[(ResourceType.TOPIC, name)] = answer
    return results


def _answer(ctx: RequestContext, req: IncrementalAlterConfigsRequest,
            results: dict[tuple[int, str], Altered]) -> Steps[Any]:
    m = response_module(API_KEY, ctx.api_version)
    responses = []
    r: Any  # the AlterConfigsResource of req's version (enumerate over their union)
    for i, r in enumerate(req.resources):
        if i and i % YIELD_EVERY == 0:
            yield
        error, message = results[(r.resource_type, r.resource_name)]
        responses.append(make(m.AlterConfigsResourceResponse, error_code=error,
                              error_message=message, resource_type=r.resource_type,
                              resource_name=r.resource_name))
    return make(m.IncrementalAlterConfigsResponse, throttle_time=NO_THROTTLE,
                responses=tuple(responses))
