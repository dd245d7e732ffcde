"""Reading the documentation's pages for the docs tests: the README and every page under docs/."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"


def page(name: str) -> str:
    """The text of ``docs/<name>``."""
    return (DOCS / name).read_text()


def pages() -> dict[str, str]:
    """Every Markdown page under docs/ (relative path -> text)."""
    return {str(path.relative_to(DOCS)): path.read_text() for path in sorted(DOCS.rglob("*.md"))}


def flat(text: str) -> str:
    """``text`` with every run of whitespace as one space: a sentence may wrap anywhere."""
    return re.sub(r"\s+", " ", text)


def section(text: str, heading: str) -> str:
    """The body of the section whose heading line is ``heading`` (up to the next heading of its level or above)."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.splitlines()
    start = lines.index(heading) + 1
    end = len(lines)
    for i in range(start, len(lines)):
        match = re.match(r"^(#+) ", lines[i])
        if match and len(match.group(1)) <= level:
            end = i
            break
    return "\n".join(lines[start:end])


def table_rows(text: str) -> list[list[str]]:
    """The cells of every Markdown table row in ``text`` (header and separator rows left out)."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("|") or re.match(r"^\|[-| :]+\|$", line):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        rows.append(cells)
    return [row for row in rows if row and row[0] not in ("option", "variable", "field", "code")]
