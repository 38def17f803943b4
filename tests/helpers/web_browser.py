"""A real browser for the web pages' tests: Debian's Chromium driven by Playwright (its own
browser download is not reachable here, so the system executable is used), axe-core from the npm
registry for the accessibility scan, and ``evalrunner serve`` serving the pages.

Without Chromium the browser tests skip, except where ``EVALRUNNER_REQUIRE_BROWSER=1`` (set by
``.ci/run``, which installs it): there a missing browser fails them."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
EVALRUNNER = str(Path(sys.executable).with_name("evalrunner"))
AXE_VERSION = "4.14.1"
AXE_TARBALL = f"https://registry.npmjs.org/axe-core/-/axe-core-{AXE_VERSION}.tgz"
# The registry's integrity value for that tarball (`npm view axe-core@4.14.1 dist.integrity`).
AXE_INTEGRITY = "sha512-FHfa+lmNjQZfJz1q8wKqIDwC6DExcHt/pkjNQb09a3NPjCKg2rhu5qb2S4r76ASyFNNtuFooJpZe37OgudVGtQ=="
# Chromium as root on a closed network: no sandbox, and none of its background connections.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def artifacts_dir() -> Path:
    """Where screenshots are kept after the run (``EVALRUNNER_TEST_ARTIFACTS``, default
    ``.evalrunner/test-artifacts/web`` in the checkout)."""
    where = Path(os.environ.get("EVALRUNNER_TEST_ARTIFACTS") or ROOT / ".evalrunner" / "test-artifacts") / "web"
    where.mkdir(parents=True, exist_ok=True)
    return where


def chromium_or_skip() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        message = "no Chromium: install Debian's `chromium` (apt-get install chromium) for the browser tests"
        if os.environ.get("EVALRUNNER_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


def axe_source() -> str:
    """axe-core's ``axe.min.js``, fetched once from the npm registry, checked against the
    registry's integrity hash, and cached beside the artifacts."""
    cache = ROOT / ".evalrunner" / "cache" / f"axe-core-{AXE_VERSION}.tgz"
    if not cache.exists():
        cache.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(AXE_TARBALL, timeout=60) as response:
            data = response.read()
        tmp = cache.with_suffix(".part")
        tmp.write_bytes(data)
        tmp.replace(cache)
    data = cache.read_bytes()
    digest = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    if digest != AXE_INTEGRITY:
        cache.unlink()
        raise AssertionError(f"{AXE_TARBALL}: integrity {digest}, expected {AXE_INTEGRITY}")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = tar.extractfile("package/axe.min.js")
        assert member is not None
        return member.read().decode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_answering(url: str, what: str, *, alive=lambda: True, log: Path | None = None) -> None:
    """Poll ``url`` until it answers (at most 120 s), failing early if ``alive()`` turns false."""
    deadline = time.monotonic() + 120
    while True:
        assert alive(), log.read_text()[-3000:] if log else f"{what} exited"
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            assert time.monotonic() < deadline, f"{what} never answered {url}"
            time.sleep(0.2)


@contextlib.contextmanager
def served_pages(home: Path, log: Path, *, serve_args: tuple[str, ...] = (), **settings: str) -> Iterator[str]:
    """``evalrunner serve --webhook-only`` on ``home`` (``serve_args``: more options;
    ``settings``: more environment, e.g. ``EVALRUNNER_WEB_REFRESH_S``): yields the pages' base
    URL (``…/web``)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALRUNNER_", "DAGSTER_"))} | settings
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [EVALRUNNER, "serve", "--webhook-only", "--insecure", "--port", str(port), *serve_args],
            env={**env, "EVALRUNNER_HOME": str(home)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until_answering(
                f"http://127.0.0.1:{port}/healthz", "serve", alive=lambda: proc.poll() is None, log=log
            )
            yield f"http://127.0.0.1:{port}/web"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def launched_chromium() -> Iterator[Any]:
    """Debian's Chromium launched headless by Playwright (skips where there is none)."""
    from playwright.sync_api import sync_playwright

    executable = chromium_or_skip()
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


class Visit:
    """A browser page that keeps every console error, page error and dialog it saw."""

    def __init__(self, browser: Any, width: int) -> None:
        self.width = width
        self.context = browser.new_context(viewport={"width": width, "height": 900})
        self.page = self.context.new_page()
        self.problems: list[str] = []
        self.page.on(
            "console", lambda m: self.problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None
        )
        self.page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        self.page.on("response", lambda r: self.problems.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        self.page.on("dialog", lambda d: (self.problems.append(f"dialog: {d.message}"), d.dismiss()))

    def open(self, url: str) -> None:
        response = self.page.goto(url)
        assert response is not None and response.status == 200, (url, response and response.status)
        self.page.wait_for_load_state("load")

    def follow(self, selector: str) -> str:
        """Click the first link matching ``selector`` as a person would; the URL it led to."""
        with self.page.expect_navigation():
            self.page.locator(selector).first.click()
        self.page.wait_for_load_state("load")
        return self.page.url

    def check(self, name: str, url: str, *, axe: str, shots: Path) -> None:
        """Open ``url`` and keep its screenshot as ``<name>-<width>.png``; at desktop width no
        serious or critical axe-core violation, at a phone's no page-level sideways scroll."""
        self.open(url)
        self.page.screenshot(path=str(shots / f"{name}-{self.width}.png"), full_page=True)
        if self.width >= 1024:
            assert serious_violations(self.page, axe) == [], (name, url)
        else:
            overflow = self.page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 1, (name, url, f"{overflow}px wider than the phone")

    def close(self) -> None:
        self.context.close()


def serious_violations(page: Any, axe: str) -> list[str]:
    """axe-core's serious and critical violations on ``page`` (``axe``: its source)."""
    page.evaluate(axe)  # evaluated by the browser's debugger protocol: the page's CSP still holds for the page
    found = page.evaluate("async () => (await axe.run()).violations.map(v => [v.id, v.impact, v.nodes.length, v.help])")
    return [f"{i} ({impact}, {n} nodes): {text}" for i, impact, n, text in found if impact in ("serious", "critical")]
