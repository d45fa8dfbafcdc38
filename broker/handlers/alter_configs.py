"""AlterConfigs (33) v0-2, the legacy whole-set replacement, for TOPIC and BROKER resources.

Unlike IncrementalAlterConfigs, the request gives the complete set of overrides: every config
named is set, and every existing override that is not named is removed (a topic's per-topic
configs; the broker's runtime changes). It is translated into SET and DELETE operations and goes
through the same checks and atomic application as IncrementalAlterConfigs (``alter``,
``plan_topic``: the request's topic changes are one durable write, then visible; a storage error
answers KAFKA_STORAGE_ERROR and changes nothing), so the error codes are the same. Other resource types are INVALID_REQUEST. Authorization: ALTER_CONFIGS
on the resource, after the duplicate check (``config_authorization`` in describe_configs.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from broker.handlers.describe_configs import ResourceType, config_authorization
from broker.handlers.incremental_alter_configs import (
    Altered,
    AlterOp,
    OpType,
    alter,
    alter_request_problem,
    apply_topic_plans,
    apply_topic_plans_in_cluster,
    duplicate_resources,
    plan_topic,
    request_size,
)
from broker.wire_limits import YIELD_EVERY, Steps, run_steps, run_steps_async
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.app import Broker
    from broker.handlers._requests import AlterConfigsRequest

API_KEY = 33
VERSIONS = (0, 2)


def _current_overrides(broker: Broker, resource_type: int, name: str) -> list[str]:
    if resource_type == ResourceType.TOPIC:
        topic = broker.topics.get(name)
        return sorted(topic.configs) if topic is not None else []
    return broker.config.dynamic_names()


def replace_ops(broker: Broker, resource_type: int, name: str, given: Any) -> list[AlterOp]:
    """The SET/DELETE operations that turn the current overrides into exactly ``given``."""
    ops = [AlterOp(c.name, OpType.SET, c.value) for c in given]
    named = {c.name for c in given}
    ops += [AlterOp(n, OpType.DELETE, None)
            for n in _current_overrides(broker, resource_type, name) if n not in named]
    return ops


def handle(ctx: RequestContext, req: AlterConfigsRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if request_size(req) > YIELD_EVERY or ctx.broker.group_configs.lock.locked():
        return _locked(ctx, m, req)
    answers, plans = run_steps(_plan_all(ctx, req))
    if ctx.broker.member is not None and plans:
        return _respond_in_cluster(ctx, m, req, answers, plans)
    return run_steps(_respond(m, req, answers, apply_topic_plans(ctx.broker, plans)))


async def _locked(ctx: RequestContext, m: Any, req: AlterConfigsRequest) -> Any:
    """A large request is planned and answered a slice at a time, the event loop served every
    YIELD_EVERY resources and configs (issue 25), under the config lock: no other config change
    lands between its plans and their apply (a change arriving meanwhile waits for the lock)."""
    async with ctx.broker.group_configs.lock:
        answers, plans = await run_steps_async(_plan_all(ctx, req))
        if ctx.broker.member is not None and plans:
            failed = await apply_topic_plans_in_cluster(ctx.broker, plans)
        else:
            failed = apply_topic_plans(ctx.broker, plans)
        return await run_steps_async(_respond(m, req, answers, failed))


def _plan_all(ctx: RequestContext, req: AlterConfigsRequest
              ) -> Steps[tuple[list[Altered], dict[str, dict[str, Any]]]]:
    """Every resource's answer, and the valid topic changes (topic -> its new configs, applied
    together); broker resources are applied here."""
    dups = duplicate_resources(req.resources)
    answers: list[Altered] = []
    plans: dict[str, dict[str, Any]] = {}  # topic -> its new configs, applied together
    work = 0
    for r in req.resources:
        if work >= YIELD_EVERY:
            work = 0
            yield
        work += 1 + len(r.configs)
        refused = None
        if (r.resource_type, r.resource_name) not in dups:
            refused = config_authorization(ctx, Operation.ALTER_CONFIGS, r.resource_type,
                                           r.resource_name)
        if (r.resource_type, r.resource_name) in dups:
            answers.append((ErrorCode.invalid_request, "resource appears more than once"))
        elif refused is not None:
            answers.append(refused)
        elif r.resource_type not in (ResourceType.TOPIC, ResourceType.BROKER):
            answers.append((ErrorCode.invalid_request,
                            f"unsupported resource type {r.resource_type} for AlterConfigs"))
        else:
            ops = replace_ops(ctx.broker, r.resource_type, r.resource_name, r.configs)
            if r.resource_type == ResourceType.TOPIC and alter_request_problem(ops) is None:
                answer, plan = plan_topic(ctx.broker, r.resource_name, ops)
                if plan is not None and not req.validate_only:
                    plans[r.resource_name] = plan
                answers.append(answer)
            else:
                answers.append(alter(ctx.broker, r.resource_type, r.resource_name, ops,
                                     req.validate_only))
    return answers, plans


async def _respond_in_cluster(ctx: RequestContext, m: Any, req: AlterConfigsRequest, answers: list[Altered],
                              plans: dict[str, dict[str, Any]]) -> Any:
    return run_steps(_respond(m, req, answers,
                              await apply_topic_plans_in_cluster(ctx.broker, plans)))


def _respond(m: Any, req: AlterConfigsRequest, answers: list[Altered],
             failed: dict[str, Altered]) -> Steps[Any]:
    responses = []
    r: Any  # the AlterConfigsResource of req's version (enumerate over their union)
    for i, (r, (error, message)) in enumerate(zip(req.resources, answers)):
        if i and i % YIELD_EVERY == 0:
            yield
        if r.resource_type == ResourceType.TOPIC and r.resource_name in failed:
            error, message = failed[r.resource_name]
        responses.append(make(m.AlterConfigsResourceResponse, error_code=error,
                              error_message=message, resource_type=r.resource_type,
                              resource_name=r.resource_name))
    return make(m.AlterConfigsResponse, throttle_time=NO_THROTTLE, responses=tuple(responses))
