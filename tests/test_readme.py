"""The README stays a front page (issue 44): under 200 lines, its pictures
first and each made from a source kept beside it, every local link and
picture in it and in docs/development.md pointing at a file that exists
(and, with an anchor, at a heading there), and one quick start."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: ``[text](target)`` and ``![alt](target)``; targets without a scheme are local.
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _local_links(page: Path) -> list[str]:
    return [t for t in _LINK.findall(page.read_text()) if not re.match(r"[a-z]+:", t)]


def test_the_readme_is_under_200_lines() -> None:
    """README.md has fewer than 200 lines."""
    assert len(README.read_text().splitlines()) < 200


def test_the_first_screen_is_the_pitch_the_pictures_and_the_two_make_commands() -> None:
    """Before the first section: the architecture, the console, make demo and make test."""
    first = README.read_text().split("\n## ", 1)[0]
    assert "](docs/img/architecture.svg)" in first
    assert "](docs/img/console-readme.png)" in first
    assert "`make demo`" in first and "`make test`" in first


def test_the_readme_pictures_are_rendered_from_sources_beside_them() -> None:
    """The diagram's Graphviz source and the screenshot's events are in docs/img."""
    img = ROOT / "docs" / "img"
    assert "digraph" in (img / "architecture.dot").read_text()
    assert (img / "architecture.svg").read_text().lstrip().startswith("<?xml")
    assert (img / "console-readme.jsonl").read_text().count("\n") > 10
    assert (img / "console-readme.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_local_links_of_the_readme_and_development_page_resolve() -> None:
    """Each relative link or picture names an existing file, and its #anchor a heading."""
    broken = []
    for page in (README, ROOT / "docs" / "development.md"):
        links = _local_links(page)
        assert links, page
        for link in links:
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            if not target.exists():
                broken.append(f"{page.name}: {link}")
                continue
            if anchor and target.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", target.read_text(), re.M)
                if anchor not in {_anchor(h) for h in headings}:
                    broken.append(f"{page.name}: {link} (no such heading)")
    assert not broken, broken


def test_there_is_one_quick_start() -> None:
    """docs/readme-quickstart.md is gone: the README's quick start is the one."""
    assert not (ROOT / "docs" / "readme-quickstart.md").exists()
    assert README.read_text().count("fencewatch local start") >= 1
