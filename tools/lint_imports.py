"""Run import-linter on the contracts in pyproject.toml, leaving out the packages this tree lacks.

The contracts name the target layout (README "Layout"). A package named there that does not
exist yet (a branch from before it was made) is listed and skipped instead of failing the run;
every package that exists is checked. Exit status is lint-imports' own.

    python tools/lint_imports.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def exists(module: str) -> bool:
    """A module name ('broker.share', 'persister.api', '(storage)') is in this tree."""
    path = ROOT.joinpath(*module.strip("()").split("."))
    return path.is_dir() or path.with_suffix(".py").is_file()


def filtered(config: dict, missing: set[str]) -> dict:
    """The [tool.importlinter] table without the modules this tree lacks."""
    out = dict(config, root_packages=[p for p in config["root_packages"] if exists(p)])
    contracts = []
    for contract in config["contracts"]:
        c = dict(contract)
        if c["type"] == "layers":
            layers = []
            for layer in c["layers"]:
                names = [n.strip() for n in layer.replace(":", "|").split("|")]
                missing.update(n.strip("()") for n in names if not exists(n))
                kept = [n for n in names if exists(n)]
                if kept:
                    sep = " : " if ":" in layer else " | "
                    layers.append(sep.join(kept))
            c["layers"] = layers
        else:
            for key in ("source_modules", "forbidden_modules"):
                if key in c:
                    missing.update(m for m in c[key] if not exists(m))
                    c[key] = [m for m in c[key] if exists(m)]
            if not c.get("source_modules") or not c.get("forbidden_modules", [""]):
                continue
        contracts.append(c)
    out["contracts"] = contracts
    return out


def to_toml(config: dict) -> str:
    """Strings, booleans and lists of strings: JSON spells them as TOML does."""
    lines = ["[tool.importlinter]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in config.items() if k != "contracts"]
    for c in config["contracts"]:
        lines.append("[[tool.importlinter.contracts]]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in c.items()]
    return "\n".join(lines) + "\n"


def main() -> int:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    missing: set[str] = set()
    config = filtered(config, missing)
    if missing:
        print(f"import-linter: not in this tree, skipped: {', '.join(sorted(missing))}")
    lint = Path(sys.executable).with_name("lint-imports")
    with tempfile.NamedTemporaryFile("w", suffix=".toml") as f:
        f.write(to_toml(config))
        f.flush()
        return subprocess.call([str(lint), "--no-logo", "--no-cache", f.name], cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main())
