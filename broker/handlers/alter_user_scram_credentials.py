"""AlterUserScramCredentials (51) v0: create, replace and delete SCRAM credentials (KIP-554).

The client sends salted passwords, never passwords. Validation is Kafka's, as data
(``broker/security/scram_store.plan_alter``): UNSUPPORTED_SASL_MECHANISM, UNACCEPTABLE_CREDENTIAL
(empty user, iterations outside [4096, 16384], a salt shorter than 12 bytes), DUPLICATE_RESOURCE
(two changes to one user and mechanism), RESOURCE_NOT_FOUND (deleting a missing credential). The
answer has one result per user; a user with any invalid change keeps its credentials unchanged.
Valid changes are written durably (``scram-credentials.json``, off the event loop; in cluster mode
etcd, ``broker/cluster_security.py``) before the answer. Needs CLUSTER ALTER with an ACL authorizer; with ``authorizer.class.name`` empty, a principal
in ``super.users`` (``RequestContext.authorized_cluster_admin``: otherwise any client could give
itself a super user's password). A refused user gets CLUSTER_AUTHORIZATION_FAILED and nothing is
written.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, cluster_admin_refusal
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE, err_message
from broker.security.scram_store import Deletion, Upsertion, UserResult
from broker.wire_limits import in_slices
from protocol.codec import response_module
from protocol.messages import make
from storage.log_dir import describe

if TYPE_CHECKING:
    from broker.handlers._requests import AlterUserScramCredentialsRequest

API_KEY = 51
VERSIONS = (0, 0)

log = logging.getLogger("shoal.security.scram")
_LOG_USERS = 20


def handle(ctx: RequestContext, req: AlterUserScramCredentialsRequest) -> Any:
    return _alter(ctx, req)


async def _alter(ctx: RequestContext, req: AlterUserScramCredentialsRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    # Tens of thousands of changes: every pass hands the event loop back every YIELD_EVERY.
    deletions = await in_slices(req.deletions, lambda d: Deletion(d.name, int(d.mechanism)))
    upsertions = await in_slices(req.upsertions, lambda u: Upsertion(
        u.name, int(u.mechanism), int(u.iterations), bytes(u.salt), bytes(u.salted_password)))
    users = list(dict.fromkeys([d.user for d in deletions] + [u.user for u in upsertions]))
    if not ctx.authorized_cluster_admin(Operation.ALTER):
        message = cluster_admin_refusal(ctx.principal, Operation.ALTER,
                                        "alter SCRAM credentials", ctx.broker.authorizer.enforcing)
        results = [UserResult(u, ErrorCode.cluster_authorization_failed, message) for u in users]
    else:
        store = ctx.broker.scram_credentials
        try:
            results = await store.alter_async(deletions, upsertions)
        except OSError as exc:
            log.error("writing SCRAM credentials to %s failed: %s",
                      getattr(store, "path", "?"), describe(exc))
            results = [UserResult(u, ErrorCode.unknown_server_error,
                                  f"SCRAM credentials could not be written: {describe(exc)}")
                       for u in users]
        _log_altered([r.user for r in results if r.error == ErrorCode.none], ctx.client_host)
    return make(m.AlterUserScramCredentialsResponse, throttle_time=NO_THROTTLE,
                results=tuple(await in_slices(results, lambda r: make(
                    m.AlterUserScramCredentialsResult, user=r.user, error_code=r.error,
                    error_message=err_message(r.error, r.message)))))


def _log_altered(users: list[str], client: str) -> None:
    """One line per altered user; past ``_LOG_USERS`` of them one line naming the first few
    (a line per user of a request of tens of thousands held the event loop for 100+ ms)."""
    if len(users) <= _LOG_USERS:
        for user in users:
            log.info("SCRAM credentials of user %s altered (client %s)", user, client)
    elif users:
        log.info("SCRAM credentials of %d users altered (client %s): %s, ...", len(users),
                 client, ", ".join(users[:_LOG_USERS]))
