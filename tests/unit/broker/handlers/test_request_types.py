"""broker/handlers/_requests.py names, for every handler, kio's request classes of exactly the
versions the handler serves (its ``VERSIONS``), so a handler's ``req`` annotation cannot drift
from what the dispatcher gives it. When a handler's range changes, rewrite the module with
``.venv/bin/python -m tests.unit.broker.handlers.test_request_types``."""

from __future__ import annotations

from pathlib import Path

from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType

from broker.handlers import ALL_HANDLERS

MODULE = Path(__file__).resolve().parents[4] / "broker" / "handlers" / "_requests.py"

HEADER = '''"""kio's request types as the handlers receive them: for each handler, the union of the
request classes of every version it serves (its ``VERSIONS``).

Handlers import these under ``TYPE_CHECKING`` only: importing this module loads every version's
request module. Generated; tests/unit/broker/handlers/test_request_types.py checks it against the
handlers and rewrites it (``python -m tests.unit.broker.handlers.test_request_types``).
"""

from __future__ import annotations

from typing import TypeAlias

'''


def expected() -> str:
    """The module's text for the handlers as they are now."""
    imports: list[str] = []
    aliases: list[str] = []
    for handler in ALL_HANDLERS:
        api = api_key_map[int(handler.API_KEY)]
        lo, hi = handler.VERSIONS
        names: list[str] = []
        cls = ""
        for version in range(lo, hi + 1):
            module, cls = schema_name_map[api][version][EntityType.request].split(":")
            names.append(f"{cls}V{version}")
            imports.append(f"from {module} import {cls} as {cls}V{version}")
        if len(names) == 1:
            aliases.append(f"{cls}: TypeAlias = {names[0]}")
        else:
            body = "\n".join(f"    {'| ' if i else ''}{n}" for i, n in enumerate(names))
            aliases.append(f"{cls}: TypeAlias = (\n{body}\n)")
    return HEADER + "\n".join(imports) + "\n\n" + "\n".join(aliases) + "\n"


def test_request_types_match_the_served_versions() -> None:
    assert MODULE.read_text() == expected(), (
        "broker/handlers/_requests.py is stale: run "
        "`.venv/bin/python -m tests.unit.broker.handlers.test_request_types`")


if __name__ == "__main__":
    MODULE.write_text(expected())
