"""What CreateAcls, DescribeAcls and DeleteAcls share: who is asking, and whether they may.

``ctx_principal`` reads the principal the connection authenticated as, ``User:ANONYMOUS`` until
connections carry one (issue 13 phase 2 moves this onto ``RequestContext``).

``acl_gate`` answers as Kafka's ``AclApis`` does: no ACL authorizer configured is
SECURITY_DISABLED; a caller without the cluster operation the RPC needs (ALTER to change ACLs,
DESCRIBE to list them) is CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.authz import CLUSTER, Operation
from broker.context import RequestContext
from protocol.acl_types import ANONYMOUS, AclOperation
from broker.security.authorizer import AclAuthorizer


def ctx_principal(ctx: Any) -> str:
    """The request's principal as ``Type:name``."""
    principal = getattr(ctx, "principal", None)
    if principal is None:
        return ANONYMOUS
    return principal if isinstance(principal, str) else str(principal)


def acl_authorizer(ctx: RequestContext) -> AclAuthorizer | None:
    """The broker's ACL authorizer, or None when ACLs are not managed here."""
    authorizer = getattr(ctx.broker, "acl_authorizer", None)
    return authorizer if isinstance(authorizer, AclAuthorizer) else None


def acl_gate(ctx: RequestContext, operation: AclOperation, rpc: str
             ) -> tuple[AclAuthorizer | None, ErrorCode, str | None]:
    """``(authorizer, error, message)``: the authorizer to use when error is NONE."""
    authorizer = acl_authorizer(ctx)
    if authorizer is None:
        return None, ErrorCode.security_disabled, (
            "no authorizer is configured on this broker, so there are no ACLs to manage; set "
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer to "
            "enable them")
    principal = ctx_principal(ctx)
    # Through the request context, so a refusal is counted and logged like any other.
    if not ctx.authorized(Operation[operation.name], CLUSTER):
        return None, ErrorCode.cluster_authorization_failed, (
            f"{principal} (from {ctx.client_host}) is not authorized for {rpc}: it needs "
            f"{operation.name} on the CLUSTER resource")
    return authorizer, ErrorCode.none, None
