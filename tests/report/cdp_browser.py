"""Drive headless Chromium over the DevTools protocol on a pipe (stdlib only).

``--remote-debugging-pipe`` makes Chromium read commands from fd 3 and write replies and
events to fd 4, each message JSON terminated by a NUL byte. No port is opened, so nothing
else on the machine can talk to the browser. Used by the report's browser test.
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    def __init__(self, executable: str, user_data_dir: Path, *, timeout: float = 30.0):
        self.timeout = timeout
        cmd_r, cmd_w = os.pipe()  # we write commands → browser's fd 3
        evt_r, evt_w = os.pipe()  # browser's fd 4 → we read replies and events
        args = [executable, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", f"--user-data-dir={user_data_dir}", "--remote-debugging-pipe",
                "about:blank"]

        def child_fds() -> None:  # runs in the child: put the pipe ends where Chromium looks
            # Stage both ends above 3 and 4 first so neither dup2 clobbers the other's source.
            high_r = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 10)
            high_w = fcntl.fcntl(evt_w, fcntl.F_DUPFD, 10)
            os.dup2(high_r, 3)  # dup2 makes the new fd inheritable across exec
            os.dup2(high_w, 4)

        # close_fds=False: it would close 3 and 4 after preexec_fn ran. Python's own fds are
        # non-inheritable (PEP 446), so only 0-2 and the two pipe ends reach Chromium.
        self.proc = subprocess.Popen(args, preexec_fn=child_fds, close_fds=False,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(cmd_r)
        os.close(evt_w)
        self._w, self._r = cmd_w, evt_r
        self._buf = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("chromium did not answer in time")
            ready, _, _ = select.select([self._r], [], [], left)
            if ready:
                chunk = os.read(self._r, 1 << 16)
                if not chunk:
                    raise RuntimeError(f"chromium closed the pipe (exit code {self.proc.poll()})")
                self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict[str, Any]:
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for_event(self, method: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        for i, event in enumerate(self.events):
            if event.get("method") == method:
                return self.events.pop(i)
        while True:
            event = self._read_message(deadline)
            if event.get("method") == method:
                return event
            self.events.append(event)

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._w, self._r):
            try:
                os.close(fd)
            except OSError:
                pass


IMAGE_CHECK = """JSON.stringify(Array.from(document.images).map(img => ({
  alt: img.alt, complete: img.complete, width: img.naturalWidth, height: img.naturalHeight})))"""


def inspect_page(executable: str, url: str, user_data_dir: Path, screenshot: Path) -> dict[str, Any]:
    """Load ``url``; return console errors, exceptions, failed loads and image states; save a PNG."""
    browser = Browser(executable, user_data_dir)
    try:
        targets = browser.send("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        session = browser.send("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            browser.send(f"{domain}.enable", session=session)
        browser.send("Emulation.setDeviceMetricsOverride",
                     {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False}, session=session)
        browser.send("Page.navigate", {"url": url}, session=session)
        browser.wait_for_event("Page.loadEventFired")
        images = json.loads(browser.send("Runtime.evaluate", {"expression": IMAGE_CHECK, "returnByValue": True},
                                         session=session)["result"]["value"])
        title = browser.send("Runtime.evaluate", {"expression": "document.title", "returnByValue": True},
                             session=session)["result"]["value"]
        shot = browser.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True},
                            session=session)
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        events = browser.events
        errors = [e["params"] for e in events if e.get("method") == "Runtime.consoleAPICalled"
                  and e["params"].get("type") in ("error", "assert")]
        errors += [e["params"] for e in events if e.get("method") == "Runtime.exceptionThrown"]
        errors += [e["params"]["entry"] for e in events if e.get("method") == "Log.entryAdded"
                   and e["params"]["entry"].get("level") == "error"]
        requests = [e["params"]["request"]["url"] for e in events if e.get("method") == "Network.requestWillBeSent"]
        dialogs = [e["params"] for e in events if e.get("method") == "Page.javascriptDialogOpening"]
        return {"errors": errors, "images": images, "title": title, "requests": requests, "dialogs": dialogs}
    finally:
        browser.close()
