"""A real headless Chromium, driven over the DevTools protocol on a pipe (no extra packages).

Chromium (Debian's ``chromium-headless-shell`` or ``chromium``) is started
with ``--remote-debugging-pipe``: it reads protocol commands on fd 3 and
writes replies and events on fd 4, each message JSON ended by a NUL byte.
:class:`Browser` opens one page, records every console message and uncaught
exception, runs JavaScript in it and takes screenshots.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import time
from typing import Any, Optional

CANDIDATES = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")


def find_chromium() -> Optional[str]:
    """Path of a Chromium binary, or None (PERSEUS_CHROMIUM overrides the search)."""
    given = os.environ.get("PERSEUS_CHROMIUM")
    if given:
        return given
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class BrowserError(RuntimeError):
    pass


class Browser:
    """One headless Chromium with one page; use as a context manager."""

    def __init__(self, binary: str, *, width: int = 1200, height: int = 900, timeout_s: float = 60):
        self._timeout_s = timeout_s
        commands_read, self._commands = os.pipe()
        self._replies, replies_write = os.pipe()
        self._profile = os.path.join(
            os.environ.get("TMPDIR", "/tmp"), f"perseus-chromium-{os.getpid()}-{id(self)}"
        )
        args = [
            binary,
            "--headless",
            "--no-sandbox",  # the tests run as root in CI
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            "--remote-debugging-pipe",
            f"--user-data-dir={self._profile}",
            f"--window-size={width},{height}",
            "about:blank",
        ]

        def wire() -> None:  # runs in the child: put the pipe ends on fds 3 and 4
            # Copy both away first: either may already sit on fd 3 or 4.
            high_read, high_write = os.dup(commands_read), os.dup(replies_write)
            os.dup2(high_read, 3)
            os.dup2(high_write, 4)
            os.set_inheritable(3, True)
            os.set_inheritable(4, True)

        # Python's pipes are close-on-exec, so only the two dup2()ed ends reach Chromium.
        self._process = subprocess.Popen(
            args,
            close_fds=False,
            preexec_fn=wire,  # the tests that use it start no threads first
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        os.close(commands_read)
        os.close(replies_write)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.console: list[tuple[str, str]] = []  # (level, text)
        self.exceptions: list[str] = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=True,
        )

    # -- protocol ---------------------------------------------------------------------

    def _send(self, message: dict[str, Any]) -> None:
        os.write(self._commands, json.dumps(message).encode() + b"\0")

    def _receive(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("Chromium did not answer in time")
            ready, _, _ = select.select([self._replies], [], [], left)
            if ready:
                chunk = os.read(self._replies, 1 << 20)
                if not chunk:
                    err = self._process.stderr.read().decode(errors="replace")[-2000:]  # type: ignore[union-attr]
                    raise BrowserError(f"Chromium closed the pipe: {err}")
                self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        decoded: dict[str, Any] = json.loads(message)
        if "method" in decoded:
            self._record(decoded)
        return decoded

    def _record(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        method, params = event["method"], event.get("params", {})
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
            self.console.append((params["type"], text))
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.exceptions.append(
                details.get("exception", {}).get("description") or details.get("text", "")
            )
        elif method == "Log.entryAdded":
            entry = params["entry"]
            self.console.append((entry["level"], entry.get("text", "")))

    def call(
        self, method: str, params: Optional[dict[str, Any]] = None, *, session: bool = False
    ) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        self._send(message)
        deadline = time.monotonic() + self._timeout_s
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result

    def wait_for(self, method: str) -> dict[str, Any]:
        for event in self.events:
            if event["method"] == method:
                return event
        deadline = time.monotonic() + self._timeout_s
        while True:
            message = self._receive(deadline)
            if message.get("method") == method:
                return message

    # -- page -------------------------------------------------------------------------

    def open(self, url: str) -> None:
        self.events.clear()
        self.call("Page.navigate", {"url": url}, session=True)
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        reply = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=True,
        )
        if "exceptionDetails" in reply:
            raise BrowserError(f"{expression!r} threw: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def screenshot(self, path: str, *, full_page: bool = True) -> None:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.call("Page.getLayoutMetrics", session=True)["cssContentSize"]
            params["clip"] = {
                "x": 0,
                "y": 0,
                "width": size["width"],
                "height": size["height"],
                "scale": 1,
            }
            params["captureBeyondViewport"] = True
        data = self.call("Page.captureScreenshot", params, session=True)["data"]
        with open(path, "wb") as file:
            file.write(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (BrowserError, OSError):
            pass
        try:
            self._process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        for fd in (self._commands, self._replies):
            try:
                os.close(fd)
            except OSError:
                pass
        if self._process.stderr is not None:
            self._process.stderr.close()
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
