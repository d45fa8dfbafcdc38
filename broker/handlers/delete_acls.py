"""DeleteAcls (31) v1-3: remove the ACLs each filter selects (needs CLUSTER ALTER).

Every filter is matched against the ACLs as they were when the request arrived; the union is
removed in one durable change (``broker/security/acl_store.py``) before the answer, which lists
per filter the ACLs it matched. A filter with an UNKNOWN code answers INVALID_REQUEST; without
an ACL authorizer every filter answers SECURITY_DISABLED. v0 is not served (removed in Kafka
4.0, KIP-896; not in kio 0.6.5).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.context import RequestContext
from broker.handlers._acls import acl_gate
from broker.handlers._common import NO_THROTTLE, err_message
from broker.wire_limits import YIELD_EVERY, in_slices
from broker.handlers.describe_acls import acl_filter
from protocol.acl_types import AclOperation
from broker.security.acl_store import commit
from broker.security.authorizer import AclResult
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import DeleteAclsRequest

API_KEY = 31
VERSIONS = (1, 3)


def handle(ctx: RequestContext, req: DeleteAclsRequest) -> Any:
    return _delete(ctx, req)


async def _delete(ctx: RequestContext, req: DeleteAclsRequest) -> Any:
    authorizer, error, message = acl_gate(ctx, AclOperation.ALTER, "DeleteAcls")
    large = len(req.filters) > YIELD_EVERY  # handed the loop back every YIELD_EVERY (issue 25)
    if authorizer is None:
        results: tuple[AclResult, ...] = tuple(AclResult(error, message) for _ in req.filters)
    elif large:
        filters = await in_slices(req.filters, acl_filter)
        results = await commit(authorizer, lambda: authorizer.plan_delete_steps(filters))
    else:
        filters = [acl_filter(f) for f in req.filters]
        results = await commit(authorizer, lambda: authorizer.plan_delete(filters))
    m = response_module(API_KEY, ctx.api_version)

    def result(r: AclResult) -> Any:
        return make(m.DeleteAclsFilterResult, error_code=r.error,
                    error_message=err_message(r.error, r.message), matching_acls=tuple(
                        make(m.DeleteAclsMatchingAcl, error_code=ErrorCode.none,
                             error_message=None, resource_type=b.resource_type,
                             resource_name=b.name, pattern_type=b.pattern_type,
                             principal=b.principal, host=b.host, operation=b.operation,
                             permission_type=b.permission)
                        for b in r.matched))

    answered = await in_slices(results, result) if large else [result(r) for r in results]
    return make(m.DeleteAclsResponse, throttle_time=NO_THROTTLE, filter_results=tuple(answered))
