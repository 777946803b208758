"""Headless Chromium from Debian's packages, driven through Selenium with explicit paths.

Selenium Manager never runs (the driver path is given), so nothing is downloaded:
`.ci/run` installs `chromium` and `chromium-driver` with apt when they are missing.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.wait import WebDriverWait

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# A laptop screen: the page must be readable at this size.
WINDOW = (1440, 900)
ARTEFACTS = Path(
    os.environ.get("TACHOGRAPH_TEST_ARTEFACTS", Path(__file__).resolve().parents[2] / "artefacts")
)

T = TypeVar("T")


def failed_request(path: str, status: int) -> str:
    """How Chromium logs a request the server refused, for `Browser.expect_console`."""
    return f"{path} - Failed to load resource: the server responded with a status of {status}"


class Browser:
    """One headless Chromium with a fresh profile, pointed at a `tachograph serve`."""

    def __init__(self, base_url: str) -> None:
        missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
        if missing:
            raise RuntimeError(
                f"{', '.join(missing)} missing: apt-get install -y chromium chromium-driver "
                "(.ci/run does this on a fresh machine)"
            )
        self.base_url = base_url
        self._profile = tempfile.TemporaryDirectory(prefix="tachograph-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in (
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            f"--user-data-dir={self._profile.name}",
            f"--window-size={WINDOW[0]},{WINDOW[1]}",
        ):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        self._log: list[dict[str, Any]] = []
        self._expected: list[str] = []

    def close(self) -> None:
        try:
            self.driver.quit()
        finally:
            self._profile.cleanup()

    # navigation and lookup

    def open(self, fragment: str = "") -> None:
        """Load the page afresh at `#fragment` (a full load: scripts start over)."""
        self.driver.get(f"{self.base_url}/#{fragment}" if fragment else f"{self.base_url}/")
        self.until(lambda: self.js("return document.readyState") == "complete")

    def go(self, fragment: str) -> None:
        """Navigate inside the loaded page, as a link click would."""
        self.js("location.hash = arguments[0]", fragment)

    def find(self, css: str) -> WebElement:
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css: str) -> list[WebElement]:
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def text(self, css: str) -> str:
        script = "const e = document.querySelector(arguments[0]); return e ? e.textContent : null"
        return str(self.js(script, css) or "")

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def until(self, check: Callable[[], T | None], timeout: float = 20.0, message: str = "") -> T:
        """Wait until `check` returns something truthy (stale elements count as not yet)."""

        def probe(_: Any) -> T | None:
            try:
                return check()
            except StaleElementReferenceException:
                return None

        found = WebDriverWait(self.driver, timeout, poll_frequency=0.05).until(probe, message)
        assert found is not None  # `until` returns only a truthy value
        return found

    def visible(self, css: str, timeout: float = 20.0) -> WebElement:
        def shown() -> WebElement | None:
            found = self.find_all(css)
            return found[0] if found and found[0].is_displayed() else None

        return self.until(shown, timeout, f"{css} not shown")

    def has_text(self, css: str, wanted: str, timeout: float = 20.0) -> str:
        """Wait until the element's text contains `wanted`; return the whole text."""

        def check() -> str | None:
            text = self.text(css)
            return text if wanted in text else None

        try:
            return self.until(check, timeout)
        except TimeoutException:
            raise AssertionError(
                f"{css} never contained {wanted!r}; last text: {self.text(css)!r}"
            ) from None

    # evidence

    def screenshot(self, name: str) -> Path:
        """Save the viewport as a test artefact (see docs/operator-page.md; never committed)."""
        ARTEFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTEFACTS / f"web-{name}.png"
        self.driver.save_screenshot(str(path))
        return path

    def console_errors(self) -> list[str]:
        """Script errors logged by the page so far in this test (failed requests excluded:
        `unexpected_console` below judges those)."""
        return [e["message"] for e in self._read_log() if e.get("source") != "network"]

    def expect_console(self, *fragments: str) -> None:
        """Errors this test provokes on purpose (a refused key, a 409 it asks for): console
        entries containing one of `fragments` do not fail it."""
        self._expected.extend(fragments)

    def start_test(self) -> None:
        """Forget what earlier tests logged and expected (the fixture calls this)."""
        self._read_log()
        self._log.clear()
        self._expected.clear()

    def unexpected_console(self) -> list[str]:
        """Every error the page logged in this test, script errors and failed requests
        alike, except those the test said it expects."""
        self._read_log()
        return [
            e["message"]
            for e in self._log
            if not any(fragment in e["message"] for fragment in self._expected)
        ]

    def _read_log(self) -> list[dict[str, Any]]:
        """The SEVERE entries logged since the last read (reading drains the driver's log)."""
        entries: list[dict[str, Any]] = self.driver.get_log("browser")  # type: ignore[no-untyped-call]
        severe = [e for e in entries if e["level"] == "SEVERE"]
        self._log.extend(severe)
        return severe
