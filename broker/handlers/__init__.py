"""One module per RPC (STYLE.md 1.9). ``ALL_HANDLERS`` is the dispatch table's source.

Every module here whose name does not start with ``_`` is a handler: it declares ``API_KEY``,
``VERSIONS`` and ``handle``. Adding an RPC is adding its module.
"""

import importlib
import pkgutil

ALL_HANDLERS = [
    importlib.import_module(f"{__name__}.{info.name}")
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name)
    if not info.name.startswith("_")
]
