"""The ACL authorizer: who may do what, decided as Kafka's ``StandardAuthorizer`` decides (sans-IO).

Decision for ``authorize(principal, host, operation, resource_type, name)``:

1. A super user (``super.users``) is allowed everything.
2. The ACLs that *apply to the resource* are the LITERAL ones with its name, the LITERAL
   wildcard ``*`` of its type, and the PREFIXED ones whose name is a prefix of its name.
   If there are none at all, the answer is ``allow.everyone.if.no.acl.found`` (default: deny).
3. Of those, an entry *matches* when its principal is the caller's or ``User:*``, its host is
   the caller's or ``*``, and its operation covers the requested one (ALL covers every
   operation; an ALLOW of READ/WRITE/DELETE/ALTER also covers DESCRIBE and an ALLOW of
   ALTER_CONFIGS covers DESCRIBE_CONFIGS).
4. Any matching DENY denies; else any matching ALLOW allows; else deny. So once any ACL names a
   resource, allow.everyone no longer applies to it.

Index (for speed with thousands of ACLs): literal ACLs by ``(type, name)`` in a dict, prefixed
ACLs by type then prefix in dicts, plus the sorted distinct prefix lengths per type, so finding
the prefixed ACLs of a name is one dict probe per distinct length (``name[:k]``), independent
of the number of ACLs. Each bucket keeps its entries by principal, and each entry holds the set
of operations it decides, so a check reads only the caller's and ``User:*`` entries. Answers
are cached per (principal, host, operation, type, name); any ACL change clears the cache.

Changes follow the house rule (STYLE.md 1.3): ``plan_create``/``plan_delete`` validate and
return an ``AclChange`` without mutating; ``apply`` is the one mutator, called once the change
is durable (``broker/security/acl_store.py``).
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from broker.wire_limits import YIELD_EVERY, Steps, run_steps
from protocol.acl_types import (
    SUPPORTED_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    binding_problem,
    covered_operations,
    filter_problem,
    operations_bitfield,
    principal_problem,
)

if TYPE_CHECKING:
    from broker.security.acl_store import AclWriter

# Bound on cached decisions; the cache is dropped whole when full (cheap, and a full cache
# means the working set is not small anyway).
CACHE_SIZE = 100_000

_ALLOW = AclPermissionType.ALLOW


@dataclass(frozen=True, slots=True)
class _Entry:
    host: str
    allow: bool
    covers: frozenset[AclOperation]


def _entry(b: AclBinding) -> _Entry:
    return _Entry(canonical_host(b.host), b.permission == _ALLOW,
                  covered_operations(b.operation, b.permission))


def canonical_host(host: str) -> str:
    """An IP address in the form connections report it (``0:0:0:0:0:0:0:1`` -> ``::1``, the
    way Python prints peer addresses), so an ACL written with Java's long IPv6 form still
    matches; anything else (``*``, a name) is kept as written."""
    if host == WILDCARD:
        return host
    try:
        return ipaddress.ip_address(host).compressed
    except ValueError:
        return host


# principal -> entries with that principal, for one resource pattern.
_Bucket = dict[str, list[_Entry]]


@dataclass(frozen=True, slots=True)
class AclResult:
    """The outcome of one ACL creation or one deletion filter, as the response carries it."""

    error: ErrorCode = ErrorCode.none
    message: str | None = None
    # DeleteAcls: the bindings the filter matched (and removed).
    matched: tuple[AclBinding, ...] = ()


@dataclass(frozen=True, slots=True)
class AclChange:
    """A planned change: what to add and remove, and the per-item results to answer with."""

    added: frozenset[AclBinding] = field(default_factory=frozenset)
    removed: frozenset[AclBinding] = field(default_factory=frozenset)
    results: tuple[AclResult, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.added and not self.removed


def parse_super_users(value: str) -> frozenset[str]:
    """``User:a;User:b`` to a set of principals (blank items skipped, as Kafka does).

    Raises:
        ValueError: an item is not of the form ``Type:name``.
    """
    out = set()
    for item in value.split(";"):
        item = item.strip()
        if not item:
            continue
        problem = principal_problem(item)
        if problem:
            raise ValueError(f"super.users: {problem}")
        out.add(item)
    return frozenset(out)


class AclAuthorizer:
    """ACL-based authorization with Kafka's semantics (see the module docstring)."""

    def __init__(self, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False,
                 acls: Iterable[AclBinding] = ()) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._bindings: set[AclBinding] = set()
        self._literal: dict[tuple[ResourceType, str], _Bucket] = {}
        self._prefixed: dict[ResourceType, dict[str, _Bucket]] = {}
        self._prefix_lengths: dict[ResourceType, Counter[int]] = {}
        self._sorted_lengths: dict[ResourceType, tuple[int, ...]] = {}
        self._cache: dict[tuple[str, str, AclOperation, ResourceType, str], bool] = {}
        # Makes changes durable before they apply (set by setup.py; None: memory only, tests).
        self.store: AclWriter | None = None
        self._add_all(acls)

    # -- reading -----------------------------------------------------------------------------

    def authorize(self, principal: str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        """Whether ``principal`` connected from ``host`` may do ``operation`` on the resource
        ``(resource_type, name)`` (a literal name: a topic, a group id, ``kafka-cluster``)."""
        if principal in self.super_users:
            return True
        key = (principal, host, operation, resource_type, name)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        decision = self._decide(principal, host, operation, resource_type, name)
        if len(self._cache) >= CACHE_SIZE:
            self._cache.clear()
        self._cache[key] = decision
        return decision

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType,
                              name: str, ops: Iterable[AclOperation] | None = None) -> int:
        """The AuthorizedOperations bitfield (bit ``1 << code``) of the operations in ``ops``
        (default: all the resource type supports) that ``principal`` may do on the resource."""
        candidates = SUPPORTED_OPERATIONS.get(resource_type, ()) if ops is None else ops
        return operations_bitfield(op for op in candidates
                                   if self.authorize(principal, host, op, resource_type, name))

    def authorize_by_resource_type(self, principal: str, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Whether ``principal`` may do ``operation`` on *some* resource of ``resource_type``
        (Kafka ``Authorizer.authorizeByResourceType``; InitProducerId uses it for "WRITE on any
        topic"). An ALLOW counts unless a DENY for the same caller covers all it names."""
        # A made-up name lets super users, wildcard ALLOWs and allow.everyone answer first.
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        deny_literal: set[str] = set()
        deny_prefixes: set[str] = set()
        allows: list[AclBinding] = []
        for b in self._bindings:
            if (b.resource_type != resource_type
                    or canonical_host(b.host) not in (WILDCARD, host)
                    or b.principal not in (principal, WILDCARD_PRINCIPAL)
                    or b.operation not in (operation, AclOperation.ALL)):
                continue
            if b.permission == AclPermissionType.DENY:
                if b.pattern_type == PatternType.LITERAL:
                    if b.name == WILDCARD:
                        return False
                    deny_literal.add(b.name)
                else:
                    deny_prefixes.add(b.name)
            else:
                allows.append(b)
        for b in allows:
            if b.pattern_type == PatternType.LITERAL and b.name == WILDCARD:
                return True
        for b in allows:
            if b.pattern_type == PatternType.LITERAL and b.name in deny_literal:
                continue
            if not any(b.name[:k] in deny_prefixes for k in range(1, len(b.name) + 1)):
                return True
        return False

    def acls(self, flt: AclBindingFilter) -> list[AclBinding]:
        """The ACLs ``flt`` selects, sorted."""
        return sorted(b for b in self._bindings if flt.matches(b))

    def bindings(self) -> frozenset[AclBinding]:
        return frozenset(self._bindings)

    def __len__(self) -> int:
        return len(self._bindings)

    def _decide(self, principal: str, host: str, operation: AclOperation,
                resource_type: ResourceType, name: str) -> bool:
        buckets: list[_Bucket] = []
        b = self._literal.get((resource_type, name))
        if b is not None:
            buckets.append(b)
        if name != WILDCARD:
            b = self._literal.get((resource_type, WILDCARD))
            if b is not None:
                buckets.append(b)
        prefixed = self._prefixed.get(resource_type)
        if prefixed:
            n = len(name)
            for k in self._sorted_lengths[resource_type]:
                if k > n:
                    break
                b = prefixed.get(name[:k])
                if b is not None:
                    buckets.append(b)
        if not buckets:
            return self.allow_everyone_if_no_acl_found
        allowed = False
        for bucket in buckets:
            for who in (principal, WILDCARD_PRINCIPAL):
                for e in bucket.get(who, ()):
                    if operation in e.covers and (e.host == WILDCARD or e.host == host):
                        if not e.allow:
                            return False  # DENY wins
                        allowed = True
        return allowed

    # -- changing ----------------------------------------------------------------------------

    def plan_create(self, creations: Sequence[AclBinding]) -> AclChange:
        """Validate ``creations``; the change adds the valid, new ones. Per-item results in order
        (creating an ACL that exists succeeds and changes nothing, as in Kafka)."""
        return run_steps(self.plan_create_steps(creations))

    def plan_create_steps(self, creations: Sequence[AclBinding]) -> Steps[AclChange]:
        """``plan_create`` yielding every ``YIELD_EVERY`` creations (``broker/wire_limits.py``)."""
        added: set[AclBinding] = set()
        results = []
        for i, b in enumerate(creations):
            if i and i % YIELD_EVERY == 0:
                yield
            problem = binding_problem(b)
            if problem:
                results.append(AclResult(problem[0], problem[1]))
                continue
            if b not in self._bindings:
                added.add(b)
            results.append(AclResult())
        return AclChange(added=frozenset(added), results=tuple(results))

    def plan_delete(self, filters: Sequence[AclBindingFilter]) -> AclChange:
        """Each valid filter removes the ACLs it matches now; an ACL matched by two filters is
        reported under both (as Kafka does)."""
        return run_steps(self.plan_delete_steps(filters))

    def plan_delete_steps(self, filters: Sequence[AclBindingFilter]) -> Steps[AclChange]:
        """``plan_delete`` yielding after about ``YIELD_EVERY`` filters' worth of work (a valid
        filter scans every ACL, so it counts for one plus an eighth of their number)."""
        removed: set[AclBinding] = set()
        results = []
        work = 0
        for f in filters:
            if work >= YIELD_EVERY:
                work = 0
                yield
            work += 1
            problem = filter_problem(f)
            if problem:
                results.append(AclResult(problem[0], problem[1]))
                continue
            work += len(self._bindings) // 8
            matched = tuple(self.acls(f))
            removed.update(matched)
            results.append(AclResult(matched=matched))
        return AclChange(removed=frozenset(removed), results=tuple(results))

    def after(self, change: AclChange) -> frozenset[AclBinding]:
        """The ACL set ``change`` would leave (what the store writes before ``apply``)."""
        return frozenset((self._bindings - change.removed) | change.added)

    def apply(self, change: AclChange) -> None:
        """Make a (durable) change visible to authorize()."""
        for b in change.removed:
            self._remove(b)
        self._add_all(change.added)
        self._cache.clear()

    def _add_all(self, acls: Iterable[AclBinding]) -> None:
        for b in acls:
            if b in self._bindings:
                continue
            self._bindings.add(b)
            bucket = self._bucket_for(b, create=True)
            assert bucket is not None
            bucket.setdefault(b.principal, []).append(_entry(b))
        self._cache.clear()

    def _remove(self, b: AclBinding) -> None:
        if b not in self._bindings:
            return
        self._bindings.discard(b)
        bucket = self._bucket_for(b, create=False)
        assert bucket is not None
        entries = bucket[b.principal]
        entries.remove(_entry(b))
        if not entries:
            del bucket[b.principal]
        if bucket:
            return
        if b.pattern_type == PatternType.LITERAL:
            del self._literal[(b.resource_type, b.name)]
            return
        del self._prefixed[b.resource_type][b.name]
        lengths = self._prefix_lengths[b.resource_type]
        lengths[len(b.name)] -= 1
        if not lengths[len(b.name)]:
            del lengths[len(b.name)]
            self._sorted_lengths[b.resource_type] = tuple(sorted(lengths))

    def _bucket_for(self, b: AclBinding, *, create: bool) -> _Bucket | None:
        if b.pattern_type == PatternType.LITERAL:
            key = (b.resource_type, b.name)
            bucket = self._literal.get(key)
            if bucket is None and create:
                bucket = self._literal[key] = {}
            return bucket
        by_prefix = self._prefixed.get(b.resource_type)
        if by_prefix is None:
            if not create:
                return None
            by_prefix = self._prefixed[b.resource_type] = {}
        bucket = by_prefix.get(b.name)
        if bucket is None and create:
            bucket = by_prefix[b.name] = {}
            lengths = self._prefix_lengths.setdefault(b.resource_type, Counter())
            lengths[len(b.name)] += 1
            self._sorted_lengths[b.resource_type] = tuple(sorted(lengths))
        return bucket
