"""A small W3C WebDriver client over httpx for the run view's browser test: Debian's chromium through its own
chromedriver, nothing downloaded.

WebDriver is a JSON-over-HTTP standard (https://www.w3.org/TR/webdriver2/); the handful of commands the test uses
fit in this file, so the suite needs no browser library (Selenium brings trio, whose import runs `ldconfig`, which
the testing kit's isolation test rightly counts as a process a user's test suite started).
"""

from __future__ import annotations

import base64
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

#: The key of an element reference in WebDriver answers.
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"
T = TypeVar("T")


class WebDriverError(Exception):
    """A command the browser refused: the WebDriver error code and its message."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Element:
    def __init__(self, browser: Browser, ref: str) -> None:
        self.browser = browser
        self.ref = ref

    def _path(self, tail: str) -> str:
        return f"/element/{self.ref}/{tail}"

    @property
    def text(self) -> str:
        return str(self.browser.command("GET", self._path("text")))

    def attribute(self, name: str) -> str | None:
        value = self.browser.command("GET", self._path(f"attribute/{name}"))
        return None if value is None else str(value)

    def property(self, name: str) -> Any:
        return self.browser.command("GET", self._path(f"property/{name}"))

    def click(self) -> None:
        self.browser.command("POST", self._path("click"), {})

    def send_keys(self, text: str) -> None:
        self.browser.command("POST", self._path("value"), {"text": text})


class Browser:
    """Headless chromium driven through a chromedriver process of its own."""

    def __init__(self, chromium: str, chromedriver: str, profile: Path, args: list[str]) -> None:
        port = _free_port()
        self._driver = subprocess.Popen(
            [chromedriver, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self._http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
        deadline = time.monotonic() + 30
        while True:
            try:
                if self._http.get("/status").json()["value"]["ready"]:
                    break
            except (httpx.TransportError, ValueError, KeyError):
                pass
            if time.monotonic() > deadline or self._driver.poll() is not None:
                self._driver.kill()
                raise WebDriverError("chromedriver did not start")
            time.sleep(0.1)
        options = {"binary": chromium, "args": [*args, f"--user-data-dir={profile}"]}
        capabilities = {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": options}}
        try:
            answer = self._call("POST", "/session", {"capabilities": capabilities})
        except BaseException:
            self._driver.kill()
            raise
        self.session = str(answer["sessionId"])
        self.command("POST", "/timeouts", {"pageLoad": 30_000, "script": 30_000})

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = self._http.request(method, path, json=body)
        value = response.json().get("value")
        if response.status_code >= 400:
            error = value if isinstance(value, dict) else {}
            raise WebDriverError(f"{error.get('error', response.status_code)}: {error.get('message', '')[:500]}")
        return value

    def command(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return self._call(method, f"/session/{self.session}{path}", body)

    def get(self, url: str) -> None:
        self.command("POST", "/url", {"url": url})

    @property
    def current_url(self) -> str:
        return str(self.command("GET", "/url"))

    @property
    def page_source(self) -> str:
        return str(self.command("GET", "/source"))

    def find_all(self, css: str) -> list[Element]:
        found = self.command("POST", "/elements", {"using": "css selector", "value": css})
        return [Element(self, item[ELEMENT]) for item in found]

    def find(self, css: str) -> Element:
        found = self.command("POST", "/element", {"using": "css selector", "value": css})
        return Element(self, found[ELEMENT])

    def execute(self, script: str, *args: Any) -> Any:
        return self.command("POST", "/execute/sync", {"script": script, "args": list(args)})

    def screenshot(self, path: str | Path) -> None:
        Path(path).write_bytes(base64.b64decode(self.command("GET", "/screenshot")))

    def until(self, check: Callable[[Browser], T], timeout: float = 60) -> T:
        """`check`'s first true answer, asked every 0.2 s (an element that went away meanwhile is asked again)."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while True:
            try:
                value = check(self)
                if value:
                    return value
            except WebDriverError as exc:
                last = exc
            if time.monotonic() > deadline:
                raise TimeoutError(f"not within {timeout:g} s (last error: {last}); at {self.current_url}")
            time.sleep(0.2)

    def quit(self) -> None:
        try:
            self._call("DELETE", f"/session/{self.session}")
        except (WebDriverError, httpx.HTTPError):
            pass
        finally:
            self._http.close()
            self._driver.terminate()
            try:
                self._driver.wait(10)
            except subprocess.TimeoutExpired:
                self._driver.kill()
