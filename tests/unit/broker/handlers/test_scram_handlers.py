"""The SCRAM credential handlers without a server: Kafka's per-user answers, the describe-all and
duplicate cases clients cannot send, and the authorization hook."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode

from broker.authz import CLUSTER, DefaultAuthorizer, DenialLog, Operation, Principal, Resource
from broker.clock import FakeClock
from broker.context import RequestContext
from broker.metrics import LabelledCounter
from broker.handlers import alter_user_scram_credentials as alter
from broker.handlers import describe_user_scram_credentials as describe
from broker.security.scram_store import ScramStore, credential_from_password
from protocol.codec import request_module

SALT = b"0123456789abcdef"
BOB = Principal("User", "bob")


class DenyAll:
    """A ``broker.authz.Authorizer`` that refuses everything and records what it was asked."""

    enforcing = True

    def __init__(self) -> None:
        self.asked: list[tuple[str, Operation, Resource, str]] = []

    def authorize(self, principal: Principal, operation: Operation, resource: Resource,
                  host: str = "*") -> bool:
        self.asked.append((str(principal), operation, resource, host))
        return False


def _ctx(tmp_path: Path, api_key: int, authorizer: Any = None,
         principal: Principal | None = None) -> RequestContext:
    """A context for ``principal`` (bob, a super user of the default authorizer, by default)."""
    principal = principal or BOB
    store = ScramStore.open(tmp_path)
    store.upsert("alice", "SCRAM-SHA-256", credential_from_password("SCRAM-SHA-256", "a", 8192))
    broker = SimpleNamespace(scram_credentials=store,
                             authorizer=authorizer if authorizer is not None
                             else DefaultAuthorizer({BOB}),
                             metrics=SimpleNamespace(authorization_denied=LabelledCounter(
                                 "denied_total", "", ("operation", "resource_type"))),
                             denials=DenialLog(), clock=FakeClock())
    return RequestContext(broker=broker, api_key=api_key, api_version=0,  # type: ignore[arg-type]
                          correlation_id=1, client_id="t", client_host="10.0.0.1",
                          connection_id=1, principal=principal)


def _describe_request(*names: str) -> Any:
    m = request_module(50, 0)
    return m.DescribeUserScramCredentialsRequest(
        users=tuple(m.UserName(name=n) for n in names) if names else None)


def test_describe_all_named_duplicate_and_unknown(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, 50)
    res = describe.handle(ctx, _describe_request())
    assert res.error_code == ErrorCode.none
    assert [(r.user, r.error_code, [(c.mechanism, c.iterations) for c in r.credential_infos])
            for r in res.results] == [("alice", ErrorCode.none, [(1, 8192)])]
    res = describe.handle(ctx, _describe_request("bob", "alice", "bob", "carol"))
    assert [(r.user, r.error_code) for r in res.results] == [
        ("bob", ErrorCode.duplicate_resource), ("alice", ErrorCode.none),
        ("carol", ErrorCode.resource_not_found)]
    assert res.results[2].error_message == ("Attempt to describe a user credential that does "
                                            "not exist: carol")


def test_alter_answers_per_user(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, 51)
    m = request_module(51, 0)
    req = m.AlterUserScramCredentialsRequest(
        deletions=(m.ScramCredentialDeletion(name="alice", mechanism=2),),
        upsertions=(m.ScramCredentialUpsertion(name="bob", mechanism=2, iterations=4096,
                                               salt=SALT, salted_password=b"k" * 64),
                    m.ScramCredentialUpsertion(name="carol", mechanism=9, iterations=4096,
                                               salt=SALT, salted_password=b"k" * 64)))
    res = asyncio.run(alter.handle(ctx, req))
    assert [(r.user, r.error_code, r.error_message) for r in res.results] == [
        ("alice", ErrorCode.resource_not_found, "Attempt to delete a user credential that does "
                                                "not exist (alice, SCRAM-SHA-512)"),
        ("bob", ErrorCode.none, None),
        ("carol", ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism id 9")]
    assert ScramStore.open(tmp_path).describe() == {"alice": {"SCRAM-SHA-256": 8192},
                                                    "bob": {"SCRAM-SHA-512": 4096}}


def test_the_authorization_hook(tmp_path: Path) -> None:
    deny = DenyAll()
    ctx = _ctx(tmp_path, 50, deny)
    # In per-user results, not at the top level (see the handler's doc).
    res = describe.handle(ctx, _describe_request())
    assert res.error_code == ErrorCode.none
    assert [(r.user, r.error_code, r.credential_infos) for r in res.results] == [
        ("", ErrorCode.cluster_authorization_failed, ())]
    res = describe.handle(ctx, _describe_request("alice", "x", "alice"))
    assert res.error_code == ErrorCode.none
    assert [(r.user, r.error_code) for r in res.results] == [
        ("alice", ErrorCode.cluster_authorization_failed),
        ("x", ErrorCode.cluster_authorization_failed)]
    deny.asked.pop()
    m = request_module(51, 0)
    req = m.AlterUserScramCredentialsRequest(
        deletions=(m.ScramCredentialDeletion(name="alice", mechanism=1),), upsertions=())
    res = asyncio.run(alter.handle(_ctx(tmp_path, 51, deny), req))
    assert [(r.user, r.error_code) for r in res.results] == [
        ("alice", ErrorCode.cluster_authorization_failed)]
    assert deny.asked == [("User:bob", Operation.DESCRIBE, CLUSTER, "10.0.0.1"),
                          ("User:bob", Operation.ALTER, CLUSTER, "10.0.0.1")]
    assert res.results[0].error_message == ("User:bob is not authorized to alter SCRAM "
                                            "credentials: it needs ALTER on the CLUSTER resource")
    assert ScramStore.open(tmp_path).lookup("alice", "SCRAM-SHA-256") is not None


def test_without_an_acl_authorizer_only_super_users_may(tmp_path: Path) -> None:
    """Authorization off: a principal outside super.users can neither list the users nor
    create, replace or delete anyone's credential (it could log in as a super user)."""
    mallory = Principal("User", "mallory")
    ctx = _ctx(tmp_path, 50, principal=mallory)
    res = describe.handle(ctx, _describe_request())
    assert [(r.user, r.error_code, r.credential_infos) for r in res.results] == [
        ("", ErrorCode.cluster_authorization_failed, ())]
    assert res.results[0].error_message == (
        "User:mallory is not authorized to describe SCRAM credentials: without an ACL "
        "authorizer only super.users may (list the principal in super.users)")
    m = request_module(51, 0)
    req = m.AlterUserScramCredentialsRequest(
        deletions=(m.ScramCredentialDeletion(name="alice", mechanism=1),),
        upsertions=(m.ScramCredentialUpsertion(name="bob", mechanism=1, iterations=4096,
                                               salt=SALT, salted_password=b"k" * 32),))
    ctx = _ctx(tmp_path, 51, principal=mallory)
    res = asyncio.run(alter.handle(ctx, req))
    assert [(r.user, r.error_code) for r in res.results] == [
        ("alice", ErrorCode.cluster_authorization_failed),
        ("bob", ErrorCode.cluster_authorization_failed)]
    assert ScramStore.open(tmp_path).describe() == {"alice": {"SCRAM-SHA-256": 8192}}
    assert ctx.broker.metrics.authorization_denied.get(("ALTER", "CLUSTER")) == 1


class Name(str):
    """A user name that counts how often it is compared for equality (the cost of the
    duplicate and ordering bookkeeping, without a timer)."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        Name.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_many_users_cost_linear_comparisons(tmp_path: Path) -> None:
    """Thousands of users in one request: each name is compared a bounded number of times, not
    once per other name (list.count / list membership made 20,000 names take seconds)."""
    n = 3000
    names = [Name(f"user-{i}") for i in range(n)]
    m = request_module(50, 0)
    req = m.DescribeUserScramCredentialsRequest(
        users=tuple(m.UserName(name=u) for u in [*names, names[0]]))
    Name.compared = 0
    answer = describe.handle(_ctx(tmp_path, 50), req)
    # Over YIELD_EVERY names the answer is built a slice at a time, the event loop served between.
    assert inspect.iscoroutine(answer)
    res = asyncio.run(answer)
    assert Name.compared <= 10 * n, Name.compared
    assert len(res.results) == n
    assert res.results[0].error_code == ErrorCode.duplicate_resource
    assert {r.error_code for r in res.results[1:]} == {ErrorCode.resource_not_found}

    m = request_module(51, 0)
    req = m.AlterUserScramCredentialsRequest(
        deletions=tuple(m.ScramCredentialDeletion(name=u, mechanism=1) for u in names),
        upsertions=())
    Name.compared = 0
    res = asyncio.run(alter.handle(_ctx(tmp_path, 51), req))
    assert Name.compared <= 10 * n, Name.compared
    assert [r.user for r in res.results] == names
    assert {r.error_code for r in res.results} == {ErrorCode.resource_not_found}
