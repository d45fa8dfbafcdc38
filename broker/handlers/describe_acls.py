"""DescribeAcls (29) v1-3: list the ACLs a filter selects (needs CLUSTER DESCRIBE).

The answer groups ACLs by resource pattern, as Kafka does, sorted for stable output. A filter
with an UNKNOWN code answers INVALID_REQUEST; without an ACL authorizer the answer is
SECURITY_DISABLED. v0 is not served (removed in Kafka 4.0, KIP-896; not in kio 0.6.5).
"""

from __future__ import annotations

from itertools import groupby
from typing import TYPE_CHECKING, Any

from broker.context import RequestContext
from broker.handlers._acls import acl_gate
from broker.handlers._common import NO_THROTTLE, err_message
from protocol.acl_types import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    filter_problem,
    from_code,
)
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import DescribeAclsRequest

API_KEY = 29
VERSIONS = (1, 3)


def acl_filter(f: Any) -> AclBindingFilter:
    """The filter a DescribeAcls request or a DeleteAcls filter carries."""
    return AclBindingFilter(
        from_code(ResourceType, f.resource_type_filter), f.resource_name_filter,
        from_code(PatternType, f.pattern_type_filter), f.principal_filter,
        f.host_filter, from_code(AclOperation, f.operation),
        from_code(AclPermissionType, f.permission_type))


def handle(ctx: RequestContext, req: DescribeAclsRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    authorizer, error, message = acl_gate(ctx, AclOperation.DESCRIBE, "DescribeAcls")
    resources: tuple[Any, ...] = ()
    if authorizer is not None:
        flt = acl_filter(req)
        problem = filter_problem(flt)
        if problem:
            error, message = problem
        else:
            acls = authorizer.acls(flt)  # sorted: one resource pattern's ACLs are adjacent
            resources = tuple(
                make(m.DescribeAclsResource, resource_type=rtype, resource_name=name,
                     pattern_type=ptype, acls=tuple(
                         make(m.AclDescription, principal=b.principal, host=b.host,
                              operation=b.operation, permission_type=b.permission)
                         for b in group))
                for (rtype, name, ptype), group in groupby(
                    acls, key=lambda b: (b.resource_type, b.name, b.pattern_type)))
    return make(m.DescribeAclsResponse, throttle_time=NO_THROTTLE, error_code=error,
                error_message=err_message(error, message), resources=resources)

