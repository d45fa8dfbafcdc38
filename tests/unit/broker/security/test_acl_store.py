"""Durable ACLs (broker/security/acl_store.py): round trip, changes durable before they apply,
and a crash at any step of a write leaves the old file or the new one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker.config import BrokerConfig, ConfigError
from broker.security import acl_store
from protocol.acl_types import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from broker.security.acl_store import AclStore, AclStoreError, decode, encode
from broker.security.authorizer import AclAuthorizer
from broker.security.setup import build_authorizer
from storage import fileops

READ = AclBinding(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", "*",
                  AclOperation.READ, AclPermissionType.ALLOW)
DENY = AclBinding(ResourceType.GROUP, "g-", PatternType.PREFIXED, "User:*", "10.0.0.1",
                  AclOperation.ALL, AclPermissionType.DENY)
ODD = AclBinding(ResourceType.TOPIC, 'quo"te\\\u00e9', PatternType.LITERAL, "User:CN=a,O=b",
                 "*", AclOperation.WRITE, AclPermissionType.ALLOW)


def test_encode_decode_round_trip() -> None:
    assert decode(encode([READ, DENY, ODD]), "x") == sorted([READ, DENY, ODD])
    assert decode(encode([]), "x") == []


def test_store_round_trip(tmp_path: Path) -> None:
    store = AclStore(tmp_path)
    assert store.load() == []
    store.write([READ, DENY])
    assert AclStore(tmp_path).load() == sorted([READ, DENY])
    assert not (tmp_path / "acls.json.tmp").exists()


@pytest.mark.parametrize("content,message", [
    (b'{"version": 1, "acls": [', "not valid JSON"),
    (b'{"version": 7, "acls": []}', "format version 7"),
    (b'[]', "format version None"),
    (b'{"version": 1, "acls": [{"resource_type": "TOPIC"}]}', "ACL #1"),
    (b'{"version": 1, "acls": [{"resource_type": "TOPIC", "name": "t", "pattern_type": "MATCH",'
     b' "principal": "User:a", "host": "*", "operation": "READ", "permission": "ALLOW"}]}',
     "ACL #1 is invalid"),
], ids=["torn", "future-version", "not-an-object", "missing-fields", "invalid-acl"])
def test_a_bad_file_stops_the_broker_with_a_clear_error(tmp_path: Path, content: bytes,
                                                        message: str) -> None:
    (tmp_path / "acls.json").write_bytes(content)
    with pytest.raises(AclStoreError, match=message) as info:
        AclStore(tmp_path).load()
    assert str(tmp_path / "acls.json") in str(info.value)


class Crash(Exception):
    """Stands for the process dying at a given step of the write."""


@pytest.mark.parametrize("step", ["write", "fsync", "replace"])
def test_crash_during_a_write_leaves_the_old_file(tmp_path: Path, step: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    store = AclStore(tmp_path)
    store.write([READ])
    real_fsync = os.fsync

    def crash(*args: object) -> None:
        raise Crash(step)

    if step == "write":
        # half of the new file reaches the temp file, then the process dies (the writes go
        # through the storage.fileops seam)
        class Torn(fileops.FileOps):
            def pwrite(self, fd: int, data: bytes | bytearray | memoryview, pos: int) -> int:
                super().pwrite(fd, memoryview(data)[: len(data) // 2], pos)
                crash()
                return 0

        monkeypatch.setattr(fileops, "OPS", Torn())
    elif step == "fsync":
        monkeypatch.setattr(os, "fsync", crash)
    else:
        monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(Crash):
        store.write([READ, DENY, ODD])
    monkeypatch.undo()
    assert os.fsync is real_fsync
    assert AclStore(tmp_path).load() == [READ]


def test_crash_after_the_rename_leaves_the_new_file(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    store = AclStore(tmp_path)
    store.write([READ])
    real_fsync = os.fsync
    calls = []

    def fsync_then_die_on_the_directory(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 2:  # the temp file's fsync went through, the directory's did not
            raise Crash("dir fsync")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync_then_die_on_the_directory)
    with pytest.raises(Crash):
        store.write([READ, DENY])
    monkeypatch.undo()
    assert AclStore(tmp_path).load() == sorted([READ, DENY])


def test_a_leftover_temp_file_is_ignored(tmp_path: Path) -> None:
    AclStore(tmp_path).write([READ])
    (tmp_path / "acls.json.tmp").write_bytes(b'{"version": 1, "acls": [{"trunc')
    assert AclStore(tmp_path).load() == [READ]
    AclStore(tmp_path).write([DENY])
    assert AclStore(tmp_path).load() == [DENY]


async def test_commit_writes_before_it_applies(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    store = AclStore(tmp_path)
    authorizer = AclAuthorizer()
    authorizer.store = store
    seen_at_write: list[int] = []
    real_write = store.write

    def write(bindings: object) -> None:
        seen_at_write.append(len(authorizer))
        real_write(bindings)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "write", write)
    results = await acl_store.commit(authorizer, lambda: authorizer.plan_create([READ, DENY]))
    assert [r.error for r in results] == [ErrorCode.none, ErrorCode.none]
    assert seen_at_write == [0]  # not yet visible while being written
    assert authorizer.bindings() == {READ, DENY}
    assert AclStore(tmp_path).load() == sorted([READ, DENY])

    results = await acl_store.commit(authorizer, lambda: authorizer.plan_delete(
        [AclBindingFilter(resource_type=ResourceType.GROUP)]))
    assert results[0].matched == (DENY,)
    assert AclStore(tmp_path).load() == [READ]


async def test_a_failed_write_changes_nothing(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    store = AclStore(tmp_path)
    authorizer = AclAuthorizer()
    authorizer.store = store

    def fail(bindings: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store, "write", fail)
    bad = AclBinding(ResourceType.TOPIC, "", PatternType.LITERAL, "User:a", "*",
                     AclOperation.READ, AclPermissionType.ALLOW)
    results = await acl_store.commit(authorizer, lambda: authorizer.plan_create([READ, bad]))
    assert [r.error for r in results] == [ErrorCode.unknown_server_error,
                                          ErrorCode.invalid_request]
    assert "No space left" in (results[0].message or "")
    assert len(authorizer) == 0 and not (tmp_path / "acls.json").exists()


async def test_concurrent_changes_are_serialized(tmp_path: Path) -> None:
    import asyncio

    store = AclStore(tmp_path)
    authorizer = AclAuthorizer()
    authorizer.store = store
    acls = [AclBinding(ResourceType.TOPIC, f"t{i}", PatternType.LITERAL, "User:a", "*",
                       AclOperation.READ, AclPermissionType.ALLOW) for i in range(20)]
    await asyncio.gather(*(acl_store.commit(authorizer, lambda b=b: authorizer.plan_create([b]))
                           for b in acls))
    assert AclStore(tmp_path).load() == sorted(acls)


# ----------------------------------------------------------------------------- setup/config

def test_no_authorizer_by_default(tmp_path: Path) -> None:
    assert build_authorizer(BrokerConfig(), tmp_path) is None


@pytest.mark.parametrize("class_name", [
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
])
def test_kafka_class_names_select_the_acl_authorizer(tmp_path: Path, class_name: str) -> None:
    AclStore(tmp_path).write([READ])
    config = BrokerConfig({"authorizer.class.name": class_name,
                           "super.users": "User:admin;User:ops",
                           "allow.everyone.if.no.acl.found": "true"})
    authorizer = build_authorizer(config, tmp_path)
    assert isinstance(authorizer, AclAuthorizer)
    assert authorizer.super_users == {"User:admin", "User:ops"}
    assert authorizer.allow_everyone_if_no_acl_found is True
    assert authorizer.bindings() == {READ}
    assert authorizer.store is not None


def test_an_unknown_authorizer_class_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="authorizer.class.name.*com.example.MyAuthorizer.*"
                                          "StandardAuthorizer"):
        BrokerConfig({"authorizer.class.name": "com.example.MyAuthorizer"})


def test_a_malformed_super_user_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="super.users.*'admin' is not of the form Type:name"):
        BrokerConfig({"super.users": "admin"})
