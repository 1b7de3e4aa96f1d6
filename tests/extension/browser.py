"""Drives the extension's panel in headless Chromium, as a user would, against a ComfyUI (the
real one or the stand-in) that serves it: queue a workflow that fails, read the panel, click
Diagnose and wait for the verdict, click Write bug report and check the download.

    python tests/extension/browser.py --url http://127.0.0.1:8188 --workflow PROMPT.json \
        --expect-outcome oom --expect-fix --disable-smart-memory --shots DIR

Needs the ``playwright`` package (its driver only: the browser is Debian's chromium, named by
``--chromium``). Exit status 0 when every check held; each check prints one line.
"""

import argparse
import json
import os
import sys
import time
import zipfile

from playwright.sync_api import sync_playwright

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

failures = []


def check(ok, what, got=None):
    print(("ok   " if ok else "FAIL ") + what + ("" if ok or got is None else ": got %r" % (got,)))
    if not ok:
        failures.append(what)
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--workflow", required=True, help="an API-format prompt that fails")
    ap.add_argument("--expect-outcome", required=True)
    ap.add_argument("--expect-fix", required=True, help="a flag the verdict must name")
    ap.add_argument("--shots", required=True)
    ap.add_argument("--label", default="")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--verdict-timeout", type=float, default=300)
    a = ap.parse_args()
    os.makedirs(a.shots, exist_ok=True)
    with open(a.workflow, encoding="utf-8") as f:
        prompt = json.load(f)
    suffix = ("-" + a.label) if a.label else ""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=a.chromium, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900}, accept_downloads=True)
        console = []
        page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
        page.goto(a.url)
        page.wait_for_function("() => window.comfyAPI && window.comfyAPI.app && window.comfyAPI.app.app.graph",
                               timeout=120000)
        page.wait_for_selector("#vrambisect-panel", state="attached", timeout=60000)
        check(True, "the frontend loaded the extension's script")
        version = page.evaluate("() => window.__COMFYUI_FRONTEND_VERSION__ || null")
        print("     frontend", version)

        # The user's Queue button: the prompt goes with its UI workflow (extra_pnginfo).
        page.evaluate("""async (prompt) => {
            const app = window.comfyAPI.app.app;
            await app.loadApiJson(prompt, "failing.json");
            await app.queuePrompt(0, 1);
        }""", prompt)
        page.wait_for_selector("#vrambisect-panel .vb-summary", timeout=120000)
        title = page.inner_text("#vrambisect-panel .vb-failure h3")
        summary = page.inner_text("#vrambisect-panel .vb-summary")
        check("memory" in title.lower() if a.expect_outcome in ("oom", "accelerator_oom") else True,
              "the panel names the failure (%s)" % title, title)
        check("failed" in summary, "the panel gives logscan's reading: %s" % summary, summary)
        page.screenshot(path=os.path.join(a.shots, "panel-after-oom%s.png" % suffix))

        # A second diagnosis, a prompt while it runs: refused with a message.
        page.click("#vrambisect-panel .vb-diagnose")
        page.wait_for_selector("#vrambisect-panel .vb-progress, #vrambisect-panel .vb-verdict", timeout=60000)
        refused = page.evaluate("""async () => {
            const api = window.comfyAPI.api.api;
            const r = await api.fetchApi('/prompt', {method: 'POST', headers: {'Content-Type': 'application/json'},
                body: JSON.stringify({prompt: {}})});
            return {status: r.status, body: await r.json()};
        }""")
        busy = page.evaluate("""async () => {
            const api = window.comfyAPI.api.api;
            const r = await api.fetchApi('/vrambisect/diagnose', {method: 'POST',
                headers: {'Content-Type': 'application/json'}, body: JSON.stringify({prompt_id: 'x'})});
            return {status: r.status, body: await r.json()};
        }""")
        running = page.evaluate("async () => (await (await window.comfyAPI.api.api.fetchApi('/vrambisect/status')).json()).running")
        if running:
            check(refused["status"] == 400 and "diagnosing" in json.dumps(refused["body"]),
                  "a prompt queued during the diagnosis is refused with a message", refused)
            check(busy["status"] == 409, "a second diagnosis is refused", busy)
        if page.query_selector("#vrambisect-panel .vb-progress"):
            page.screenshot(path=os.path.join(a.shots, "panel-during-diagnosis%s.png" % suffix))
        page.wait_for_selector("#vrambisect-panel .vb-verdict", timeout=a.verdict_timeout * 1000)
        statement = page.inner_text("#vrambisect-panel .vb-statement")
        launch = page.inner_text("#vrambisect-panel .vb-launch") if page.query_selector(
            "#vrambisect-panel .vb-launch") else ""
        check(a.expect_fix in statement, "the verdict names %s: %s" % (a.expect_fix, statement), statement)
        check(a.expect_fix in launch, "the launch line carries it: %s" % launch, launch)
        page.screenshot(path=os.path.join(a.shots, "panel-after-verdict%s.png" % suffix))

        with page.expect_download(timeout=120000) as info:
            page.click("#vrambisect-panel .vb-report-button")
        download = info.value
        path = os.path.join(a.shots, "report%s.zip" % suffix)
        download.save_as(path)
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
        check("ISSUE.md" in names and "workflow.json" in names, "the report downloads (%d files)" % len(names), names)
        page.wait_for_selector("#vrambisect-panel .vb-report", timeout=10000)
        report_text = page.inner_text("#vrambisect-panel .vb-report")
        check("Redacted" in report_text, "the panel says what was redacted")
        check("Check before filing: the user name 'model'" in report_text,
              "the panel passes on the program's warnings", report_text)

        # After a reload (as after a restart) the verdict is shown again.
        page.evaluate("() => localStorage.removeItem('vrambisect.seen-diagnosis')")
        page.reload()
        page.wait_for_selector("#vrambisect-panel .vb-verdict", timeout=60000)
        check(True, "the last verdict is shown again after a reload")
        ours = [c for c in console if "vrambisect" in c]
        check(not ours, "no error of the extension in the console", ours)
        browser.close()
    print("all checks held" if not failures else "%d check(s) failed" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
