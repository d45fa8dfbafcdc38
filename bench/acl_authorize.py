"""Micro-benchmark of ``AclAuthorizer.authorize`` (issue 13: authorization must stay cheap).

Builds an authorizer with N ACLs shaped like a real deployment (per-principal literal topic and
group ACLs, prefixed ACLs, a few wildcard and DENY entries) and measures authorize() calls per
second in three regimes:

* ``cached``: the same few (principal, op, resource) questions over and over, as a consumer's
  ShareFetch loop asks them (the per-decision cache answers);
* ``uncached``: the cache cleared before every call, so each call walks the index;
* ``naive``: a linear scan over every ACL, for comparison (what the index avoids).

    .venv/bin/python -m bench.acl_authorize               # 1,000 ACLs
    .venv/bin/python -m bench.acl_authorize --acls 10000
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

from protocol.acl_types import (
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    covered_operations,
)
from broker.security.authorizer import AclAuthorizer

Query = tuple[str, str, AclOperation, ResourceType, str]
OPS = (AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE)


def make_acls(n: int, rng: random.Random) -> list[AclBinding]:
    acls: list[AclBinding] = []
    users = [f"User:app-{i}" for i in range(max(1, n // 10))]
    while len(acls) < n:
        user = rng.choice(users)
        kind = rng.random()
        if kind < 0.5:
            acls.append(AclBinding(ResourceType.TOPIC, f"topic-{rng.randrange(n)}",
                                   PatternType.LITERAL, user, "*", rng.choice(OPS),
                                   AclPermissionType.ALLOW))
        elif kind < 0.75:
            acls.append(AclBinding(ResourceType.GROUP, f"group-{rng.randrange(n)}",
                                   PatternType.LITERAL, user, "*", AclOperation.READ,
                                   AclPermissionType.ALLOW))
        elif kind < 0.97:
            acls.append(AclBinding(ResourceType.TOPIC, f"team{rng.randrange(50)}-",
                                   PatternType.PREFIXED, user, "*", rng.choice(OPS),
                                   AclPermissionType.ALLOW))
        else:
            acls.append(AclBinding(ResourceType.TOPIC, f"topic-{rng.randrange(n)}",
                                   PatternType.LITERAL, WILDCARD_PRINCIPAL, "10.9.9.9",
                                   AclOperation.ALL, AclPermissionType.DENY))
    return acls


def naive(acls: list[AclBinding], principal: str, host: str, op: AclOperation,
          rtype: ResourceType, name: str) -> bool:
    hit = [b for b in acls if b.applies_to(rtype, name)]
    if not hit:
        return False
    m = [b for b in hit if b.principal in (principal, WILDCARD_PRINCIPAL)
         and b.host in ("*", host) and op in covered_operations(b.operation, b.permission)]
    return not any(b.permission == AclPermissionType.DENY for b in m) and bool(m)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--acls", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=1.0, help="per regime")
    args = p.parse_args()
    rng = random.Random(42)
    acls = make_acls(args.acls, rng)
    a = AclAuthorizer(acls=acls)
    queries: list[Query] = [(f"User:app-{rng.randrange(max(1, args.acls // 10))}", "10.0.0.1",
                rng.choice(OPS), ResourceType.TOPIC,
                rng.choice([f"topic-{rng.randrange(args.acls)}",
                            f"team{rng.randrange(50)}-orders"]))
               for _ in range(1000)]
    for q in queries:  # the index and the scan must agree
        assert a.authorize(*q) is naive(acls, *q), q
    hot = queries[:8]

    def run(label: str, fn: Callable[..., bool], qs: list[Query], clear: bool) -> None:
        n, i = 0, 0
        deadline = time.perf_counter() + args.seconds
        start = time.perf_counter()
        while time.perf_counter() < deadline:
            for _ in range(200):
                if clear:
                    a._cache.clear()
                fn(*qs[i % len(qs)])
                i += 1
            n += 200
        elapsed = time.perf_counter() - start
        print(f"{label:>9}: {n / elapsed:>12,.0f} authorize()/s   "
              f"({elapsed / n * 1e6:.2f} µs per call)")

    print(f"{len(a)} ACLs ({sum(b.pattern_type == PatternType.PREFIXED for b in acls)} prefixed)")
    run("cached", a.authorize, hot, clear=False)
    run("uncached", a.authorize, queries, clear=True)
    run("naive", lambda *q: naive(acls, *q), queries, clear=False)


if __name__ == "__main__":
    main()
