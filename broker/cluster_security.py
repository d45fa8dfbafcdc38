"""ACLs, SCRAM credentials and feature levels in etcd, for a broker in cluster mode.

A single broker keeps its ACLs in ``acls.json`` (``broker/security/acl_store.py``) and its
credentials in ``scram-credentials.json`` (``broker/security/scram_store.py``), and advertises
the ``share.version`` of its own config. In a cluster all three live in etcd
(``cluster/view.py``: ``acls/``, ``scram/``, ``features``) and every broker serves them from its
watched view, so any broker answers the same and enforces the same:

- **ACLs.** ``ClusterAcls`` is the authorizer's writer (``AclWriter``): CreateAcls/DeleteAcls
  are planned against the authorizer (which mirrors the view), written as one etcd transaction
  (all or nothing) and answered once the watch brought the change back to this broker. Every
  broker's authorizer follows the view's ``"acl"`` events, so an ACL created through one broker
  is enforced by all of them as soon as their watch delivers it. A broker's old ``acls.json`` is
  not used (a warning says so if it holds ACLs that etcd does not).
- **SCRAM credentials.** ``ClusterScramStore`` answers logins and DescribeUserScramCredentials
  from the view and writes AlterUserScramCredentials to etcd in one transaction (Kafka's
  per-user validation, ``scram_store.plan_alter``). ``--add-scram`` writes a credential only if
  etcd has none for that user and mechanism or a different one (same password, salt and
  iterations: nothing is written, so restarting a broker does not change every salt).
- **Feature levels.** The first broker of a cluster writes its ``share.version`` into
  ``features``; later brokers use what etcd holds (a different setting of their own is logged,
  not applied). ``feature_level`` answers ApiVersions and the share-partition leaders.

Errors: etcd refused or could not be reached -> KAFKA_STORAGE_ERROR for each item that would
have changed (nothing changed); etcd did not answer, or took the change but it did not come back
within ``VISIBLE_TIMEOUT_S`` -> REQUEST_TIMED_OUT; a request of more changes than one etcd
transaction may hold (``MAX_TXN_OPS``) -> POLICY_VIOLATION. Items refused by validation keep
their own error.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.security.authorizer import AclAuthorizer, AclChange, AclResult
from broker.security.acl_store import Plan, planned
from broker.security.scram_store import (
    DEFAULT_ITERATIONS,
    Deletion,
    ScramArg,
    ScramCredential,
    ScramError,
    Snapshot,
    Upsertion,
    UserResult,
    credential_from_password,
    credential_from_salted_password,
    plan_alter,
)
from cluster.errors import ClusterStoreError, TooManyChangesError
from cluster.view import ScramRecord, acl_id

if TYPE_CHECKING:
    from broker.app import Broker
    from cluster.etcd_store import EtcdClusterStore

log = logging.getLogger("shoal.cluster.security")

# How long a change waits for etcd, then for its own change to come back through the watch.
VISIBLE_TIMEOUT_S = 15.0
# Features whose finalized level is one broker config (ApiVersions' table names the others).
FEATURE_CONFIGS = {"share.version": "share.version"}


async def attach_cluster_security(broker: Broker) -> None:
    """Serve ACLs, SCRAM credentials and feature levels from etcd (call in ``Broker.start``
    after ``member.join`` and ``build_authorizer``; sets ``broker.scram_credentials``).

    Raises:
        ClusterStoreError: etcd did not take ``--add-scram`` credentials or the feature levels.
        ScramError: an ``--add-scram`` credential cannot be made.
    """
    member = broker.member
    assert member is not None
    store = member.store
    acls = None
    if broker.acl_authorizer is not None:
        acls = ClusterAcls(store)
        acls.attach(broker.acl_authorizer)
    credentials = ClusterScramStore(store)
    broker.scram_credentials = credentials
    if acls is not None:
        store.add_listener(acls.on_view_change)
    try:
        await credentials.bootstrap(broker.scram_bootstrap)
        await _finalize_features(broker, store)
    except (ClusterStoreError, ScramError):
        raise
    except Exception as e:
        raise ClusterStoreError(f"etcd did not take this broker's --add-scram credentials or "
                                f"feature levels ({type(e).__name__}: {e}); check that etcd "
                                "is reachable and start the broker again") from None


# -- feature levels -------------------------------------------------------------------------


def feature_level(broker: Any, name: str, default: int) -> int:
    """The finalized level of feature ``name``: etcd's in cluster mode, else ``default`` (the
    broker's config)."""
    member = getattr(broker, "member", None)
    if member is not None:
        level = member.store.view.features.get(name)
        if level is not None:
            return int(level)
    return default


def features_epoch(broker: Any) -> int:
    """ApiVersions' FinalizedFeaturesEpoch: the revision of etcd's features key, 1 on a single
    broker (its levels never change while it runs)."""
    member = getattr(broker, "member", None)
    epoch = member.store.view.features_epoch if member is not None else 0
    return int(epoch) or 1


async def _finalize_features(broker: Broker, store: EtcdClusterStore) -> None:
    mine = {name: int(broker.config.get(config)) for name, config in FEATURE_CONFIGS.items()}
    stored = await asyncio.wait_for(store.ensure_features(mine), VISIBLE_TIMEOUT_S)
    for name, level in mine.items():
        if name in stored and stored[name] != level:
            log.warning("this broker's %s=%d is not applied: the cluster's finalized %s level "
                        "is %d (set in etcd by the first broker); every broker advertises and "
                        "uses that level", FEATURE_CONFIGS[name], level, name, stored[name])
    await store.wait_for(lambda: store.view.features_epoch > 0, VISIBLE_TIMEOUT_S)


# -- ACLs ---------------------------------------------------------------------------------------


class ClusterAcls:
    """The ACL authorizer's writer in cluster mode (see the module doc)."""

    def __init__(self, store: EtcdClusterStore) -> None:
        self.store = store
        self.authorizer: AclAuthorizer | None = None
        self._lock = asyncio.Lock()

    def attach(self, authorizer: AclAuthorizer) -> None:
        """Make ``authorizer`` hold etcd's ACLs (not ``acls.json``'s) and write through here."""
        local = authorizer.bindings()
        cluster = frozenset(self.store.view.acls.values())
        if local - cluster:
            log.warning("%d ACL(s) in this broker's acls.json are not in the cluster's ACLs in "
                        "etcd and are not applied: in cluster mode ACLs live in etcd; create "
                        "them again with kafka-acls (CreateAcls) through any broker",
                        len(local - cluster))
        authorizer.apply(AclChange(added=cluster - local, removed=local - cluster))
        authorizer.store = self
        self.authorizer = authorizer
        log.info("ACLs from etcd: %d", len(cluster))

    def on_view_change(self, kind: str) -> None:
        """An ACL key changed in the view: apply the difference to the authorizer."""
        if kind != "acl" or self.authorizer is None:
            return
        before, after = self.store.view.changed_acl
        removed = frozenset((before,)) if before is not None and before != after else frozenset()
        added = frozenset((after,)) if after is not None else frozenset()
        self.authorizer.apply(AclChange(added=added, removed=removed))

    async def commit(self, authorizer: AclAuthorizer, plan: Plan) -> tuple[AclResult, ...]:
        """Plan against the current ACLs, write the change to etcd in one transaction, answer
        once this broker's view has it (``AclWriter``)."""
        async with self._lock:
            change = await planned(plan)
            if change.empty:
                return change.results
            view = self.store.view
            added, removed = [acl_id(b) for b in change.added], [acl_id(b) for b in change.removed]

            def visible() -> bool:
                return (all(i in view.acls for i in added)
                        and not any(i in view.acls for i in removed))

            error = await _write(self.store, self.store.put_acls(change.added, change.removed),
                                 visible, "ACL change")
            if error is not None:
                return tuple(r if r.error != ErrorCode.none else AclResult(*error)
                             for r in change.results)
            for b in sorted(change.added):
                log.info("ACL added (in etcd): %s", b)
            for b in sorted(change.removed):
                log.info("ACL removed (in etcd): %s", b)
            return change.results


# -- SCRAM credentials ---------------------------------------------------------------------------


class ClusterScramStore:
    """SCRAM credentials served from the view and changed through etcd (see the module doc).
    Has the reading methods of ``ScramStore`` (``lookup``, ``describe``, ``snapshot``)."""

    path = "the cluster metadata store (etcd)"

    def __init__(self, store: EtcdClusterStore) -> None:
        self.store = store
        self._lock = asyncio.Lock()

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        record = self.store.view.scram.get(user, {}).get(mechanism)
        return None if record is None else _credential(record)

    def snapshot(self) -> Snapshot:
        return {u: {m: _credential(r) for m, r in ms.items()}
                for u, ms in self.store.view.scram.items()}

    def describe(self, users: Iterable[str] | None = None) -> dict[str, dict[str, int]]:
        """As ``ScramStore.describe``: {user: {mechanism: iterations}}."""
        scram = self.store.view.scram
        names = sorted(scram) if users is None else [u for u in users if u in scram]
        return {u: {m: r.iterations for m, r in sorted(scram[u].items())} for u in names}

    async def alter_async(self, deletions: Sequence[Deletion],
                          upsertions: Sequence[Upsertion]) -> list[UserResult]:
        """AlterUserScramCredentials: validate (``plan_alter``), write every valid change in one
        transaction, answer once this broker's view has it."""
        async with self._lock:
            scram = self.store.view.scram
            users = {c.user for c in deletions} | {c.user for c in upsertions}
            current = {u: {m: _credential(r) for m, r in scram[u].items()}
                       for u in users if u in scram}
            plan = plan_alter(current, deletions, upsertions)
            if not plan.upserts and not plan.deletes:
                return plan.results
            upserts = [(u, m, _record(c)) for u, m, c in plan.upserts]
            error = await _write(self.store, self.store.put_scram(upserts, plan.deletes),
                                 self._shows(upserts, plan.deletes), "SCRAM credential change")
            if error is not None:
                return [r if r.error != ErrorCode.none else UserResult(r.user, *error)
                        for r in plan.results]
            return plan.results

    async def bootstrap(self, args: Sequence[ScramArg]) -> None:
        """Write the ``--add-scram`` credentials that etcd lacks or holds differently.

        Raises:
            ScramError: a credential cannot be made from its argument.
            ClusterStoreError: etcd did not take them.
        """
        todo: dict[tuple[str, str], ScramRecord] = {}
        for arg in args:
            current = self.store.view.scram.get(arg.user, {}).get(arg.mechanism)
            if current is not None and _same(arg, current):
                log.info("SCRAM credential of user %s (%s) from --add-scram is already in etcd",
                         arg.user, arg.mechanism)
                continue
            todo[(arg.user, arg.mechanism)] = _record(arg.credential())
        if not todo:
            return
        upserts = [(u, m, r) for (u, m), r in todo.items()]
        error = await _write(self.store, self.store.put_scram(upserts, []),
                             self._shows(upserts, []), "--add-scram credential change")
        if error is not None:
            raise ClusterStoreError(error[1])
        for user, mechanism, _r in upserts:
            log.info("SCRAM credential of user %s (%s) set in etcd from --add-scram", user,
                     mechanism)

    def _shows(self, upserts: list[tuple[str, str, ScramRecord]],
               deletes: list[tuple[str, str]]) -> Callable[[], bool]:
        scram = self.store.view.scram

        def visible() -> bool:
            return (all(scram.get(u, {}).get(m) == r for u, m, r in upserts)
                    and not any(m in scram.get(u, {}) for u, m in deletes))
        return visible


def _credential(r: ScramRecord) -> ScramCredential:
    return ScramCredential(r.salt, r.stored_key, r.server_key, r.iterations)


def _record(c: ScramCredential) -> ScramRecord:
    return ScramRecord(c.salt, c.stored_key, c.server_key, c.iterations)


def _same(arg: ScramArg, current: ScramRecord) -> bool:
    """Whether ``--add-scram`` ``arg`` describes the stored credential (same iterations, salt
    if given, and password: derived again with the stored salt)."""
    if (arg.iterations or DEFAULT_ITERATIONS) != current.iterations:
        return False
    if arg.salt is not None and arg.salt != current.salt:
        return False
    if arg.password is not None:
        again = credential_from_password(arg.mechanism, arg.password, current.iterations,
                                         current.salt)
    else:
        assert arg.salted_password is not None
        again = credential_from_salted_password(arg.mechanism, current.salt,
                                                arg.salted_password, current.iterations)
    return (hmac.compare_digest(again.stored_key, current.stored_key)
            and hmac.compare_digest(again.server_key, current.server_key))


# -- writing ----------------------------------------------------------------------------------


async def _write(store: EtcdClusterStore, call: Any, expected: Callable[[], bool],
                 what: str) -> tuple[ErrorCode, str] | None:
    """Run an etcd write (``EtcdClusterStore.write``: returns (revision, changed)) and wait
    until the view shows it; None when it does, else the (error, message) to answer with."""
    view = store.view
    try:
        revision, changed = await asyncio.wait_for(call, VISIBLE_TIMEOUT_S)
    except TooManyChangesError as e:
        return ErrorCode.policy_violation, f"{what} not made: {e}; split the request"
    except (asyncio.TimeoutError, TimeoutError):
        log.error("%s: etcd did not answer within %.0f s; answered REQUEST_TIMED_OUT", what,
                  VISIBLE_TIMEOUT_S)
        return ErrorCode.request_timed_out, (
            f"{what}: the cluster metadata store (etcd) did not answer within "
            f"{VISIBLE_TIMEOUT_S:.0f} s; it may or may not have been made, describe to see")
    except Exception as e:
        log.error("%s not made: etcd did not take it (%s); nothing changed, answered "
                  "KAFKA_STORAGE_ERROR; check that etcd is reachable", what, type(e).__name__)
        return ErrorCode.kafka_storage_error, (
            f"{what} not made: the cluster metadata store (etcd) did not take it "
            f"({type(e).__name__}); nothing changed, retry once etcd is reachable")

    def seen() -> bool:
        # Our events carry ``revision``; a later event means ours were all applied.
        if view.revision > revision:
            return True
        return expected() and (view.revision >= revision or not changed)

    try:
        await store.wait_for(seen, VISIBLE_TIMEOUT_S)
    except (asyncio.TimeoutError, TimeoutError):
        return ErrorCode.request_timed_out, (
            f"etcd took {what} but it did not reach this broker within "
            f"{VISIBLE_TIMEOUT_S:.0f} s; describe again to see it")
    return None
