"""The README is a short entry point: its quick-start commands exist, it holds no dated measurement,
and each task of its index links to a page that exists (its Python example runs in
test_docs_examples.py).
"""

from __future__ import annotations

import os
import re

from _docs_pages import README, ROOT, flat, page, section

TEXT = README.read_text()
MAX_LINES = 300
TASKS = [
    "Install and run",
    "Which strategy is fastest for my model?",
    "My own model under every strategy",
    "Gate a pull request in CI",
    "What does each field of a saved run mean?",
    "Run on two nodes (torchrun / SLURM)",
    "Read a trace",
    "A verdict is `inconclusive`: now what?",
    "Did the torch / CUDA upgrade make training slower?",
    "Will it fit on my GPUs?",
]
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_quick_start_commands_exist():
    commands = re.findall(r"^(scripts/\S+)", TEXT, flags=re.M)
    assert {"scripts/bench", "scripts/test"} <= set(commands)
    for command in commands:
        path = ROOT / command
        assert path.is_file() and os.access(path, os.X_OK), command


def quick_start_commands(text: str) -> list[str]:
    """The commands of ``text``'s first shell block, in order (comments left out)."""
    block = re.search(r"```bash\n(.*?)```", text, flags=re.S)
    return [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_the_readme_and_getting_started_give_the_same_quick_start_in_the_same_order():
    readme = quick_start_commands(section(TEXT, "## Quick start"))
    guide = quick_start_commands(section(page("getting-started.md"), "## Install and run"))
    assert readme == guide == ["scripts/test", "scripts/bench"]


def test_what_scripts_bench_ends_with_is_what_dpbench_run_prints_last():
    """scripts/bench is `dpbench run`, which prints the saved run's path, the decision, then the
    report's path last: the pages say so."""
    script = (ROOT / "scripts" / "bench").read_text().strip().splitlines()
    assert script[-1].startswith("exec .venv/bin/dpbench run ")
    run = (ROOT / "dpbench" / "runner" / "run.py").read_text()
    prints = [run.index('print(f"run saved:'), run.index("print_decision("), run.index('print(f"report:')]
    assert prints == sorted(prints)
    for text in (TEXT, page("getting-started.md")):
        said = flat(text)
        assert "`scripts/bench` runs the `quick` profile" in said
        ending = said[said.index("`scripts/bench` runs the `quick` profile") :][:300]
        assert "the saved run, the decision per question, then the path of `report.html`" in ending, ending


def test_the_readme_is_short_and_holds_no_dated_measurement():
    assert len(TEXT.splitlines()) <= MAX_LINES
    assert not re.findall(r"\b20\d\d-\d\d-\d\d\b", TEXT), "dated measurements go to docs/validation/"


def test_each_task_is_answered_with_a_link():
    rows = {
        cells[0]: cells
        for cells in (re.split(r"(?<!\\)\|", line)[1:-1] for line in TEXT.splitlines() if line.startswith("| "))
    }
    for task in TASKS:
        assert task in {name.strip() for name in rows}, f"the README's Tasks table lacks {task!r}"
        cells = next(cells for name, cells in rows.items() if name.strip() == task)
        assert _LINK.search(cells[-1]), f"{task!r}: no link to the page that answers it"


def anchors(markdown: str) -> set[str]:
    """The anchors MkDocs gives the headings of ``markdown`` (toc's default slugify)."""
    out = set()
    for heading in re.findall(r"^#+ (.+)$", markdown, flags=re.M):
        slug = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
        out.add(re.sub(r"[-\s]+", "-", slug))
    return out


def broken_links(text: str, *, base=ROOT) -> list[str]:
    """The links of ``text`` (a page in folder ``base``) whose file or heading does not exist."""
    broken = []
    for target in _LINK.findall(text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path, _, anchor = target.partition("#")
        file = base / path
        if not file.exists():
            broken.append(target)
        elif anchor and anchor not in anchors(file.read_text()):
            broken.append(target)
    return broken


def test_every_link_of_the_readme_resolves():
    assert broken_links(TEXT) == []


def test_the_results_folders_readme_points_to_the_schema_page():
    text = (ROOT / "results" / "README.md").read_text()
    assert "../docs/schema.md" in text and broken_links(text, base=ROOT / "results") == []


def test_a_broken_link_is_found():
    assert broken_links("[a](docs/no-such-page.md) [b](docs/gate.md#no-such-anchor) [c](docs/gate.md)") == [
        "docs/no-such-page.md",
        "docs/gate.md#no-such-anchor",
    ]


# PyPI's `dpbench` is another project (LLM agents): an install line naming it installs that.
PYPI_INSTALL = re.compile(r"pip install\s+['\"]?dpbench(\[[a-z,]+\])?['\"]?(?![\w./-])")


def pypi_install_lines(text: str) -> list[str]:
    return [m.group(0) for m in PYPI_INSTALL.finditer(text)]


def test_the_install_line_finder_finds_pypi_installs_and_not_checkout_ones():
    text = "pip install dpbench\npip install 'dpbench[hf]'\npip install -e '.[hf]'\npip install dpbench-0.1.0.whl"
    assert pypi_install_lines(text) == ["pip install dpbench", "pip install 'dpbench[hf]'"]


def test_no_install_line_names_pypis_dpbench():
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "dpbench").rglob("*.py"))]
    found = [f"{p.relative_to(ROOT)}: {line}" for p in files for line in pypi_install_lines(p.read_text())]
    assert len(files) > 50 and not found, found
