"""The view's ACL, SCRAM credential and feature-level keys: what each event changes, what a
listener is told, and that unreadable values are refused without touching the view."""

from __future__ import annotations

import json

import pytest

from cluster.view import ClusterView, Keys, MetadataFormatError, ScramRecord, acl_id, acl_to_json
from protocol.acl_types import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType

KEYS = Keys("/c1")
READ = AclBinding(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", "*",
                  AclOperation.READ, AclPermissionType.ALLOW)
DENY = AclBinding(ResourceType.GROUP, "g", PatternType.PREFIXED, "User:*", "10.0.0.1",
                  AclOperation.ALL, AclPermissionType.DENY)
CRED = ScramRecord(b"s" * 16, b"k" * 32, b"v" * 32, 8192)


def test_acl_keys_are_one_per_binding_and_events_say_what_changed() -> None:
    view = ClusterView(KEYS)
    assert acl_id(READ) == acl_id(AclBinding(*[getattr(READ, f) for f in READ.__slots__]))
    assert acl_id(READ) != acl_id(DENY)
    assert view.apply_put(KEYS.acl(acl_id(READ)), acl_to_json(READ), 5, 5) == "acl"
    assert view.changed_acl == (None, READ)
    assert view.apply_put(KEYS.acl(acl_id(DENY)), acl_to_json(DENY), 6, 6) == "acl"
    assert set(view.acls.values()) == {READ, DENY} and view.revision == 6
    assert view.apply_put(KEYS.acl(acl_id(READ)), acl_to_json(READ), 7, 5) == "acl"
    assert view.changed_acl == (READ, READ)  # a second put of the same binding
    assert view.apply_delete(KEYS.acl(acl_id(READ)), 8) == "acl"
    assert view.changed_acl == (READ, None) and set(view.acls.values()) == {DENY}
    assert view.apply_delete(KEYS.acl("gone"), 9) == "acl"
    assert view.changed_acl == (None, None)


def test_scram_credentials_per_user_and_mechanism() -> None:
    view = ClusterView(KEYS)
    assert ScramRecord.from_json(CRED.to_json()) == CRED
    assert "kkkk" not in repr(CRED)
    assert view.apply_put(KEYS.scram_credential("a/b", "SCRAM-SHA-256"), CRED.to_json(), 3,
                          3) == "scram"
    assert view.apply_put(KEYS.scram_credential("a/b", "SCRAM-SHA-512"), CRED.to_json(), 4,
                          4) == "scram"
    assert view.scram == {"a/b": {"SCRAM-SHA-256": CRED, "SCRAM-SHA-512": CRED}}
    assert view.apply_delete(KEYS.scram_credential("a/b", "SCRAM-SHA-256"), 5) == "scram"
    assert view.scram == {"a/b": {"SCRAM-SHA-512": CRED}}
    assert view.apply_delete(KEYS.scram_credential("a/b", "SCRAM-SHA-512"), 6) == "scram"
    assert view.scram == {}  # a user without credentials is gone
    assert view.apply_delete(KEYS.scram + b"MD5/x", 7) is None


def test_features_are_one_key_and_its_revision_is_the_epoch() -> None:
    view = ClusterView(KEYS)
    assert view.apply_put(KEYS.features, json.dumps({"share.version": 1}).encode(), 12,
                          12) == "features"
    assert view.features == {"share.version": 1} and view.features_epoch == 12
    assert view.apply_delete(KEYS.features, 13) == "features"
    assert view.features == {} and view.features_epoch == 0


def test_present_keys_lists_every_key_the_view_holds() -> None:
    view = ClusterView(KEYS)
    view.apply_put(KEYS.acl(acl_id(READ)), acl_to_json(READ), 1, 1)
    view.apply_put(KEYS.scram_credential("u", "SCRAM-SHA-256"), CRED.to_json(), 2, 2)
    view.apply_put(KEYS.features, b'{"share.version": 2}', 3, 3)
    assert set(view.present_keys()) == {KEYS.acl(acl_id(READ)),
                                         KEYS.scram_credential("u", "SCRAM-SHA-256"),
                                         KEYS.features}


INVALID_ACL = dict(json.loads(acl_to_json(READ)), principal="alice")  # not Type:name


@pytest.mark.parametrize("key,value", [
    (KEYS.acl("x"), b"{not json"),
    (KEYS.acl("x"), json.dumps({"name": "t"}).encode()),
    (KEYS.acl("x"), json.dumps(INVALID_ACL).encode()),
    (KEYS.scram_credential("u", "SCRAM-SHA-256"), b'{"salt": "!!", "stored_key": "", '
                                                  b'"server_key": "", "iterations": 4096}'),
    (KEYS.scram + b"MD5/u", CRED.to_json()),
    (KEYS.features, b'{"share.version": "two"}'),
])
def test_unreadable_values_name_their_key_and_change_nothing(key: bytes, value: bytes) -> None:
    view = ClusterView(KEYS)
    with pytest.raises(MetadataFormatError, match=key.decode()):
        view.apply_put(key, value, 4, 4)
    assert view.acls == {} and view.scram == {} and view.features == {} and view.revision == 0
