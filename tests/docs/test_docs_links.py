"""Every relative link in README.md and docs/*.md points at a file that exists and, where it names
an anchor, at a heading of that file: pages move sections (guides keep the how-to, dated
measurements live in docs/results.md), and a link into a moved heading must move with it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"\]\(([^()\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to '-'."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        if m := re.match(r"#{1,6} (.+)$", line):
            base = slug(m.group(1))
            # a repeated heading gets -1, -2, … as on GitHub
            name, n = base, 0
            while name in found:
                n += 1
                name = f"{base}-{n}"
            found.add(name)
    return found


def broken_links(page: Path) -> list[str]:
    bad = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no such heading in {dest.name}")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_the_check_catches_a_missing_anchor_and_a_missing_file(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Top\n\n## Base × runtime: which runtime drafts faster\n\n## Top\n")
    page = tmp_path / "b.md"
    page.write_text(
        "[ok](a.md#base--runtime-which-runtime-drafts-faster) [ok](a.md#top-1) [ok](#here)\n"
        "# Here\n[bad](a.md#no-such-heading) [bad](gone.md)\n```text\n[in code](nowhere.md)\n```\n"
    )
    assert broken_links(page) == ["a.md#no-such-heading: no such heading in a.md", "gone.md: no such file"]
