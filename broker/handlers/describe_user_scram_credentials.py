"""DescribeUserScramCredentials (50) v0: which SCRAM mechanisms and iteration counts each user
has (KIP-554; never the salt or keys).

No users (null or empty) lists every user with a credential. Named users are answered in request
order, once each: one named twice is DUPLICATE_RESOURCE, one without any credential
RESOURCE_NOT_FOUND, as Kafka does. Needs CLUSTER DESCRIBE with an ACL authorizer; with
``authorizer.class.name`` empty, a principal in ``super.users`` (``RequestContext.
authorized_cluster_admin``: the list names every SASL identity). Deliberate difference: Kafka answers a refusal with a top-level
CLUSTER_AUTHORIZATION_FAILED, which makes confluent-kafka 2.16.1 abort the client process; Shoal
puts the error in each named user's result (a single result for user "" when all users were
asked), so clients fail the request cleanly with the same error.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, cluster_admin_refusal
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from broker.security.scram_store import MECHANISM_IDS
from broker.wire_limits import YIELD_EVERY, Steps, paced
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import DescribeUserScramCredentialsRequest

API_KEY = 50
VERSIONS = (0, 0)



def handle(ctx: RequestContext, req: DescribeUserScramCredentialsRequest) -> Any:
    names = [u.name for u in req.users or ()]
    # Tens of thousands of names (or users): answered a slice at a time, the loop served between.
    large = len(names) > YIELD_EVERY or (not names and
                                         len(ctx.broker.scram_credentials.snapshot()) > YIELD_EVERY)
    return paced(_describe(ctx, names), large)


def _describe(ctx: RequestContext, names: list[str]) -> Steps[Any]:
    m = response_module(API_KEY, ctx.api_version)
    if not ctx.authorized_cluster_admin(Operation.DESCRIBE):
        message = cluster_admin_refusal(ctx.principal, Operation.DESCRIBE,
                                        "describe SCRAM credentials",
                                        ctx.broker.authorizer.enforcing)
        # Kafka answers with a top-level error; confluent-kafka 2.16.1 aborts the client process
        # (free(): invalid pointer) on any top-level error here. The refusal goes in per-user
        # results instead (user "" for a describe of all users), which fail the futures of
        # librdkafka and of Java's client alike.
        refused = []
        for i, user in enumerate(dict.fromkeys(names or [""])):
            if i and i % YIELD_EVERY == 0:
                yield
            refused.append(_result(m, user, ErrorCode.cluster_authorization_failed, message, {}))
        return make(m.DescribeUserScramCredentialsResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.none, error_message=None, results=tuple(refused))
    store = ctx.broker.scram_credentials
    results = []
    if not names:
        for i, (user, mechs) in enumerate(store.describe().items()):
            if i and i % YIELD_EVERY == 0:
                yield
            results.append(_result(m, user, ErrorCode.none, None, mechs))
    else:
        found = store.describe(names)
        counts = Counter(names)  # linear: list.count per name was quadratic (issue 25)
        for i, user in enumerate(dict.fromkeys(names)):
            if i and i % YIELD_EVERY == 0:
                yield
            if counts[user] > 1:
                results.append(_result(m, user, ErrorCode.duplicate_resource,
                                       "Cannot describe SCRAM credentials for the same user "
                                       f"twice in a single request: {user}", {}))
            elif user not in found:
                results.append(_result(m, user, ErrorCode.resource_not_found,
                                       "Attempt to describe a user credential that does not "
                                       f"exist: {user}", {}))
            else:
                results.append(_result(m, user, ErrorCode.none, None, found[user]))
    return make(m.DescribeUserScramCredentialsResponse, throttle_time=NO_THROTTLE,
                error_code=ErrorCode.none, error_message=None, results=tuple(results))


def _result(m: Any, user: str, error: ErrorCode, message: str | None,
            mechs: dict[str, int]) -> Any:
    return make(m.DescribeUserScramCredentialsResult, user=user, error_code=error,
                error_message=message, credential_infos=tuple(
                    make(m.CredentialInfo, mechanism=MECHANISM_IDS[mech], iterations=iterations)
                    for mech, iterations in mechs.items()))
