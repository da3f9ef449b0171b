"""The README and docs/: every command's options documented, every relative link resolving."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "ci"))

import commands_doc  # noqa: E402

PAGES = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
README_MOST_LINES = 200


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but ``-`` and ``_`` dropped, spaces to ``-``."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of ``page``'s headings (outside code blocks)."""
    found: set[str] = set()
    fenced = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


def links(page: Path) -> list[str]:
    """The relative links of ``page`` (outside code blocks)."""
    out: list[str] = []
    fenced = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            out += [t for t in LINK.findall(line) if not re.match(r"[a-z]+:", t)]
    return out


def every_option() -> list[tuple[str, str]]:
    """(command, option string) for every option of every command and ``probe`` subcommand."""
    out: list[tuple[str, str]] = []
    for name, parser in commands_doc.subparsers(commands_doc._parser()).items():
        for sub, p in [(name, parser), *((f"{name} {s}", q) for s, q in commands_doc.subparsers(parser).items())]:
            for action in p._actions:
                out += [(sub, option) for option in action.option_strings if option not in ("-h", "--help")]
    return out


def test_readme_is_short() -> None:
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MOST_LINES, f"README.md has {lines} lines; move detail to docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(target)
    assert not broken, f"{page.name}: links that resolve nowhere: {broken}"


def undocumented(text: str) -> list[str]:
    """``command option`` for every option that ``text``'s reference does not name in its command's section."""
    reference = text.split(commands_doc.BEGIN, 1)[-1]
    missing = []
    for command, option in every_option():
        section = reference.split(f"### `hwbench {command.split()[0]}`", 1)[-1].split("\n### ", 1)[0]
        if f"`{option}`" not in section:
            missing.append(f"{command} {option}")
    return missing


def test_every_option_is_documented() -> None:
    missing = undocumented((ROOT / "docs" / "commands.md").read_text())
    assert not missing, f"options missing from docs/commands.md (run ci/commands_doc.py): {missing}"


def test_a_missing_option_is_found() -> None:
    page = (ROOT / "docs" / "commands.md").read_text()
    assert undocumented(page.replace("`--tune-budget`", "`--x`")) == ["run --tune-budget"]


def test_the_reference_is_up_to_date() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "ci" / "commands_doc.py"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
