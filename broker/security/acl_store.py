"""Durable ACLs: ``<data dir>/acls.json``, replaced atomically on every change.

Why one atomically written file and not a log of changes: ACL changes are rare admin operations
and the set is small (thousands of entries are ~100-200 KB of JSON), so rewriting it whole costs
about one fsync, the same as appending a record would. A whole file needs no compaction,
snapshots or replay rules, and an operator can read and back it up. The write is the house
pattern of ``topics.json`` (``broker.log.topics.atomic_write``): write ``acls.json.tmp``, fsync it,
rename it over ``acls.json``, fsync the directory. A crash at any point leaves the old file or
the new one, never a torn one; a leftover ``acls.json.tmp`` is ignored and overwritten.

Invariants:

* A change is durable before anyone sees it: ``commit`` writes the new set, then calls
  ``AclAuthorizer.apply``, then the handler answers (STYLE.md 1.4). A failed write changes
  nothing in memory and answers UNKNOWN_SERVER_ERROR.
* Changes are serialized (one at a time under a lock) and each is planned against the state the
  previous one left, so concurrent CreateAcls/DeleteAcls never lose each other's work.
* A file that cannot be read or holds an invalid ACL stops the broker (``AclStoreError``):
  starting with some ACLs silently dropped could turn a DENY into an ALLOW.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from broker.log.topics import atomic_write
from protocol.acl_types import AclBinding, binding_doc, binding_from_doc, binding_problem
from broker.security.authorizer import AclAuthorizer, AclChange, AclResult
from broker.wire_limits import Steps, run_steps_async

log = logging.getLogger("shoal.acl")

FILE_NAME = "acls.json"
FORMAT_VERSION = 1


class AclStoreError(OSError):
    """``acls.json`` cannot be used; the message says which file, what is wrong and what to do.
    An ``OSError`` so that startup reports it as "could not start" like other data-dir faults."""


def encode(bindings: Iterable[AclBinding]) -> bytes:
    """The file contents for an ACL set (sorted, one ACL per line, names not codes)."""
    rows = [json.dumps(binding_doc(b), sort_keys=True) for b in sorted(bindings)]
    body = ",\n    ".join(rows)
    return (f'{{"version": {FORMAT_VERSION}, "acls": [\n    {body}\n]}}\n' if rows
            else f'{{"version": {FORMAT_VERSION}, "acls": []}}\n').encode()


def decode(data: bytes, where: str) -> list[AclBinding]:
    """Parse file contents.

    Raises:
        AclStoreError: not JSON, an unknown format version, or an entry that is not a valid ACL.
    """
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise AclStoreError(f"{where} is not valid JSON ({exc}); restore it from a backup or "
                            "move it away to start with no ACLs") from None
    if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION:
        raise AclStoreError(f"{where} has format version {_version(doc)!r}; this broker reads "
                            f"version {FORMAT_VERSION}")
    out = []
    for i, row in enumerate(doc.get("acls", ())):
        try:
            b = binding_from_doc(row)
        except (KeyError, TypeError, ValueError) as exc:
            raise AclStoreError(f"{where}: ACL #{i + 1} {row!r} cannot be read ({exc!r}); fix "
                                "or remove that entry") from None
        problem = binding_problem(b)
        if problem:
            raise AclStoreError(f"{where}: ACL #{i + 1} is invalid: {problem[1]}")
        out.append(b)
    return out


def _version(doc: Any) -> Any:
    return doc.get("version") if isinstance(doc, dict) else None


# A change to plan against the current ACLs: ``authorizer.plan_create``/``plan_delete`` bound to
# a request, or their ``*_steps`` form for a large request (the event loop served meanwhile).
Plan = Callable[[], "AclChange | Steps[AclChange]"]


async def planned(plan: Plan) -> AclChange:
    """The change ``plan`` makes, run through (a step plan hands the loop back at each step)."""
    change = plan()
    if isinstance(change, AclChange):
        return change
    return await run_steps_async(change)


class AclWriter(Protocol):
    """Where ACL changes are made durable: ``AclStore`` (a single broker's ``acls.json``) or,
    in cluster mode, etcd (``broker/cluster_security.py``)."""

    async def commit(self, authorizer: AclAuthorizer,
                     plan: Plan) -> tuple[AclResult, ...]: ...


class AclStore:
    """``acls.json`` in a data directory, and the one path by which ACLs change."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / FILE_NAME
        self._lock = asyncio.Lock()

    def load(self) -> list[AclBinding]:
        """The stored ACLs (none if the file does not exist yet).

        Raises:
            AclStoreError: the file cannot be read or is not a valid ACL file.
        """
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise AclStoreError(f"cannot read {self.path}: {exc}") from exc
        return decode(data, str(self.path))

    def write(self, bindings: Iterable[AclBinding]) -> None:
        """Replace the stored set (blocking; atomic, see the module docstring).

        Raises:
            OSError: the write, an fsync or the rename failed.
        """
        atomic_write(self.path, encode(bindings))

    async def commit(self, authorizer: AclAuthorizer,
                     plan: Plan) -> tuple[AclResult, ...]:
        """Plan a change against the current ACLs, make it durable, then apply it; the results
        to answer with. ``plan`` is ``authorizer.plan_create``/``plan_delete`` bound to the
        request. A failed write applies nothing and turns every successful item into
        UNKNOWN_SERVER_ERROR (items that were refused keep their own error)."""
        async with self._lock:
            change = await planned(plan)
            if change.empty:
                return change.results
            after = authorizer.after(change)
            try:
                await asyncio.to_thread(self.write, after)
            except OSError as exc:
                log.error("ACL change not made: writing %s failed: %s", self.path, exc)
                message = (f"ACLs were not changed: writing {self.path} failed ({exc}); check "
                           "the data directory's disk")
                return tuple(r if r.error != ErrorCode.none
                             else AclResult(ErrorCode.unknown_server_error, message)
                             for r in change.results)
            authorizer.apply(change)
            for b in sorted(change.added):
                log.info("ACL added: %s", b)
            for b in sorted(change.removed):
                log.info("ACL removed: %s", b)
            return change.results


async def commit(authorizer: AclAuthorizer, plan: Plan) -> tuple[AclResult, ...]:
    """Commit through the authorizer's store, or apply in memory when it has none (tests)."""
    if authorizer.store is not None:
        return await authorizer.store.commit(authorizer, plan)
    change = await planned(plan)
    authorizer.apply(change)
    return change.results
