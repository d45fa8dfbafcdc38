"""Product code imports at the top of a module. An import inside a function is allowed only with a
comment saying why (``# lazy: ...`` on its line or in the comment lines right above it, which
may cover a run of imports): an optional dependency (aetcd, pyarrow, confluent-kafka) or a
deliberately cold path. An import hidden in a function to dodge an import cycle is a layering
bug: move the shared piece down or pass a collaborator in (the layers are in pyproject.toml)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("broker", "coordinator", "persister", "storage", "cluster", "client", "cli",
            "protocol", "pipeline")
MARKER = re.compile(r"#.*\b(lazy|imported here)\b", re.IGNORECASE)


def _local_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Import statements anywhere inside a function body."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found += [n for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))]
    return found


def _marked(lines: list[str], node: ast.Import | ast.ImportFrom) -> bool:
    """Whether the import's own lines, or the comments, imports (and a ``try:``) right above it,
    say why."""
    end = node.end_lineno or node.lineno
    if any(MARKER.search(line) for line in lines[node.lineno - 1:end]):
        return True
    i = node.lineno - 2
    while i >= 0:
        text = lines[i].strip()
        if text.startswith("#"):
            if MARKER.search(text):
                return True
        elif text == "try:":
            pass
        elif not text.startswith(("import ", "from ")):
            return False
        elif MARKER.search(text):
            return True
        i -= 1
    return False


def unmarked_local_imports() -> list[str]:
    out = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            source = path.read_text()
            lines = source.splitlines()
            for node in _local_imports(ast.parse(source)):
                if not _marked(lines, node):
                    out.append(f"{path.relative_to(ROOT)}:{node.lineno}: "
                               f"{lines[node.lineno - 1].strip()}")
    return sorted(set(out))


def test_every_function_local_import_says_why() -> None:
    assert unmarked_local_imports() == [], (
        "function-local imports without a `# lazy: why` comment; import at the top, or fix the "
        "cycle it hides, or say why it must stay (optional dependency, cold path)")


def test_the_check_finds_an_unmarked_import_and_accepts_a_marked_one() -> None:
    source = ("def f():\n    import json\n\n"
              "def g():\n    # Lazy: heavy, and only g needs it.\n    import json\n    import csv\n")
    lines = source.splitlines()
    verdicts = [_marked(lines, n) for n in _local_imports(ast.parse(source))]
    assert sorted(verdicts) == [False, True, True]
