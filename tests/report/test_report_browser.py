"""The HTML report in a real browser: headless Chromium over the DevTools protocol.

Opens reports built from the frozen results files, checks that they render without a
console error, an exception or any network request, that the charts and tables are
there for the data given, and saves a screenshot in pytest's temporary folder.
Skipped only where Chromium is not installed (ci/apt-packages.txt installs it in CI).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import needs
import pytest

from hwbench.report import build
from hwbench.results import files as results

DATA = Path(__file__).resolve().parents[1] / "data" / "report"
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (Debian: apt-get install "
    "chromium; ci/setup.sh installs it from ci/apt-packages.txt)",
)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
]


class Page:
    """One Chromium tab driven over its DevTools websocket."""

    def __init__(self, url: str) -> None:
        import websocket  # websocket-client, from the test extra

        self.ws = websocket.create_connection(url, timeout=30, suppress_origin=True)
        self.events: list[dict[str, Any]] = []
        self._next = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and return its result; events met meanwhile are kept."""
        self._next += 1
        self.ws.send(json.dumps({"id": self._next, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self._next:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def wait_for(self, event: str, timeout: float = 30.0) -> None:
        """Read events until ``event`` arrives."""
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == event for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {event} within {timeout} s")
            self.events.append(json.loads(self.ws.recv()))

    def open(self, path: Path) -> None:
        """Load a local file and wait until it has loaded."""
        self.events.clear()
        self.call("Page.navigate", url=path.resolve().as_uri())
        self.wait_for("Page.loadEventFired")
        self.call("Runtime.evaluate", expression="1")  # drain events queued during load

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluation failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def problems(self) -> list[str]:
        """Console errors, uncaught exceptions and requests leaving the file."""
        found = []
        for e in self.events:
            method, p = e.get("method"), e.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(f"exception: {p['exceptionDetails'].get('text')}")
            elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                found.append(f"console.{p['type']}: {[a.get('value') for a in p.get('args', [])]}")
            elif method == "Log.entryAdded" and p["entry"].get("level") == "error":
                found.append(f"log: {p['entry'].get('text')}")
            elif method == "Network.requestWillBeSent":
                url = p["request"]["url"]
                if not url.startswith(("file:", "data:", "about:")):
                    found.append(f"network request: {url}")
        return found

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))


@pytest.fixture(scope="module")
def browser() -> Iterator[Page]:
    """A headless Chromium tab, 1280x2000, with console, log and network events on."""
    needs.module("websocket")
    profile = Path(tempfile.mkdtemp(prefix="hwbench-chromium-"))
    log = open(profile / "chromium.log", "wb")
    proc = subprocess.Popen(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=dict(os.environ, TMPDIR=str(profile)),  # its org.chromium.* folders go with the profile
        start_new_session=True,  # a group of its own: its helper processes are stopped with it
    )
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"chromium did not start: {(profile / 'chromium.log').read_text()[-2000:]}")
            time.sleep(0.1)
        port = port_file.read_text().split()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as reply:
            tab = next(t for t in json.load(reply) if t.get("type") == "page")
        page = Page(tab["webSocketDebuggerUrl"])
        for domain in ("Page", "Runtime", "Log", "Network"):
            page.call(f"{domain}.enable")
        page.call("Emulation.setDeviceMetricsOverride", width=1280, height=2000, deviceScaleFactor=1, mobile=False)
        yield page
        page.ws.close()
    finally:
        _stop_group(proc)
        log.close()
        shutil.rmtree(profile, ignore_errors=True)


def _stop_group(proc: subprocess.Popen) -> None:
    """Stop Chromium and every process of its group (the network service and the zygote outlive
    the browser and still write into the profile), SIGKILL what is left after 20 s, and wait until
    none is left, so that the profile can go."""
    for sig, wait_s in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            proc.poll()  # reap the browser itself
            if not _group_running(proc.pid):
                return
            time.sleep(0.05)


def _group_running(group: int) -> bool:
    """Whether a process of ``group`` still runs (zombies waiting for a reaper do not count)."""
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat_file.read_text().rpartition(")")[2].split()
            if int(fields[2]) == group and fields[0] not in ("Z", "X"):
                return True
    return False


def _report(tmp_path: Path, *names: str) -> Path:
    out = tmp_path / "report.html"
    out.write_text(build([(DATA / n, results.load(DATA / n)) for n in names]))
    return out


RENDERED = """JSON.stringify({
  charts: [...document.querySelectorAll('svg.chart')].map(s => ({id: s.id, w: s.getBoundingClientRect().width,
          marks: s.querySelectorAll('circle, rect, polygon, polyline').length})),
  sections: Object.fromEntries([...document.querySelectorAll('section')].map(s => [s.id,
          {nodata: s.querySelectorAll('.nodata').length, tables: s.querySelectorAll('table').length,
           charts: s.querySelectorAll('svg.chart').length}])),
  width: document.documentElement.scrollWidth, title: document.title})"""


def test_detector_sees_console_errors(browser: Page, tmp_path: Path) -> None:
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><title>x</title><script>console.error('boom'); undefinedCall();</script>")
    browser.open(bad)
    problems = browser.problems()
    assert any("boom" in p for p in problems) and any(p.startswith("exception") for p in problems), problems


def test_full_report_renders(browser: Page, tmp_path: Path) -> None:
    path = _report(tmp_path, "full-cpu.json", "gpu-h100.json")
    browser.open(path)
    assert browser.problems() == []
    page = json.loads(browser.evaluate(RENDERED))
    browser.screenshot(tmp_path / "report.png")
    assert (tmp_path / "report.png").stat().st_size > 20_000
    sections = page["sections"]
    assert list(sections) == ["summary", "roofline", "overhead", "portability", "allreduce", "parity", "compile"]
    assert all(s["nodata"] == 0 for s in sections.values()), sections
    # A roofline per device (cpu, opencl, cuda), overhead for cpu and cuda, a cascade per kernel, two AllReduce.
    assert (sections["roofline"]["charts"], sections["overhead"]["charts"]) == (3, 2)
    assert (sections["portability"]["charts"], sections["allreduce"]["charts"]) == (3, 2)
    assert all(s["tables"] >= 1 for s in sections.values())
    assert all(c["w"] > 300 and c["marks"] >= 4 for c in page["charts"]), page["charts"]
    assert page["width"] <= 1280, "the page scrolls sideways at 1280 px"


def test_minimal_report_says_no_data(browser: Page, tmp_path: Path) -> None:
    browser.open(_report(tmp_path, "minimal.json"))
    assert browser.problems() == []
    sections = json.loads(browser.evaluate(RENDERED))["sections"]
    assert all(
        sections[s]["nodata"] == 1 and sections[s]["charts"] == 0
        for s in ("roofline", "overhead", "portability", "allreduce", "parity", "compile")
    ), sections
    browser.screenshot(tmp_path / "minimal.png")
