"""SCRAM credential store: durable per (user, mechanism), AlterUserScramCredentials rules as data,
and the ``--add-scram`` syntax."""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from pathlib import Path

import pytest
import scramp
from kio.schema.errors import ErrorCode

from broker.security.sasl import Authenticator, SaslServerConfig
from broker.security.scram_store import (
    FILE_NAME,
    Deletion,
    ScramArg,
    ScramError,
    ScramStore,
    Upsertion,
    UserResult,
    credential_from_password,
    credential_from_salted_password,
    parse_add_scram,
    plan_alter,
)

SHA256, SHA512 = 1, 2
SALT = b"0123456789abcdef"


def _salted(password: str, salt: bytes = SALT, iterations: int = 4096, hf: str = "sha256") -> bytes:
    return hashlib.pbkdf2_hmac(hf, password.encode(), salt, iterations)


def test_salted_password_and_password_give_the_same_credential() -> None:
    a = credential_from_password("SCRAM-SHA-256", "secret", 4096, SALT)
    b = credential_from_salted_password("SCRAM-SHA-256", SALT, _salted("secret"), 4096)
    assert a == b
    assert "stored_key" not in repr(a) and a.salt not in repr(a).encode()


def test_store_survives_reopen_and_is_private(tmp_path: Path) -> None:
    store = ScramStore.open(tmp_path)
    assert store.describe() == {}
    cred = credential_from_password("SCRAM-SHA-512", "pw", 8192)
    store.upsert("alice", "SCRAM-SHA-512", cred)
    store.upsert("bob", "SCRAM-SHA-256", credential_from_password("SCRAM-SHA-256", "x"))
    path = tmp_path / FILE_NAME
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert b"pw" not in path.read_bytes().replace(b'"', b" ").split()
    again = ScramStore.open(tmp_path)
    assert again.lookup("alice", "SCRAM-SHA-512") == cred
    assert again.lookup("alice", "SCRAM-SHA-256") is None
    assert again.describe() == {"alice": {"SCRAM-SHA-512": 8192}, "bob": {"SCRAM-SHA-256": 4096}}
    assert again.describe(["bob", "nobody"]) == {"bob": {"SCRAM-SHA-256": 4096}}
    assert again.delete("alice", "SCRAM-SHA-512") is True
    assert again.delete("alice", "SCRAM-SHA-512") is False
    assert ScramStore.open(tmp_path).describe() == {"bob": {"SCRAM-SHA-256": 4096}}
    assert [p.name for p in tmp_path.iterdir()] == [FILE_NAME]  # no temp file left


def test_a_failed_write_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = ScramStore.open(tmp_path)
    store.upsert("alice", "SCRAM-SHA-256", credential_from_password("SCRAM-SHA-256", "a"))

    def boom(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        store.upsert("bob", "SCRAM-SHA-256", credential_from_password("SCRAM-SHA-256", "b"))
    monkeypatch.undo()
    assert store.describe() == {"alice": {"SCRAM-SHA-256": 4096}}
    assert ScramStore.open(tmp_path).describe() == {"alice": {"SCRAM-SHA-256": 4096}}
    assert [p.name for p in tmp_path.iterdir()] == [FILE_NAME]


def test_a_temp_file_left_by_a_crash_is_removed(tmp_path: Path) -> None:
    (tmp_path / f".{FILE_NAME}.abc.tmp").write_text("{}")
    ScramStore.open(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_corrupt_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text('{"version": 7}')
    with pytest.raises(ScramError, match="not a SCRAM credential file"):
        ScramStore.open(tmp_path)


def test_a_stored_credential_logs_in(tmp_path: Path) -> None:
    store = ScramStore.open(tmp_path)
    store.alter([], [Upsertion("carol", SHA256, 4096, SALT, _salted("carol-pw"))])
    a = Authenticator(SaslServerConfig(("SCRAM-SHA-256",)), ScramStore.open(tmp_path).lookup)
    a.handshake("SCRAM-SHA-256")
    client = scramp.ScramClient(["SCRAM-SHA-256"], "carol", "carol-pw")
    first = a.step(client.get_client_first().encode())
    client.set_server_first(first.response.decode())  # type: ignore[union-attr]
    assert a.step(client.get_client_final().encode()).principal == "User:carol"


# ------------------------------------------------------------------------------ plan_alter

def _up(user: str, mech: int = SHA256, iterations: int = 4096, salt: bytes = SALT,
        salted: bytes = b"x" * 32) -> Upsertion:
    return Upsertion(user, mech, iterations, salt, salted)


EXISTING = {"alice": {"SCRAM-SHA-256": credential_from_password("SCRAM-SHA-256", "a", 4096)}}

ALTER_CASES = [
    ("upsert", [], [_up("bob")], [UserResult("bob", ErrorCode.none, None)]),
    ("delete existing", [Deletion("alice", SHA256)], [],
     [UserResult("alice", ErrorCode.none, None)]),
    ("delete missing mechanism", [Deletion("alice", SHA512)], [],
     [UserResult("alice", ErrorCode.resource_not_found,
                 "Attempt to delete a user credential that does not exist (alice, "
                 "SCRAM-SHA-512)")]),
    ("unknown mechanism", [], [_up("bob", mech=3)],
     [UserResult("bob", ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism id 3")]),
    ("empty user", [], [_up("")],
     [UserResult("", ErrorCode.unacceptable_credential, "Username must not be empty")]),
    ("too few iterations", [], [_up("bob", iterations=4095)],
     [UserResult("bob", ErrorCode.unacceptable_credential,
                 "Too few iterations: 4095 (at least 4096)")]),
    ("too many iterations", [], [_up("bob", iterations=16385)],
     [UserResult("bob", ErrorCode.unacceptable_credential,
                 "Too many iterations: 16385 (at most 16384)")]),
    ("short salt", [], [_up("bob", salt=b"short")],
     [UserResult("bob", ErrorCode.unacceptable_credential,
                 "The salt must be at least 12 bytes long, got 5")]),
    ("duplicate", [Deletion("alice", SHA256)], [_up("alice")],
     [UserResult("alice", ErrorCode.duplicate_resource,
                 "A user credential cannot be altered twice in the same request (alice, "
                 "SCRAM-SHA-256)")]),
    ("two mechanisms of one user are fine", [], [_up("bob"), _up("bob", SHA512)],
     [UserResult("bob", ErrorCode.none, None)]),
    ("one bad change fails the user only", [], [_up("bob"), _up("bob", SHA512, 1), _up("carol")],
     [UserResult("bob", ErrorCode.unacceptable_credential,
                 "Too few iterations: 1 (at least 4096)"),
      UserResult("carol", ErrorCode.none, None)]),
]


@pytest.mark.parametrize(("case", "deletions", "upsertions", "results"), ALTER_CASES,
                         ids=[c[0] for c in ALTER_CASES])
def test_plan_alter(case: str, deletions: list[Deletion], upsertions: list[Upsertion],
                    results: list[UserResult]) -> None:
    plan = plan_alter(EXISTING, deletions, upsertions)
    assert plan.results == results
    ok = {r.user for r in results if r.error == ErrorCode.none}
    assert {u for u, _, _ in plan.upserts} | {u for u, _ in plan.deletes} == ok


class _Name(str):
    """A user name that counts its equality comparisons (the planning's cost, without a timer)."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        _Name.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_plan_alter_compares_each_user_a_bounded_number_of_times() -> None:
    """Issue 25: thousands of users in one AlterUserScramCredentials are planned in linear time
    (a list searched per change made 20,000 users hold the event loop for seconds)."""
    n = 2000
    names = [_Name(f"user-{i}") for i in range(n)]
    deletions = [Deletion(u, SHA512) for u in names[: n // 2]]
    upsertions = [_up(u, iterations=1) for u in names]  # invalid: nothing is hashed
    _Name.compared = 0
    plan = plan_alter(EXISTING, deletions, upsertions)
    assert _Name.compared <= 10 * n, _Name.compared
    assert len(plan.results) == n
    assert {r.error for r in plan.results[: n // 2]} == {ErrorCode.resource_not_found}
    assert {r.error for r in plan.results[n // 2:]} == {ErrorCode.unacceptable_credential}


def test_alter_applies_only_valid_users(tmp_path: Path) -> None:
    store = ScramStore.open(tmp_path)
    res = store.alter([], [_up("bob"), _up("bob", SHA512, 1), _up("carol", SHA512, 8192)])
    assert [r.error for r in res] == [ErrorCode.unacceptable_credential, ErrorCode.none]
    assert ScramStore.open(tmp_path).describe() == {"carol": {"SCRAM-SHA-512": 8192}}
    res = store.alter([Deletion("carol", SHA512)], [])
    assert res == [UserResult("carol", ErrorCode.none, None)]
    assert ScramStore.open(tmp_path).describe() == {}


# ----------------------------------------------------------------------------- --add-scram

B64_SALT = base64.b64encode(SALT).decode()
B64_SALTED = base64.b64encode(b"y" * 32).decode()

ADD_SCRAM = [
    ("SCRAM-SHA-256=[name=admin,password=admin-secret]",
     ScramArg("SCRAM-SHA-256", "admin", "admin-secret", None)),
    ("scram-sha-512=[name=alice,iterations=8192,password=\"a,b=c\\\"d\"]",
     ScramArg("SCRAM-SHA-512", "alice", 'a,b=c"d', 8192)),
    (f'SCRAM-SHA-256=[name="bob",salt="{B64_SALT}",password=pw]',
     ScramArg("SCRAM-SHA-256", "bob", "pw", None, SALT)),
    (f"SCRAM-SHA-512=[name=carol,iterations=4096,salt={B64_SALT},saltedpassword={B64_SALTED}]",
     ScramArg("SCRAM-SHA-512", "carol", None, 4096, SALT, b"y" * 32)),
]


@pytest.mark.parametrize(("arg", "expected"), ADD_SCRAM, ids=[a[:30] for a, _ in ADD_SCRAM])
def test_parse_add_scram(arg: str, expected: ScramArg) -> None:
    got = parse_add_scram(arg)
    assert got == expected
    mechanism, user, password, iterations = got[:4]
    assert (mechanism, user, password, iterations) == expected[:4]
    cred = got.credential()
    assert cred.iterations == (expected.iterations or 4096)
    if expected.salt is not None:
        assert cred.salt == expected.salt
    assert "secret" not in repr(got)


BAD_ADD_SCRAM = [
    ("SCRAM-SHA-1=[name=a,password=b]", "unknown SCRAM mechanism"),
    ("SCRAM-SHA-256", "expected MECHANISM="),
    ("SCRAM-SHA-256=name=a,password=b", "must be in"),
    ("SCRAM-SHA-256=[password=b]", "name=<user> is required"),
    ("SCRAM-SHA-256=[name=a]", "either password or saltedpassword"),
    (f"SCRAM-SHA-256=[name=a,password=b,saltedpassword={B64_SALTED},salt={B64_SALT}]",
     "either password or saltedpassword"),
    (f"SCRAM-SHA-256=[name=a,saltedpassword={B64_SALTED}]", "needs salt"),
    ("SCRAM-SHA-256=[name=a,password=b,iterations=100]", "Too few iterations"),
    ("SCRAM-SHA-256=[name=a,password=b,iterations=99999]", "Too many iterations"),
    ("SCRAM-SHA-256=[name=a,password=b,iterations=x]", "must be a number"),
    ("SCRAM-SHA-256=[name=a,password=b,salt=!!]", "salt must be base64"),
    ("SCRAM-SHA-256=[name=a,password=b,salt=YWJj]", "at least 12 bytes"),
    ("SCRAM-SHA-256=[name=a,pasword=b]", "unknown key 'pasword'"),
    ("SCRAM-SHA-256=[name=a,name=b,password=c]", "name is given twice"),
    ('SCRAM-SHA-256=[name=a,password="b]', "not closed"),
]


@pytest.mark.parametrize(("arg", "message"), BAD_ADD_SCRAM, ids=[m for _, m in BAD_ADD_SCRAM])
def test_bad_add_scram(arg: str, message: str) -> None:
    with pytest.raises(ScramError, match=message) as info:
        parse_add_scram(arg)
    assert "password=b" not in str(info.value)
