"""The table from API key to handler, and the version ranges it serves.

Each handler module declares ``API_KEY``, ``VERSIONS = (min, max)`` and ``handle(ctx, request)``,
which returns the typed response, an awaitable of it, or ``NO_RESPONSE``. ApiVersions advertises
exactly this table, so a version is served if and only if it is advertised.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from broker.handlers import ALL_HANDLERS


@dataclass(frozen=True, slots=True)
class Route:
    api_key: int
    min_version: int
    max_version: int
    handle: Callable[..., Any]
    name: str
    # Optional per-request element limit (broker/wire_limits.py): ``limit(config)`` gives
    # array paths and the most elements it may hold; a request over it is answered by
    # ``refuse(ctx, count, most)`` without decoding its body.
    limit: Callable[[Any], tuple[tuple[tuple[str, ...], ...], int]] | None = None
    refuse: Callable[..., Any] | None = None


class Dispatcher:
    def __init__(self, modules: Iterable[ModuleType]) -> None:
        self._routes: dict[int, Route] = {}
        for m in modules:
            lo, hi = m.VERSIONS
            key = int(m.API_KEY)
            if key in self._routes:
                raise ValueError(f"two handlers for api key {key}")
            self._routes[key] = Route(key, lo, hi, m.handle, m.__name__.rsplit(".", 1)[-1],
                                      getattr(m, "request_limit", None),
                                      getattr(m, "refuse_over_limit", None))

    def route(self, api_key: int, api_version: int) -> Route | None:
        """The route serving this key and version, or None if we do not serve it."""
        r = self._routes.get(api_key)
        if r is None or not r.min_version <= api_version <= r.max_version:
            return None
        return r

    def known(self, api_key: int) -> Route | None:
        return self._routes.get(api_key)

    def ranges(self) -> list[tuple[int, int, int]]:
        """(api key, min, max) for every served API, sorted by key."""
        return sorted((r.api_key, r.min_version, r.max_version) for r in self._routes.values())


def default_dispatcher() -> Dispatcher:
    return Dispatcher(ALL_HANDLERS)
