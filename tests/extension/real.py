"""The extension in a real ComfyUI, driven in headless Chromium: a copy of the checkout (the
user's own is never touched) gets the pack through `vrambisect extension install` and the fault
node of tests/real-comfyui (an OOM unless --disable-smart-memory, decided from the flags the
real server parsed), starts on the CPU with the given frontend, and tests/extension/browser.py
does what a user does. The pack is removed again with `vrambisect extension remove`.

    python tests/extension/real.py --comfyui ComfyUI --python venv/bin/python \
        --tool target/debug/vrambisect --front-end-root FRONTEND/static --label 1.27.10 \
        --shots target/extension-shots --browser-python PY_WITH_PLAYWRIGHT
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "real-comfyui"))
from run import copy_checkout  # noqa: E402  (the real-ComfyUI tier's copy, with its fault node)

WORKFLOW = os.path.join(ROOT, "tests", "real-comfyui", "workflow_fault.json")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--comfyui", required=True)
    ap.add_argument("--python", required=True)
    ap.add_argument("--tool", required=True)
    ap.add_argument("--front-end-root", required=True)
    ap.add_argument("--label", required=True)
    ap.add_argument("--shots", required=True)
    ap.add_argument("--browser-python", default=sys.executable)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="vb-ext-real-")
    comfyui = os.path.join(tmp, "ComfyUI")
    copy_checkout(os.path.abspath(a.comfyui), comfyui)
    with open(os.path.join(comfyui, "custom_nodes", "vrambisect_faults", "faults.json"), "w") as f:
        json.dump({"rules": [{"when": {"disable_smart_memory": False}, "effect": "oom"}]}, f)
    subprocess.run([a.tool, "extension", "install", "--comfyui", comfyui], check=True)
    port = free_port()
    env = dict(os.environ, VRAMBISECT_EXTENSION_TOOL=os.path.abspath(a.tool))
    log = open(os.path.join(tmp, "comfyui.log"), "wb")
    server = subprocess.Popen([os.path.abspath(a.python), "main.py", "--cpu", "--listen", "127.0.0.1", "--port",
                               str(port), "--front-end-root", os.path.abspath(a.front_end_root)],
                              cwd=comfyui, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    status = 1
    try:
        url = "http://127.0.0.1:%d" % port
        deadline = time.time() + 300
        while time.time() < deadline:
            try:
                urllib.request.urlopen(url + "/vrambisect/status", timeout=5).read()
                break
            except OSError:
                if server.poll() is not None:
                    raise SystemExit("ComfyUI ended before it was ready: see " + log.name)
                time.sleep(1)
        status = subprocess.call([a.browser_python, os.path.join(HERE, "browser.py"), "--url", url,
                                  "--workflow", WORKFLOW, "--expect-outcome", "oom",
                                  "--expect-fix=--disable-smart-memory", "--shots", a.shots,
                                  "--label", a.label, "--verdict-timeout", "900"])
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()
    subprocess.run([a.tool, "extension", "remove", "--comfyui", comfyui], check=True)
    if status == 0:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print("kept for a look: " + tmp)
    return status


if __name__ == "__main__":
    sys.exit(main())
