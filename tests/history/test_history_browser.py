"""Open the history page in headless Chromium, with the report's own browser check
(tests/report/test_report_browser.py: console errors, dialogs, outside fetches, broken images)."""

from __future__ import annotations

import importlib.util
import json
import random
import shutil
from pathlib import Path

import pytest

from dpbench.history.series import load_history, run_files
from dpbench.report.history_page import render_history_page
from validation.synthetic_runs import synthetic_run

CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="needs Chromium (apt-get install chromium; .ci/run installs it)"
)
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="needs playwright (scripts/setup-env installs the test extras)"
)

_spec = importlib.util.spec_from_file_location(
    "report_browser_check", Path(__file__).resolve().parents[1] / "report" / "test_report_browser.py"
)
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)

XSS = "<script>alert(1)</script>"
SVGS = "() => document.querySelectorAll('svg').length"


# The report's own module-scoped Chromium fixture (one browser for this module's pages).
browser = check.browser


def _page(tmp_path: Path) -> tuple[Path, int]:
    """A history of 12 commits, 3 benchmarks (one slows down at commit 6), hostile strings in a
    benchmark name and the machine, a machine change at commit 9."""
    rng = random.Random(4)
    results = tmp_path / "results" / "m"
    results.mkdir(parents=True)
    names = ["test_throughput[ddp-mlp-w2]", "test_throughput[ddp-lenet-w2]", f"test_x[{XSS}-lenet-w2]"]
    for i in range(12):
        levels = {n: 0.01 * (1.3 if i >= 6 and "lenet" in n and k == 1 else 1.0) for k, n in enumerate(names)}
        machine = {
            "node": f"host{XSS}",
            "gpus": [{"name": "H100"}],
            "driver": "550" if i < 9 else "560",
            "torch": "2.13.0",
        }
        doc = synthetic_run(
            commit=f"{i + 1:040x}", date=f"2026-01-{i + 1:02d}T00:00:00", levels=levels, rng=rng, machine=machine
        )
        (results / f"{i + 1:04d}_c.json").write_text(json.dumps(doc))
    history = load_history(run_files([tmp_path / "results"]), cwd=Path("/"))
    page = tmp_path / "history.html"
    page.write_text(render_history_page(history, repo_url="https://example.invalid/o/r"))
    return page, len(history.series)


@pytest.mark.slow
def test_the_history_page_renders_in_chromium(browser, tmp_path: Path):
    page, n_series = _page(tmp_path)
    text = page.read_text()
    assert XSS not in text and "&lt;script&gt;" in text  # escaped, never markup
    result = check.inspect_page(browser, page.resolve().as_uri(), tmp_path / "history.png")
    assert check.problems(result, expected_images=0) == []
    assert result["title"] == "dpbench history"
    context = browser.new_context()
    try:
        tab = context.new_page()
        tab.goto(page.resolve().as_uri())
        assert tab.evaluate(SVGS) == 2 * n_series  # a trend and its control per benchmark
        assert tab.locator("#regressions tbody tr").count() == 1
        assert "driver 550 → 560" in tab.inner_text("main")
    finally:
        context.close()
