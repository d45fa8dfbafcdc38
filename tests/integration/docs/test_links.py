"""Every relative link of the README and the docs pages leads somewhere: the file exists and,
for a ``#fragment``, the page has a heading with that anchor (GitHub's rule: lower case,
punctuation dropped, spaces to hyphens)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         ROOT / "pipeline" / "README.md", ROOT / "bench" / "README.md"]
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _prose(page: Path) -> str:
    return _FENCE.sub("", page.read_text(encoding="utf-8"))


def anchor(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {anchor(h) for h in re.findall(r"^#+ (.*)$", _prose(page), re.M)}


def test_anchor_follows_githubs_rule() -> None:
    assert anchor("Spark: a share-group streaming source (`pipeline/`)") == \
        "spark-a-share-group-streaming-source-pipeline"
    assert anchor("Share groups (KIP-932)") == "share-groups-kip-932"


def test_every_relative_link_leads_somewhere() -> None:
    broken = []
    for page in PAGES:
        for target in _LINK.findall(_prose(page)):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, fragment = target.partition("#")
            dest = (page.parent / path) if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []
