#!/usr/bin/env python3
"""Open an HTML file in headless Chromium (Debian package `chromium`) over the DevTools
protocol; take a full-page screenshot; list console errors, uncaught exceptions and every
request that is not the file itself or an embedded data: URL.

    python scripts/browser_check.py report.html --screenshot report.png [--width 1200]

Prints one JSON object {"requests": [...], "console_errors": [...], "screenshot": path,
"title": ...}; exit status 0 when there is no outside request and no console error, 1
otherwise, 2 when Chromium cannot start. Uses tornado's websocket client (no other package).
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tornado.websocket import websocket_connect

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    return next((shutil.which(c) for c in CHROMIUM if shutil.which(c)), None)


class Page:
    """A DevTools session on one page target: send commands, collect events."""

    def __init__(self, ws) -> None:
        self.ws, self.next_id, self.events = ws, 0, []

    async def call(self, method: str, **params) -> dict:
        self.next_id += 1
        my = self.next_id
        await self.ws.write_message(json.dumps({"id": my, "method": method, "params": params}))
        while True:
            msg = json.loads(await asyncio.wait_for(self.ws.read_message(), 60))
            if msg.get("id") == my:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    async def wait_event(self, method: str, timeout_s: float) -> None:
        end = time.monotonic() + timeout_s
        while not any(e.get("method") == method for e in self.events):
            msg = await asyncio.wait_for(self.ws.read_message(), max(0.1, end - time.monotonic()))
            self.events.append(json.loads(msg))


async def _check(url: str, ws_url: str, screenshot: Path | None, width: int) -> dict:
    ws = await websocket_connect(ws_url, max_message_size=256 * 2**20)
    page = Page(ws)
    for domain in ("Page", "Network", "Runtime", "Log"):
        await page.call(f"{domain}.enable")
    await page.call("Emulation.setDeviceMetricsOverride", width=width, height=900,
                    deviceScaleFactor=1, mobile=False)
    await page.call("Page.navigate", url=url)
    await page.wait_event("Page.loadEventFired", 60)
    await asyncio.sleep(0.5)  # late console messages and requests
    title = (await page.call("Runtime.evaluate", expression="document.title"))["result"].get("value")
    images = (await page.call("Runtime.evaluate", returnByValue=True, expression=(
        "Array.from(document.images).map(i => i.complete && i.naturalWidth > 0)")))["result"]["value"]
    # the tallest row of the page's raw tables (div.scroll), in CSS pixels (a squeezed raw table grew rows ~230 px tall)
    tallest = (await page.call("Runtime.evaluate", returnByValue=True, expression=(
        "Math.max(0, ...Array.from(document.querySelectorAll('.scroll tr'))"
        ".map(r => r.getBoundingClientRect().height))")))["result"]["value"]
    shot = None
    if screenshot is not None:
        metrics = await page.call("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        data = await page.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                               clip={"x": 0, "y": 0, "width": width,
                                     "height": min(int(size["height"]), 12000), "scale": 1})
        screenshot.write_bytes(base64.b64decode(data["data"]))
        shot = str(screenshot)
    ws.close()
    requests, errors = [], []
    for e in page.events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Network.requestWillBeSent":
            u = p["request"]["url"]
            if u != url and not u.startswith("data:"):
                requests.append(u)
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p["args"]))
        elif m == "Runtime.exceptionThrown":
            errors.append(p["exceptionDetails"].get("text", "exception"))
        elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
            errors.append(p["entry"].get("text", ""))
    return {"url": url, "title": title, "requests": requests, "console_errors": errors,
            "images_loaded": sum(images), "images": len(images), "screenshot": shot,
            "tallest_row_px": tallest}


def check_html(html_path: str | Path, screenshot: str | Path | None = None, width: int = 1200) -> dict:
    """Run the check; raises RuntimeError when Chromium is missing or does not answer."""
    exe = find_chromium()
    if exe is None:
        raise RuntimeError("chromium not found: `apt-get install -y chromium`")
    url = Path(html_path).resolve().as_uri()
    with tempfile.TemporaryDirectory(prefix="iteralab-chromium-") as profile:
        # its own process group: Chromium's helpers (renderer, crashpad, utility) write into the
        # profile after the browser process exits; the whole group is stopped before cleanup
        proc = subprocess.Popen([exe, "--headless=new", "--no-sandbox", "--disable-gpu",
                                 "--no-first-run", "--no-default-browser-check",
                                 "--disable-background-networking", "--disable-component-update",
                                 "--remote-debugging-port=0", f"--user-data-dir={profile}",
                                 "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            end = time.monotonic() + 60
            while not port_file.is_file() or len(port_file.read_text().splitlines()) < 2:
                if time.monotonic() > end or proc.poll() is not None:
                    raise RuntimeError("chromium did not start its DevTools endpoint")
                time.sleep(0.1)
            port = int(port_file.read_text().splitlines()[0])
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                target = next(t for t in json.load(r) if t["type"] == "page")
            return asyncio.run(_check(url, target["webSocketDebuggerUrl"],
                                      Path(screenshot) if screenshot else None, width))
        finally:
            stop_group(proc)


def stop_group(proc: subprocess.Popen, timeout_s: float = 10) -> None:
    """SIGTERM the process group of ``proc``, wait for the leader, SIGKILL what is left, and
    return once no process of the group remains (or ``timeout_s`` more has passed)."""
    pgid = proc.pid  # start_new_session: the leader's pid is the group id
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            continue
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            os.killpg(pgid, signal.SIGKILL)  # helpers that outlived the leader
        except ProcessLookupError:
            return
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("html")
    ap.add_argument("--screenshot")
    ap.add_argument("--width", type=int, default=1200)
    a = ap.parse_args(argv)
    try:
        res = check_html(a.html, a.screenshot, a.width)
    except RuntimeError as exc:
        print(f"browser_check: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(res, indent=1))
    return 0 if not res["requests"] and not res["console_errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
