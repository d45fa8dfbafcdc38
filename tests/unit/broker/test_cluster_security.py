"""The sans-IO parts of ``broker/cluster_security.py`` over a real ``ClusterView``: the
authorizer follows the view's ACL events, logins read credentials from the view, ``--add-scram``
is recognised as unchanged, and the finalized feature level comes from the view in cluster
mode and from the config otherwise."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from broker.cluster_security import (
    ClusterAcls,
    ClusterScramStore,
    _record,
    _same,
    feature_level,
    features_epoch,
)
from broker.security.authorizer import AclAuthorizer
from broker.security.scram_store import credential_from_password, parse_add_scram
from cluster.view import ClusterView, Keys, acl_id, acl_to_json
from protocol.acl_types import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

KEYS = Keys("/c")
DENY_READ = AclBinding(ResourceType.TOPIC, "t", PatternType.LITERAL, "User:bob", "*",
                       AclOperation.READ, AclPermissionType.DENY)


def _store(view: ClusterView) -> Any:
    return SimpleNamespace(view=view)


def test_the_authorizer_holds_etcds_acls_and_follows_their_events() -> None:
    view = ClusterView(KEYS)
    view.apply_put(KEYS.acl(acl_id(DENY_READ)), acl_to_json(DENY_READ), 2, 2)
    stale = AclBinding(ResourceType.GROUP, "g", PatternType.LITERAL, "User:bob", "*",
                       AclOperation.READ, AclPermissionType.ALLOW)
    authorizer = AclAuthorizer(allow_everyone_if_no_acl_found=True, acls=[stale])
    acls = ClusterAcls(_store(view))
    acls.attach(authorizer)
    assert authorizer.bindings() == {DENY_READ} and authorizer.store is acls
    assert not authorizer.authorize("User:bob", "h", AclOperation.READ, ResourceType.TOPIC, "t")

    view.apply_delete(KEYS.acl(acl_id(DENY_READ)), 3)
    acls.on_view_change("acl")
    assert authorizer.authorize("User:bob", "h", AclOperation.READ, ResourceType.TOPIC, "t")
    view.apply_put(KEYS.acl(acl_id(DENY_READ)), acl_to_json(DENY_READ), 4, 4)
    acls.on_view_change("topic")  # not an ACL event: nothing to do
    assert authorizer.bindings() == frozenset()
    acls.on_view_change("acl")
    assert authorizer.bindings() == {DENY_READ}


def test_logins_and_describe_read_the_view() -> None:
    view = ClusterView(KEYS)
    cred = credential_from_password("SCRAM-SHA-256", "pw", 8192)
    view.apply_put(KEYS.scram_credential("alice", "SCRAM-SHA-256"), _record(cred).to_json(), 2, 2)
    store = ClusterScramStore(_store(view))
    assert store.lookup("alice", "SCRAM-SHA-256") == cred
    assert store.lookup("alice", "SCRAM-SHA-512") is None
    assert store.describe() == {"alice": {"SCRAM-SHA-256": 8192}}
    assert store.describe(["bob", "alice"]) == {"alice": {"SCRAM-SHA-256": 8192}}


def test_add_scram_is_unchanged_only_for_the_same_password_and_iterations() -> None:
    stored = _record(credential_from_password("SCRAM-SHA-256", "pw", 4096))
    assert _same(parse_add_scram("SCRAM-SHA-256=[name=a,password=pw]"), stored)
    assert not _same(parse_add_scram("SCRAM-SHA-256=[name=a,password=other]"), stored)
    assert not _same(parse_add_scram("SCRAM-SHA-256=[name=a,password=pw,iterations=8192]"),
                     stored)
    other_salt = "c2FsdHNhbHRzYWx0c2FsdA=="  # 18 bytes, not the stored salt
    assert not _same(parse_add_scram(f"SCRAM-SHA-256=[name=a,password=pw,salt={other_salt}]"),
                     stored)


def test_the_finalized_level_is_etcds_in_a_cluster_and_the_configs_otherwise() -> None:
    single = SimpleNamespace(member=None)
    assert feature_level(single, "share.version", 1) == 1 and features_epoch(single) == 1
    view = ClusterView(KEYS)
    member = SimpleNamespace(member=SimpleNamespace(store=_store(view)))
    assert feature_level(member, "share.version", 1) == 1  # nothing in etcd yet
    view.apply_put(KEYS.features, json.dumps({"share.version": 2}).encode(), 17, 17)
    assert feature_level(member, "share.version", 1) == 2 and features_epoch(member) == 17
