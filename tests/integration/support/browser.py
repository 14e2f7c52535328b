"""A real headless Chromium driven over the Chrome DevTools Protocol, for page tests.

`headless_chromium(directory)` starts Debian's `chromium` with
`--remote-debugging-port=0` and a profile of its own under `directory`, reads
the port it picked from the profile's `DevToolsActivePort` file, and yields a
`Page`: one tab, spoken to over its DevTools websocket (the `websockets`
library's synchronous client), one command at a time.  Leaving the block
kills the browser.

`Page.wait_for(expression)` polls a JavaScript expression in the page until
it is truthy (a condition on the DOM, with a timeout), never a fixed sleep.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import count
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

CHROMIUM = "chromium"
START_S = 30.0
POLL_S = 0.05


class Page:
    def __init__(self, socket: ClientConnection) -> None:
        self._socket = socket
        self._ids = count(1)

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command's result (events arriving meanwhile are skipped)."""
        request_id = next(self._ids)
        self._socket.send(json.dumps({"id": request_id, "method": method, "params": params}))
        while True:
            message = json.loads(self._socket.recv(timeout=START_S))
            if message.get("id") != request_id:
                continue
            if "error" in message:
                raise AssertionError(f"{method}: {message['error']}")
            result: dict[str, Any] = message["result"]
            return result

    def evaluate(self, expression: str) -> Any:
        """The value of `expression` in the page (JSON-serialisable)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def navigate(self, url: str) -> None:
        self.send("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete'")

    def resize(self, width: int, height: int, *, mobile: bool = False) -> None:
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=mobile,
        )

    def wait_for(self, expression: str, timeout_s: float = 60.0) -> Any:
        """Poll `expression` until it is truthy; its value.  Fails after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"{expression!r} did not hold within {timeout_s} s")
            time.sleep(POLL_S)

    def screenshot(self, path: Path) -> None:
        data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data["data"]))


@contextmanager
def headless_chromium(directory: Path) -> Iterator[Page]:
    """A headless Chromium for the block, with one blank tab (see the module docstring)."""
    binary = shutil.which(CHROMIUM)
    assert binary is not None, "Debian's chromium is missing: make test installs it"
    profile = directory / "chromium-profile"
    profile.mkdir(parents=True)
    with (directory / "chromium.log").open("wb") as log:
        process = subprocess.Popen(
            [
                binary,
                "--headless",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                # As root (CI containers), Chromium refuses to start with its sandbox on.
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-extensions",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    try:
        port = _debugging_port(profile / "DevToolsActivePort", process)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
            targets = json.load(answer)
        url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
        with connect(url, max_size=None, open_timeout=START_S) as socket:
            page = Page(socket)
            page.send("Page.enable")
            yield page
    finally:
        process.kill()
        process.wait()


def _debugging_port(path: Path, process: subprocess.Popen[bytes]) -> int:
    """The port Chromium wrote into `DevToolsActivePort` (its first line) once listening."""
    deadline = time.monotonic() + START_S
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= 2:
            return int(lines[0])
        assert process.poll() is None, f"chromium exited with status {process.returncode}"
        assert time.monotonic() < deadline, f"chromium wrote no {path.name} within {START_S} s"
        time.sleep(POLL_S)
