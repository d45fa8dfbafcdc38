"""CreateAcls (30) v1-3: add ACLs (needs CLUSTER ALTER).

Each creation is validated on its own (``protocol/acl_types.py``: INVALID_REQUEST with a
message) and the valid ones are added together: written to ``acls.json`` before the answer
(``broker/security/acl_store.py``). Creating an ACL that exists succeeds. v0 is not served: Kafka
4.0 removed it (KIP-896) and kio 0.6.5 has no schema for it. Without an ACL authorizer every
creation answers SECURITY_DISABLED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.context import RequestContext
from broker.handlers._acls import acl_gate
from broker.handlers._common import NO_THROTTLE, err_message
from broker.wire_limits import YIELD_EVERY, in_slices
from protocol.acl_types import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    from_code,
)
from broker.security.acl_store import commit
from broker.security.authorizer import AclResult
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import CreateAclsRequest

API_KEY = 30
VERSIONS = (1, 3)


def binding(c: Any) -> AclBinding:
    """The binding a CreateAcls creation asks for (unknown codes read as UNKNOWN)."""
    return AclBinding(from_code(ResourceType, c.resource_type), c.resource_name,
                      from_code(PatternType, c.resource_pattern_type),
                      c.principal, c.host, from_code(AclOperation, c.operation),
                      from_code(AclPermissionType, c.permission_type))


def handle(ctx: RequestContext, req: CreateAclsRequest) -> Any:
    return _create(ctx, req)


async def _create(ctx: RequestContext, req: CreateAclsRequest) -> Any:
    authorizer, error, message = acl_gate(ctx, AclOperation.ALTER, "CreateAcls")
    large = len(req.creations) > YIELD_EVERY  # handed the loop back every YIELD_EVERY (issue 25)
    if authorizer is None:
        results: tuple[AclResult, ...] = tuple(AclResult(error, message) for _ in req.creations)
    elif large:
        bindings = await in_slices(req.creations, binding)
        results = await commit(authorizer, lambda: authorizer.plan_create_steps(bindings))
    else:
        bindings = [binding(c) for c in req.creations]
        results = await commit(authorizer, lambda: authorizer.plan_create(bindings))
    m = response_module(API_KEY, ctx.api_version)

    def result(r: AclResult) -> Any:
        return make(m.AclCreationResult, error_code=r.error,
                    error_message=err_message(r.error, r.message))

    answered = await in_slices(results, result) if large else [result(r) for r in results]
    return make(m.CreateAclsResponse, throttle_time=NO_THROTTLE, results=tuple(answered))
