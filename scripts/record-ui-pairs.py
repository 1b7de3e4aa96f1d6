#!/usr/bin/env python3
"""Re-records fixtures/ui-workflows/pairs/*.api.json with ComfyUI's real frontend.

    scripts/record-ui-pairs.py --url http://127.0.0.1:8188 --chromium /usr/bin/chromium [NAME ...]

Needs: a running, unmodified ComfyUI (0.3.64, frontend package 1.27.10; `python main.py --cpu`
is enough, no model files are needed) at --url, a Chromium binary, and Python 3 with the
`websocket-client` package (pip install websocket-client). Everything else is the standard
library.

For each pair NAME (all of pairs.json when none is named) it starts from a freshly loaded page,
waits until `window.app` (the ComfyApp) is set up, then runs in the page:

    await app.loadGraphData(<NAME.ui.json>, true, true, null,
                            {showMissingNodesDialog: false, showMissingModelsDialog: false})
    const p = await app.graphToPrompt()
    JSON.stringify(p.output, null, 2)          // what the frontend's "Export (API)" writes

and writes that text (plus a final newline) to pairs/NAME.api.json (or to NAME.api.json in the
--out folder). Every workflow is recorded twice, each time in a fresh page; the two results must
be identical (graphToPrompt must not move a seed with control_after_generate), otherwise the
script writes nothing for it and exits with status 1 at the end. An exception thrown in the page
(loadGraphData or graphToPrompt failing) stops the script with a traceback.

Options:
    --fixtures DIR   the fixtures folder (default: fixtures/ui-workflows beside this script's repo)
    --out DIR        where NAME.api.json files are written (and, with --check, read from)
                     (default: the pairs folder, DIR/pairs of --fixtures)
    --frontend V     the frontend version the page must report (default: each entry's "frontend"
                     field in pairs.json)
    --check          do not write; compare each recording with the stored .api.json and exit 1
                     on any difference
    --port N         Chromium's remote-debugging port (default 9222)

The frontend version the page reports (window.__COMFYUI_FRONTEND_VERSION__) is printed and must
equal --frontend, or else the "frontend" field of each recorded entry in pairs.json.

To record with another frontend version, serve it with ComfyUI's --front-end-root and write the
results elsewhere, e.g. `--out fixtures/ui-workflows/pairs-1.58 --frontend 1.58.1`.
"""

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import websocket  # websocket-client

ROOT = pathlib.Path(__file__).resolve().parent.parent


class Page:
    """One Chromium tab, driven over the DevTools protocol."""

    def __init__(self, ws_url):
        self.ws = websocket.create_connection(ws_url, timeout=120, suppress_origin=True)
        self.next_id = 0
        self.console = []

    def call(self, method, **params):
        self.next_id += 1
        my_id = self.next_id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if msg.get("method") == "Runtime.exceptionThrown":
                self.console.append(json.dumps(msg["params"]["exceptionDetails"])[:500])

    def evaluate(self, expression, timeout_ms=120000):
        """Evaluates an async expression in the page and returns its JSON-able value."""
        res = self.call(
            "Runtime.evaluate",
            expression=expression,
            awaitPromise=True,
            returnByValue=True,
            timeout=timeout_ms,
        )
        if "exceptionDetails" in res:
            details = res["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise RuntimeError(f"page exception: {text}")
        return res["result"].get("value")

    def close(self):
        self.ws.close()


class Browser:
    def __init__(self, chromium, port):
        self.profile = tempfile.mkdtemp(prefix="record-ui-pairs-")
        self.port = port
        self.proc = subprocess.Popen(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--window-size=1600,1000",
                f"--user-data-dir={self.profile}",
                f"--remote-debugging-port={port}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/version", timeout=2):
                    break
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("chromium did not open its debugging port")
                time.sleep(0.3)

    def new_page(self, url):
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/json/new?{urllib.parse.quote(url, safe='')}",
            method="PUT",
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            target = json.load(r)
        page = Page(target["webSocketDebuggerUrl"])
        page.target_id = target["id"]
        page.call("Runtime.enable")
        return page

    def close_page(self, page):
        page.close()
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/close/{page.target_id}", timeout=10).read()
        except OSError:
            pass

    def quit(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


WAIT_READY = """
(async () => {
  const t0 = Date.now();
  while (Date.now() - t0 < 90000) {
    if (window.app && window.app.graph && window.app.canvas && window.LiteGraph &&
        window.LiteGraph.registered_node_types['KSampler'] &&
        window.__COMFYUI_FRONTEND_VERSION__) {
      // let the start-up workflow (default graph or restored tab) finish loading
      await new Promise(r => setTimeout(r, 1500));
      return window.__COMFYUI_FRONTEND_VERSION__;
    }
    await new Promise(r => setTimeout(r, 200));
  }
  throw new Error('ComfyApp did not become ready');
})()
"""

RECORD = """
(async (wf) => {
  await window.app.loadGraphData(wf, true, true, null,
      {showMissingNodesDialog: false, showMissingModelsDialog: false});
  const p = await window.app.graphToPrompt();
  return JSON.stringify(p.output, null, 2);
})(%s)
"""


def open_app(browser, url):
    page = browser.new_page(url)
    for attempt in range(20):
        try:
            return page, page.evaluate(WAIT_READY)
        except RuntimeError as e:
            # the tab may still be navigating from about:blank to the app
            if "context" not in str(e) or attempt == 19:
                raise
            time.sleep(0.5)


def record_once(browser, url, ui_text):
    page, version = open_app(browser, url)
    try:
        return page.evaluate(RECORD % ui_text), version
    finally:
        browser.close_page(page)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True, help="ComfyUI's URL, e.g. http://127.0.0.1:8188")
    ap.add_argument("--chromium", required=True, help="path of a chromium binary")
    ap.add_argument("--fixtures", default=str(ROOT / "fixtures" / "ui-workflows"))
    ap.add_argument("--out", help="folder for NAME.api.json (default: the pairs folder)")
    ap.add_argument("--frontend", help="frontend version the page must report (default: pairs.json's)")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--port", type=int, default=9222)
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()

    fixtures = pathlib.Path(args.fixtures)
    entries = json.loads((fixtures / "pairs.json").read_text(encoding="utf-8"))
    by_name = {e["name"]: e for e in entries}
    names = args.names or [e["name"] for e in entries]
    unknown = [n for n in names if n not in by_name]
    if unknown:
        sys.exit(f"not in pairs.json: {', '.join(unknown)}")

    out = pathlib.Path(args.out) if args.out else fixtures / "pairs"
    if not args.check:
        out.mkdir(parents=True, exist_ok=True)
    url = args.url.rstrip("/") + "/"
    browser = Browser(args.chromium, args.port)
    failed = 0
    try:
        for name in names:
            ui_path = fixtures / "pairs" / f"{name}.ui.json"
            api_path = out / f"{name}.api.json"
            ui_text = ui_path.read_text(encoding="utf-8")
            json.loads(ui_text)  # must be JSON as stored
            first, version = record_once(browser, url, ui_text)
            second, _ = record_once(browser, url, ui_text)
            expected = args.frontend or by_name[name].get("frontend")
            if version != expected:
                print(f"{name}: page reports frontend {version}, expected {expected}")
                failed += 1
            if first != second:
                print(f"{name}: two recordings differ")
                failed += 1
                continue
            text = first + "\n"
            if args.check:
                old = api_path.read_text(encoding="utf-8") if api_path.exists() else None
                status = "same" if old == text else "DIFFERENT"
                if old != text:
                    failed += 1
                print(f"{name}: {status} (frontend {version})")
            else:
                api_path.write_text(text, encoding="utf-8")
                print(f"{name}: {len(json.loads(first))} nodes (frontend {version})")
    finally:
        browser.quit()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
