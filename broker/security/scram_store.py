"""SCRAM credentials: durable per (user, mechanism), never the password.

A credential is what RFC 5802 lets a server keep: salt, iteration count, StoredKey and ServerKey
(``ScramCredential``). AlterUserScramCredentials sends the salt and the *salted* password
(SaltedPassword = Hi(password, salt, i)); the keys are derived from it here (RFC 5802 section 3:
ClientKey = HMAC(SaltedPassword, "Client Key"), StoredKey = H(ClientKey), ServerKey =
HMAC(SaltedPassword, "Server Key")) with the standard library's ``hmac``/``hashlib``. From a
password (``--add-scram``) scramp derives them (``ScramMechanism.make_auth_info``).

Storage: one JSON file, ``scram-credentials.json`` in the data directory, mode 0600, replaced
atomically (temp file in the same directory, fsync, rename, fsync of the directory), so a crash
leaves the old or the new set and never a torn file. A snapshot file rather than an append log:
the set is small (users x 2 mechanisms) and changes are rare admin operations, so rewriting it
costs nothing, it never needs compaction, and reading it back is trivial. Writes are serialized
by a lock and readers see an immutable snapshot swapped in after the file is durable, so a
SASL login never sees a credential that a crash could take back.

``plan_alter`` holds Kafka's AlterUserScramCredentials rules as data (per-user error codes);
``ScramStore.alter`` applies a plan under the lock. ``parse_add_scram`` reads the
``kafka-storage format --add-scram`` syntax.

Invariant: every stored iteration count is in [MIN_ITERATIONS, MAX_ITERATIONS] and every salt is
at least MIN_SALT_BYTES long (scramp refuses shorter salts at login).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol

from kio.schema.errors import ErrorCode

FILE_NAME = "scram-credentials.json"
# Kafka's bounds for AlterUserScramCredentials and kafka-storage --add-scram (ScramMechanism).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096
MIN_SALT_BYTES = 12  # scramp's Salt.MIN_LENGTH

# Mechanism names and their wire ids (Kafka's ScramMechanism: UNKNOWN 0, SHA-256 1, SHA-512 2).
MECHANISM_IDS: Mapping[str, int] = MappingProxyType({"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2})
MECHANISMS_BY_ID: Mapping[int, str] = MappingProxyType({v: k for k, v in MECHANISM_IDS.items()})
_HASHES = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}


class ScramError(ValueError):
    """A credential or an ``--add-scram`` argument that cannot be used (the message never holds
    a password)."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:  # keys stay out of logs and tracebacks
        return f"ScramCredential(iterations={self.iterations}, salt={len(self.salt)} bytes)"


def credential_from_salted_password(mechanism: str, salt: bytes, salted_password: bytes,
                                    iterations: int) -> ScramCredential:
    """The stored form of a salted password (RFC 5802 section 3).

    Raises:
        ScramError: unknown mechanism.
    """
    hf = _HASHES.get(mechanism)
    if hf is None:
        raise ScramError(f"unknown SCRAM mechanism {mechanism!r}")
    client_key = hmac.new(salted_password, b"Client Key", hf).digest()
    server_key = hmac.new(salted_password, b"Server Key", hf).digest()
    return ScramCredential(salt, hf(client_key).digest(), server_key, iterations)


def credential_from_password(mechanism: str, password: str, iterations: int | None = None,
                             salt: bytes | None = None) -> ScramCredential:
    """Salt (random unless given) and hash a password with scramp.

    Raises:
        ScramError: unknown mechanism, iterations out of range, salt too short, or a password
            SASLprep rejects.
    """
    import scramp  # lazy: ~150 ms to import; only setting a credential needs it

    if mechanism not in MECHANISM_IDS:
        raise ScramError(f"unknown SCRAM mechanism {mechanism!r}")
    i = DEFAULT_ITERATIONS if iterations is None else iterations
    problem = iterations_problem(i) or (salt_problem(salt) if salt is not None else None)
    if problem:
        raise ScramError(problem)
    try:
        s, stored_key, server_key, i = scramp.ScramMechanism(mechanism).make_auth_info(
            password, iteration_count=i, salt=salt)
    except scramp.ScramException:
        raise ScramError("the password cannot be used for SCRAM (SASLprep rejects it)") from None
    return ScramCredential(bytes(s), stored_key, server_key, int(i))


def iterations_problem(iterations: int) -> str | None:
    if iterations < MIN_ITERATIONS:
        return f"Too few iterations: {iterations} (at least {MIN_ITERATIONS})"
    if iterations > MAX_ITERATIONS:
        return f"Too many iterations: {iterations} (at most {MAX_ITERATIONS})"
    return None


def salt_problem(salt: bytes) -> str | None:
    if len(salt) < MIN_SALT_BYTES:
        return f"The salt must be at least {MIN_SALT_BYTES} bytes long, got {len(salt)}"
    return None


# ------------------------------------------------------------------------ AlterUserScram rules

class Deletion(NamedTuple):
    user: str
    mechanism: int  # wire id


class Upsertion(NamedTuple):
    user: str
    mechanism: int  # wire id
    iterations: int
    salt: bytes
    salted_password: bytes

    def __repr__(self) -> str:
        return f"Upsertion(user={self.user!r}, mechanism={self.mechanism}, " \
               f"iterations={self.iterations})"


class UserResult(NamedTuple):
    user: str
    error: ErrorCode
    message: str | None


@dataclass(frozen=True, slots=True)
class AlterPlan:
    """Per-user outcomes in request order (users appear once) and the changes to make."""

    results: list[UserResult]
    upserts: list[tuple[str, str, ScramCredential]]
    deletes: list[tuple[str, str]]


def plan_alter(current: Mapping[str, Mapping[str, ScramCredential]],
               deletions: Sequence[Deletion], upsertions: Sequence[Upsertion]) -> AlterPlan:
    """Kafka's AlterUserScramCredentials validation, as data. A user with any invalid change
    gets that error and none of its changes is made (Kafka answers per user).

    Errors: UNSUPPORTED_SASL_MECHANISM (unknown mechanism id), UNACCEPTABLE_CREDENTIAL (empty
    user, iterations outside [4096, 16384], salt shorter than 12 bytes, empty salted password),
    DUPLICATE_RESOURCE (two changes to one user and mechanism), RESOURCE_NOT_FOUND (deleting a
    credential that does not exist).
    """
    # Linear in the number of changes: users in first-seen order as dict keys, not a list
    # searched per change (20,000 users made that seconds of event-loop time; issue 25).
    order: dict[str, None] = {}
    errors: dict[str, tuple[ErrorCode, str]] = {}
    seen: dict[tuple[str, int], int] = {}
    changes: list[Deletion | Upsertion] = [*deletions, *upsertions]
    for change in changes:
        order.setdefault(change.user, None)
        seen[(change.user, change.mechanism)] = seen.get((change.user, change.mechanism), 0) + 1

    def fail(user: str, code: ErrorCode, message: str) -> None:
        errors.setdefault(user, (code, message))

    for change in changes:
        user, mech_id = change.user, change.mechanism
        mechanism = MECHANISMS_BY_ID.get(mech_id)
        if mechanism is None:
            fail(user, ErrorCode.unsupported_sasl_mechanism,
                 f"Unknown SCRAM mechanism id {mech_id}")
        elif not user:
            fail(user, ErrorCode.unacceptable_credential, "Username must not be empty")
        elif seen[(user, mech_id)] > 1:
            fail(user, ErrorCode.duplicate_resource,
                 f"A user credential cannot be altered twice in the same request "
                 f"({user}, {mechanism})")
        elif isinstance(change, Upsertion):
            problem = (iterations_problem(change.iterations) or salt_problem(change.salt)
                       or (None if change.salted_password else "The salted password is empty"))
            if problem:
                fail(user, ErrorCode.unacceptable_credential, problem)
        elif mechanism not in current.get(user, {}):
            fail(user, ErrorCode.resource_not_found,
                 f"Attempt to delete a user credential that does not exist ({user}, "
                 f"{mechanism})")
    upserts = [(u.user, MECHANISMS_BY_ID[u.mechanism],
                credential_from_salted_password(MECHANISMS_BY_ID[u.mechanism], u.salt,
                                                u.salted_password, u.iterations))
               for u in upsertions if u.user not in errors]
    deletes = [(d.user, MECHANISMS_BY_ID[d.mechanism]) for d in deletions if d.user not in errors]
    results = [UserResult(user, *errors[user]) if user in errors
               else UserResult(user, ErrorCode.none, None) for user in order]
    return AlterPlan(results, upserts, deletes)


# ------------------------------------------------------------------------------------ store

Snapshot = Mapping[str, Mapping[str, ScramCredential]]


class CredentialStore(Protocol):
    """What logins and the SCRAM RPCs use: ``ScramStore`` (a file) or, in cluster mode, etcd
    (``broker/cluster_security.ClusterScramStore``)."""

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None: ...

    def snapshot(self) -> Snapshot: ...

    def describe(self, users: Iterable[str] | None = None) -> dict[str, dict[str, int]]: ...

    async def alter_async(self, deletions: Sequence[Deletion],
                          upsertions: Sequence[Upsertion]) -> list[UserResult]: ...


class ScramStore:
    """The durable credential set. ``lookup``/``describe`` read the current snapshot without a
    lock; ``apply``/``alter`` write the file, then swap the snapshot (thread-safe; the broker
    calls them through ``asyncio.to_thread``)."""

    def __init__(self, path: Path) -> None:
        """Load ``path`` (an absent file is an empty set).

        Raises:
            ScramError: the file is not a credential file Shoal wrote.
            OSError: it cannot be read.
        """
        self.path = path
        self._lock = threading.Lock()
        self._snapshot: Snapshot = _load(path)
        # A crash between creating a temp file and the rename leaves one behind.
        for stale in path.parent.glob(f".{path.name}.*.tmp"):
            stale.unlink(missing_ok=True)

    @classmethod
    def open(cls, data_dir: Path) -> ScramStore:
        return cls(Path(data_dir) / FILE_NAME)

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._snapshot.get(user, {}).get(mechanism)

    def snapshot(self) -> Snapshot:
        return self._snapshot

    def describe(self, users: Iterable[str] | None = None) -> dict[str, dict[str, int]]:
        """{user: {mechanism: iterations}} for every user with a credential (``users`` None) or
        for those of ``users`` that have one (the others are left out)."""
        snap = self._snapshot
        names = sorted(snap) if users is None else [u for u in users if u in snap]
        return {u: {m: c.iterations for m, c in sorted(snap[u].items())} for u in names}

    def upsert(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        """Raises:
            ScramError: unknown mechanism or a credential out of bounds.
            OSError: the file could not be written (nothing changed).
        """
        self.apply([(user, mechanism, credential)], [])

    def delete(self, user: str, mechanism: str) -> bool:
        """Remove a credential; False if there was none.

        Raises:
            OSError: the file could not be written (nothing changed).
        """
        with self._lock:
            if self.lookup(user, mechanism) is None:
                return False
            self._apply_locked([], [(user, mechanism)])
        return True

    def apply(self, upserts: Sequence[tuple[str, str, ScramCredential]],
              deletes: Sequence[tuple[str, str]]) -> None:
        """Make all changes with one durable write (deleting a missing credential is a no-op).

        Raises:
            ScramError: unknown mechanism or a credential out of bounds.
            OSError: the file could not be written (nothing changed).
        """
        with self._lock:
            self._apply_locked(upserts, deletes)

    def alter(self, deletions: Sequence[Deletion],
              upsertions: Sequence[Upsertion]) -> list[UserResult]:
        """Validate (``plan_alter``) and apply an AlterUserScramCredentials request atomically.

        Raises:
            OSError: the file could not be written (nothing changed).
        """
        with self._lock:
            plan = plan_alter(self._snapshot, deletions, upsertions)
            if plan.upserts or plan.deletes:
                self._apply_locked(plan.upserts, plan.deletes)
            return plan.results

    async def alter_async(self, deletions: Sequence[Deletion],
                          upsertions: Sequence[Upsertion]) -> list[UserResult]:
        """``alter`` off the event loop.

        Raises:
            OSError: the file could not be written (nothing changed).
        """
        return await asyncio.to_thread(self.alter, deletions, upsertions)

    def _apply_locked(self, upserts: Sequence[tuple[str, str, ScramCredential]],
                      deletes: Sequence[tuple[str, str]]) -> None:
        new: dict[str, dict[str, ScramCredential]] = {u: dict(m) for u, m in self._snapshot.items()}
        for user, mechanism in deletes:
            new.get(user, {}).pop(mechanism, None)
        for user, mechanism, cred in upserts:
            if mechanism not in MECHANISM_IDS:
                raise ScramError(f"unknown SCRAM mechanism {mechanism!r}")
            problem = iterations_problem(cred.iterations) or salt_problem(cred.salt)
            if problem:
                raise ScramError(f"credential for {user} ({mechanism}): {problem}")
            new.setdefault(user, {})[mechanism] = cred
        new = {u: m for u, m in new.items() if m}
        _write(self.path, _encode(new))
        self._snapshot = MappingProxyType({u: MappingProxyType(m) for u, m in new.items()})


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


def _encode(creds: Mapping[str, Mapping[str, ScramCredential]]) -> bytes:
    doc = {"version": 1, "credentials": {
        user: {mech: {"salt": _b64(c.salt), "stored_key": _b64(c.stored_key),
                      "server_key": _b64(c.server_key), "iterations": c.iterations}
               for mech, c in sorted(mechs.items())}
        for user, mechs in sorted(creds.items())}}
    return json.dumps(doc, indent=1).encode("utf-8")


def _load(path: Path) -> Snapshot:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return MappingProxyType({})
    try:
        doc: Any = json.loads(raw)
        if doc.get("version") != 1:
            raise ValueError(f"version {doc.get('version')!r}")
        out: dict[str, Mapping[str, ScramCredential]] = {}
        for user, mechs in doc["credentials"].items():
            entry: dict[str, ScramCredential] = {}
            for mech, c in mechs.items():
                if mech not in MECHANISM_IDS:
                    raise ValueError(f"unknown mechanism {mech!r}")
                entry[mech] = ScramCredential(
                    base64.b64decode(c["salt"], validate=True),
                    base64.b64decode(c["stored_key"], validate=True),
                    base64.b64decode(c["server_key"], validate=True), int(c["iterations"]))
            out[str(user)] = MappingProxyType(entry)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ScramError(f"{path}: not a SCRAM credential file ({exc})") from None
    return MappingProxyType(out)


def _write(path: Path, data: bytes) -> None:
    """Replace ``path`` durably: a crash leaves the old or the new file. The temp file is 0600
    (``mkstemp``) and the final file keeps that mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


# --------------------------------------------------------------------------- --add-scram

class ScramArg(NamedTuple):
    """One ``--add-scram`` value. Either ``password`` (salted here, with ``salt`` if given) or
    ``salted_password`` + ``salt`` (used as given)."""

    mechanism: str
    user: str
    password: str | None
    iterations: int | None
    salt: bytes | None = None
    salted_password: bytes | None = None

    def __repr__(self) -> str:
        return f"ScramArg({self.mechanism}, user={self.user!r}, iterations={self.iterations})"

    def credential(self) -> ScramCredential:
        """Raises:
            ScramError: see ``credential_from_password``.
        """
        if self.password is not None:
            return credential_from_password(self.mechanism, self.password, self.iterations,
                                            self.salt)
        assert self.salt is not None and self.salted_password is not None
        return credential_from_salted_password(self.mechanism, self.salt, self.salted_password,
                                               self.iterations or DEFAULT_ITERATIONS)


def _split_fields(body: str) -> list[tuple[str, str]]:
    """``k=v,k="v, with comma",...`` to pairs; quotes may hold ',' and '\\"'."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(body)
    while i < n:
        eq = body.find("=", i)
        if eq < 0:
            raise ScramError(f"expected key=value, got {body[i:].split(',')[0]!r}")
        key = body[i:eq].strip()
        i = eq + 1
        if i < n and body[i] == '"':
            buf: list[str] = []
            i += 1
            while i < n and body[i] != '"':
                if body[i] == "\\" and i + 1 < n:
                    i += 1
                buf.append(body[i])
                i += 1
            if i >= n:
                raise ScramError(f"the quoted value of {key!r} is not closed")
            value = "".join(buf)
            i += 1
            while i < n and body[i] == " ":
                i += 1
            if i < n and body[i] != ",":
                raise ScramError(f"expected ',' after the value of {key!r}")
        else:
            comma = body.find(",", i)
            end = n if comma < 0 else comma
            value = body[i:end].strip()
            i = end
        out.append((key, value))
        i += 1  # the comma
    return out


def parse_add_scram(arg: str) -> ScramArg:
    """Parse ``SCRAM-SHA-256=[name=alice,password=alice-secret]`` (kafka-storage's syntax;
    also ``iterations=8192``, ``salt=<base64>``, and ``saltedpassword=<base64>`` with ``salt``
    instead of ``password``; values may be double-quoted).

    Raises:
        ScramError: malformed, unknown mechanism or key, missing name, neither or both of
            password and saltedpassword, bad base64, or iterations out of range. The message
            never repeats the argument (it holds a password).
    """
    mechanism, sep, rest = arg.strip().partition("=")
    mechanism = mechanism.strip().upper()
    if not sep:
        raise ScramError("expected MECHANISM=[name=...,password=...]")
    if mechanism not in MECHANISM_IDS:
        raise ScramError(f"unknown SCRAM mechanism {mechanism!r} (one of "
                         f"{', '.join(MECHANISM_IDS)})")
    rest = rest.strip()
    if not (rest.startswith("[") and rest.endswith("]")):
        raise ScramError(f"{mechanism}: the credential must be in [...]")
    fields: dict[str, str] = {}
    for key, value in _split_fields(rest[1:-1]):
        key = key.lower()
        if key not in ("name", "password", "iterations", "salt", "saltedpassword"):
            raise ScramError(f"{mechanism}: unknown key {key!r} (name, password, iterations, "
                             "salt, saltedpassword)")
        if key in fields:
            raise ScramError(f"{mechanism}: {key} is given twice")
        fields[key] = value
    user = fields.get("name", "")
    if not user:
        raise ScramError(f"{mechanism}: name=<user> is required")
    iterations = _iterations_field(fields, mechanism)
    salt = _b64_field(fields, "salt", mechanism)
    salted = _b64_field(fields, "saltedpassword", mechanism)
    password = fields.get("password")
    if (password is None) == (salted is None):
        raise ScramError(f"{mechanism}: give either password or saltedpassword (with salt)")
    if salted is not None and salt is None:
        raise ScramError(f"{mechanism}: saltedpassword needs salt")
    if salt is not None:
        problem = salt_problem(salt)
        if problem:
            raise ScramError(f"{mechanism}: {problem}")
    return ScramArg(mechanism, user, password, iterations, salt, salted)


def _iterations_field(fields: Mapping[str, str], mechanism: str) -> int | None:
    if "iterations" not in fields:
        return None
    try:
        iterations = int(fields["iterations"])
    except ValueError:
        raise ScramError(f"{mechanism}: iterations must be a number") from None
    problem = iterations_problem(iterations)
    if problem:
        raise ScramError(f"{mechanism}: {problem}")
    return iterations


def _b64_field(fields: Mapping[str, str], key: str, mechanism: str) -> bytes | None:
    if key not in fields:
        return None
    try:
        return base64.b64decode(fields[key], validate=True)
    except ValueError:
        raise ScramError(f"{mechanism}: {key} must be base64") from None
