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
pytestmark = pytest.mark.skipif(CHROMIUM is None,
                                reason="needs Chromium (apt-get install chromium; .ci/run installs it)")
sync_api = pytest.importorskip("playwright.sync_api",
                               reason="needs playwright (scripts/setup-env installs the test extras)")

IMAGES = """() => Array.from(document.images).map(img => ({
  alt: img.alt, complete: img.complete, width: img.naturalWidth, height: img.naturalHeight}))"""
PNG_1PX = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")


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
        page.on("console", lambda msg: msg.type in ("error", "assert")
                and found["errors"].append(f"console {msg.type}: {msg.text}"))
        page.on("pageerror", lambda exc: found["errors"].append(f"uncaught: {exc}"))
        page.on("dialog", lambda dialog: (found["dialogs"].append(f"{dialog.type}: {dialog.message}"),
                                          dialog.dismiss()))
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
    found += [f"image not decoded: {img}" for img in result["images"]
              if not (img["complete"] and img["width"] > 0 and img["height"] > 0)]
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


@pytest.mark.slow
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


CSP = "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:\">"
GOOD_IMAGE = f'<img alt="ok" src="data:image/png;base64,{PNG_1PX}">'


@pytest.mark.parametrize("body, expected, images", [
    pytest.param(f"<script>console.error('boom')</script>{GOOD_IMAGE}", "console error: boom", 1, id="console-error"),
    pytest.param(f"{CSP}<script>document.title = 'ran'</script>{GOOD_IMAGE}", "Content Security Policy", 1,
                 id="script-refused-by-csp"),
    pytest.param(f"<script>undefined_function()</script>{GOOD_IMAGE}", "uncaught: ", 1, id="uncaught-exception"),
    pytest.param(f"<script>alert('hi')</script>{GOOD_IMAGE}", "dialog alert: hi", 1, id="dialog"),
    pytest.param('<img alt="broken" src="data:image/png;base64,iVBORw0KGgo=">', "image not decoded", 1,
                 id="broken-image"),
    pytest.param(GOOD_IMAGE, "expected 2 images, the page has 1", 2, id="missing-image"),
    # Loopback, port 9 (discard): refused at once, but the attempt is what the check catches.
    pytest.param(f'{GOOD_IMAGE}<img alt="remote" src="http://127.0.0.1:9/x.png">', "fetched http://127.0.0.1:9/x.png",
                 2, id="outside-fetch"),
])
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
