"""Open the generated report in headless Chromium, as a user would."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from cdp_browser import find_chromium, inspect_page

CHROMIUM = find_chromium()


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (apt-get install chromium; .ci/run installs it)")
def test_report_renders_in_chromium(report_html: Path, tmp_path: Path):
    shot = tmp_path / "report.png"
    result = inspect_page(CHROMIUM, report_html.resolve().as_uri(), tmp_path / "profile", shot)
    # The report carries hostile strings; an unescaped <script> would be refused by the CSP
    # and show up here as a console error, or run and open a dialog.
    assert result["errors"] == []
    assert result["dialogs"] == []
    assert result["title"] == "dpbench report"
    assert len(result["images"]) == 7
    for image in result["images"]:
        assert image["complete"] and image["width"] > 0 and image["height"] > 0, image
    # Nothing is fetched from anywhere but the file itself and its data: images.
    assert all(url.startswith(("file:", "data:")) for url in result["requests"]), result["requests"]
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 50_000
    if os.environ.get("DPBENCH_SCREENSHOT_DIR"):  # CI keeps the screenshot as an artifact
        shutil.copy(shot, Path(os.environ["DPBENCH_SCREENSHOT_DIR"]) / "report.png")
