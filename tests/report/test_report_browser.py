"""Open the generated report in headless Chromium, as a user would.

Playwright drives the system's Chromium (Debian's ``chromium`` package; ``.ci/run`` installs it)
through ``executable_path``, so no browser is ever downloaded and ``playwright install`` is
never needed. The same check is run on small pages that break each rule, so it is known to fail
when the report would.
"""

from __future__ import annotations

import html.parser
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (apt-get install chromium; .ci/run installs it)"),
    pytest.mark.slow,  # a browser started for the file: seconds, out of the fast tier
]
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="needs playwright (scripts/setup-env installs the test extras)"
)

IMAGES = """() => Array.from(document.images).map(img => ({
  alt: img.alt, complete: img.complete, width: img.naturalWidth, height: img.naturalHeight}))"""
PNG_1PX = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for the module (each page gets a fresh context: no shared state)."""
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, timeout=60_000)
        try:
            yield chromium
        finally:
            chromium.close()


def inspect_page(browser, url: str, screenshot: Path) -> dict[str, Any]:
    """Load ``url``; return console errors, page errors, dialogs, requests and image states; save a PNG."""
    found: dict[str, list] = {"errors": [], "dialogs": [], "requests": []}
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        # Console errors include what Chromium logs itself: a script refused by the CSP, a failed load.
        page.on(
            "console",
            lambda msg: msg.type in ("error", "assert") and found["errors"].append(f"console {msg.type}: {msg.text}"),
        )
        page.on("pageerror", lambda exc: found["errors"].append(f"uncaught: {exc}"))
        page.on(
            "dialog", lambda dialog: (found["dialogs"].append(f"{dialog.type}: {dialog.message}"), dialog.dismiss())
        )
        page.on("request", lambda request: found["requests"].append(request.url))
        page.goto(url, wait_until="load")
        images = page.evaluate(IMAGES)
        title = page.title()
        page.screenshot(path=str(screenshot), full_page=True)
    finally:
        context.close()
    return {**found, "images": images, "title": title}


def problems(result: dict[str, Any], *, expected_images: int) -> list[str]:
    """Everything a reader would notice: errors, dialogs, missing or broken images, outside fetches."""
    found = list(result["errors"]) + [f"dialog {d}" for d in result["dialogs"]]
    if len(result["images"]) != expected_images:
        found.append(f"expected {expected_images} images, the page has {len(result['images'])}")
    found += [
        f"image not decoded: {img}"
        for img in result["images"]
        if not (img["complete"] and img["width"] > 0 and img["height"] > 0)
    ]
    # Nothing may be fetched from anywhere but the file itself and its data: images.
    found += [f"fetched {url}" for url in result["requests"] if not url.startswith(("file:", "data:"))]
    return found


class _ImgCounter(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def handle_starttag(self, tag: str, attrs) -> None:
        self.count += tag == "img"


def img_tags(path: Path) -> int:
    """The <img> elements in the file as written, to check the browser shows every one of them."""
    counter = _ImgCounter()
    counter.feed(path.read_text(encoding="utf-8"))
    return counter.count


ARTIFACTS = Path(os.environ.get("DPBENCH_SCREENSHOT_DIR") or Path(__file__).resolve().parents[2] / "artifacts")

# Elements whose right edge passes the viewport, outside a box that scrolls them (.scroll).
TOO_WIDE = """() => {
  const width = document.documentElement.clientWidth, out = [];
  for (const el of document.querySelectorAll("body *")) {
    if (el.closest(".scroll") && !el.classList.contains("scroll")) continue;
    const box = el.getBoundingClientRect();
    if (box.width > 0 && box.right > width + 0.5)
      out.push(el.tagName + "." + el.className + " " + Math.round(box.right));
  }
  return {page: document.documentElement.scrollWidth, width: width, wide: out.slice(0, 10)};
}"""
FIRST_SECTION = "() => document.querySelector('main > section').id"
HEADLINE, SAMPLES_PER_S = "numbers-headline-1", 8  # the "All numbers" table and its samples/s column
# The texts of one column of that table's visible rows, top to bottom.
COLUMN = f"""(col) => Array.from(document.getElementById("{HEADLINE}").tBodies[0].rows)
  .filter(r => !r.hidden).map(r => r.cells[col].textContent)"""


def _numbers(texts: list[str]) -> list[float]:
    return [float(t.replace(",", "")) for t in texts if t != "–"]


@pytest.fixture(scope="module")
def many_html_path(many_runs, tmp_path_factory) -> Path:
    from dpbench.report import write_report

    return write_report(list(many_runs), tmp_path_factory.mktemp("many-browser") / "report.html")


@pytest.mark.slow  # 3-5 s on a slow day: past the fast tier's unmarked limit
def test_report_renders_in_chromium(browser, report_html: Path, tmp_path: Path):
    shot = tmp_path / "report.png"
    result = inspect_page(browser, report_html.resolve().as_uri(), shot)
    # The report carries hostile strings; an unescaped <script> would be refused by the CSP
    # and show up here as a console error, or run and open a dialog.
    expected = img_tags(report_html)
    assert expected >= 5, f"the report should have its plots, found {expected} <img> tags"
    assert problems(result, expected_images=expected) == []
    assert result["title"] == "dpbench report"
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 50_000
    if os.environ.get("DPBENCH_SCREENSHOT_DIR"):  # CI keeps the screenshot as an artifact
        shutil.copy(shot, Path(os.environ["DPBENCH_SCREENSHOT_DIR"]) / "report.png")


@pytest.mark.slow  # renders 2 runs × 73 benchmarks and drives two pages
def test_decision_view_first_nothing_too_wide_tables_sort(browser, many_html_path: Path, report_html: Path):
    """At 1280 px: the decision view on top, nothing wider than the window (tables scroll inside
    their box), sorting a table reorders its rows, the filter hides rows; screenshots of the top."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for name, path in (("report-2-runs-73-benchmarks", many_html_path), ("report-hostile", report_html)):
        if name == "report-hostile":  # its headline table has too few rows for a filter: only the layout
            _layout_only(browser, path, name)
            continue
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        try:
            page = context.new_page()
            errors, requests = [], []
            page.on("console", lambda msg, errors=errors: msg.type in ("error", "assert") and errors.append(msg.text))
            page.on("pageerror", lambda exc, errors=errors: errors.append(str(exc)))
            page.on("request", lambda request, requests=requests: requests.append(request.url))
            page.goto(path.resolve().as_uri(), wait_until="load")
            assert page.evaluate(FIRST_SECTION) == "decision"
            page.screenshot(path=str(ARTIFACTS / f"{name}-top.png"))  # the top of the page, as a reader sees it
            print(f"screenshot: {ARTIFACTS / f'{name}-top.png'}")
            page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
            width = page.evaluate(TOO_WIDE)
            assert width["page"] <= width["width"] and width["wide"] == [], width
            # "All numbers": sort by samples/s (column 8), both ways; then filter by a workload
            before = page.evaluate(COLUMN, SAMPLES_PER_S)
            header = page.locator(f"#{HEADLINE} thead th").nth(SAMPLES_PER_S)
            header.click()
            ascending = page.evaluate(COLUMN, SAMPLES_PER_S)
            header.click()
            descending = page.evaluate(COLUMN, SAMPLES_PER_S)
            assert sorted(before) == sorted(ascending) and before != ascending
            assert _numbers(ascending) == sorted(_numbers(ascending))
            assert _numbers(descending) == sorted(_numbers(ascending), reverse=True)
            page.locator(f"input[data-table={HEADLINE}]").fill("mlp")
            kept = page.evaluate(COLUMN, 1)  # the workload column of the rows left
            assert kept and set(kept) == {"mlp"} and len(kept) < len(before)
            page.screenshot(path=str(ARTIFACTS / f"{name}-full.png"), full_page=True)
            assert errors == [] and [u for u in requests if not u.startswith(("file:", "data:"))] == []
        finally:
            context.close()


def _layout_only(browser, path: Path, name: str) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        page.goto(path.resolve().as_uri(), wait_until="load")
        assert page.evaluate(FIRST_SECTION) == "decision"
        page.screenshot(path=str(ARTIFACTS / f"{name}-top.png"))
        print(f"screenshot: {ARTIFACTS / f'{name}-top.png'}")
        page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
        width = page.evaluate(TOO_WIDE)
        assert width["page"] <= width["width"] and width["wide"] == [], width
    finally:
        context.close()


CSP = '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; img-src data:">'
GOOD_IMAGE = f'<img alt="ok" src="data:image/png;base64,{PNG_1PX}">'


@pytest.mark.parametrize(
    "body, expected, images",
    [
        pytest.param(
            f"<script>console.error('boom')</script>{GOOD_IMAGE}", "console error: boom", 1, id="console-error"
        ),
        pytest.param(
            f"{CSP}<script>document.title = 'ran'</script>{GOOD_IMAGE}",
            "Content Security Policy",
            1,
            id="script-refused-by-csp",
        ),
        pytest.param(f"<script>undefined_function()</script>{GOOD_IMAGE}", "uncaught: ", 1, id="uncaught-exception"),
        pytest.param(f"<script>alert('hi')</script>{GOOD_IMAGE}", "dialog alert: hi", 1, id="dialog"),
        pytest.param(
            '<img alt="broken" src="data:image/png;base64,iVBORw0KGgo=">', "image not decoded", 1, id="broken-image"
        ),
        pytest.param(GOOD_IMAGE, "expected 2 images, the page has 1", 2, id="missing-image"),
        # Loopback, port 9 (discard): refused at once, but the attempt is what the check catches.
        pytest.param(
            f'{GOOD_IMAGE}<img alt="remote" src="http://127.0.0.1:9/x.png">',
            "fetched http://127.0.0.1:9/x.png",
            2,
            id="outside-fetch",
        ),
    ],
)
def test_the_check_fails_on_a_broken_page(browser, tmp_path: Path, body: str, expected: str, images: int):
    page = tmp_path / "bad.html"
    page.write_text(f"<!doctype html><html><head><title>bad</title></head><body>{body}</body></html>")
    found = problems(inspect_page(browser, page.as_uri(), tmp_path / "bad.png"), expected_images=images)
    assert any(expected in p for p in found), found


def test_the_check_passes_a_clean_page(browser, tmp_path: Path):
    page = tmp_path / "good.html"
    page.write_text(f"<!doctype html><html><head>{CSP}<title>good</title></head><body>{GOOD_IMAGE}</body></html>")
    result = inspect_page(browser, page.as_uri(), tmp_path / "good.png")
    assert problems(result, expected_images=1) == [] and result["title"] == "good"


# Where the first question's answer sits at 1400×900, and whether any warning box comes before it.
FIRST_SCREEN = r"""() => {
  const line = document.querySelector('p.verdict-line'), grid = document.querySelector('figure.grid');
  const warn = document.querySelector('p.warn'), box = e => e ? e.getBoundingClientRect() : null;
  return {line: box(line) && box(line).bottom, grid: grid && box(grid).top,
          warnBefore: !!(warn && line && (line.compareDocumentPosition(warn) & Node.DOCUMENT_POSITION_PRECEDING)),
          folded: document.querySelectorAll('details.trial-notes').length,
          text: line && line.textContent,
          heading: document.querySelector('div.workload h3').textContent.replace(/\s+/g, ' ').trim()};
}"""
QUICK_RUN = Path(__file__).resolve().parents[1] / "data" / "quick-run-disturbed-trial.json.gz"


def test_the_first_screen_is_the_answer(browser, tmp_path: Path):
    """A real quick run with disturbed trials, at 1400×900: the first question's answer and its
    heatmap are on the first screen, no warning box comes before them, and the trial-level notes
    are folded into one line per run."""
    import gzip

    from dpbench.report import write_report

    run = tmp_path / "results" / "m" / "0001_quick.json"
    run.parent.mkdir(parents=True)
    run.write_bytes(gzip.decompress(QUICK_RUN.read_bytes()))
    path = write_report([str(run)], tmp_path / "report.html")
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page = context.new_page()
        page.goto(path.resolve().as_uri(), wait_until="load")
        found = page.evaluate(FIRST_SCREEN)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "report-first-screen.png"))
    finally:
        context.close()
    assert found["line"] is not None and found["line"] <= 900, found
    assert found["grid"] is not None and found["grid"] < 900, found
    assert not found["warnBefore"] and found["folded"] == 1, found
    assert found["heading"] == "mlp (sgd · fp32 · global batch 64) · 0001_quick", found
    assert found["text"].startswith("Not settled: single w1 leads at "), found  # the heading names the question


# Each decision heading's overflow past its card (the section), in pixels.
HEADINGS = """() => Array.from(document.querySelectorAll('div.workload h3')).map(h => {
  const card = h.closest('section').getBoundingClientRect(), own = h.getBoundingClientRect();
  return {overflow: Math.max(own.right - card.right, h.scrollWidth - h.clientWidth), height: own.height};
})"""


def test_a_long_workload_spec_wraps_inside_its_card(browser, tmp_path: Path):
    """A Hugging Face spec of ~1,500 characters as the question's heading, at 1400×900: it wraps
    inside its card instead of running off it."""
    from _long_spec import long_spec_run

    from dpbench.report import write_report

    path = write_report([str(long_spec_run(tmp_path))], tmp_path / "report.html")
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page = context.new_page()
        page.goto(path.resolve().as_uri(), wait_until="load")
        headings = page.evaluate(HEADINGS)
    finally:
        context.close()
    assert headings and all(h["overflow"] <= 0 for h in headings), headings
    assert max(h["height"] for h in headings) > 100, headings  # the long one wrapped onto many lines
