"""The extension in the stand-in ComfyUI (fixtures/fake-comfyui), driven in headless Chromium with
a real frontend package: a temporary copy of the stand-in (its demo scenario: Dynamic VRAM runs out
of memory in the KSampler, --disable-dynamic-vram fixes it) gets the pack through
`vrambisect extension install`, starts with the given Python (one with aiohttp) and
`--front-end-root`, and tests/extension/browser.py does what a user does; the Diagnose button
bisects that same copy. The pack is removed again with `vrambisect extension remove`.

    python tests/extension/standin.py --python target/extension-venv/bin/python \
        --tool target/debug/vrambisect --front-end-root FRONTEND/static --label standin-1.27.10 \
        --shots target/extension-shots [--browser-python PY_WITH_PLAYWRIGHT]

Exit status: browser.py's (0 when every check held); the copy is kept for a look otherwise.
"""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FAKE = os.path.join(ROOT, "fixtures", "fake-comfyui")
WORKFLOW = os.path.join(ROOT, "fixtures", "workflows", "sd15_txt2img.json")
READY_S = 120
STOP_S = 60


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ignore(directory, names):
    """The committed stand-in only: no tests, caches, or files an earlier run left in the checkout
    (the demo scenario.json stays)."""
    rel = os.path.relpath(directory, FAKE)
    skip = set()
    for name in names:
        if name in ("__pycache__", ".git") or name.endswith(".pyc"):
            skip.add(name)
        elif rel == "." and (name in ("tests", "run-counter.txt", "temp") or name.startswith("gpu-state.txt")):
            skip.add(name)
        elif rel in ("user", "output", "input") and name != ".gitkeep":
            skip.add(name)
    return skip


def wait_ready(server, url, log_path):
    """Until the pack's status route answers (the stand-in prints its ready line just before it
    serves)."""
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit("the stand-in ended (%s) before it was ready: see %s" % (server.returncode, log_path))
        try:
            with urllib.request.urlopen(url + "/vrambisect/status", timeout=5) as r:
                if r.status == 200:
                    return
        except urllib.error.HTTPError as e:
            raise SystemExit("the stand-in answers /vrambisect/status with %d: is the pack loaded? see %s"
                             % (e.code, log_path))
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("the stand-in was not ready within %d s: see %s" % (READY_S, log_path))


def stop(server):
    """Ctrl-C to the stand-in's process group (a pack's exit handlers run: the extension stops a
    diagnosis still under way), then SIGKILL if it does not end."""
    if server.poll() is not None:
        return
    try:
        os.killpg(server.pid, signal.SIGINT)
        server.wait(timeout=STOP_S)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=10)
    except ProcessLookupError:
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", required=True, help="runs the stand-in; needs aiohttp (the pack's routes)")
    ap.add_argument("--tool", required=True)
    ap.add_argument("--front-end-root", required=True)
    ap.add_argument("--label", required=True)
    ap.add_argument("--shots", required=True)
    ap.add_argument("--browser-python", default=sys.executable)
    ap.add_argument("--verdict-timeout", type=float, default=600)
    a = ap.parse_args()
    tool = os.path.abspath(a.tool)
    tmp = tempfile.mkdtemp(prefix="vb-ext-standin-")
    comfyui = os.path.join(tmp, "ComfyUI")
    shutil.copytree(FAKE, comfyui, ignore=ignore)
    subprocess.run([tool, "extension", "install", "--comfyui", comfyui], check=True)
    port = free_port()
    url = "http://127.0.0.1:%d" % port
    env = dict(os.environ, VRAMBISECT_EXTENSION_TOOL=tool)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    log_path = os.path.join(tmp, "comfyui.log")
    log = open(log_path, "wb")
    server = subprocess.Popen([os.path.abspath(a.python), "main.py", "--listen", "127.0.0.1", "--port", str(port),
                               "--front-end-root", os.path.abspath(a.front_end_root)],
                              cwd=comfyui, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    status = 1
    try:
        wait_ready(server, url, log_path)
        status = subprocess.call([a.browser_python, os.path.join(HERE, "browser.py"), "--url", url,
                                  "--workflow", WORKFLOW, "--expect-outcome", "oom",
                                  "--expect-fix=--disable-dynamic-vram", "--shots", a.shots,
                                  "--label", a.label, "--verdict-timeout", str(a.verdict_timeout)])
    finally:
        stop(server)
        log.close()
        subprocess.run([tool, "extension", "remove", "--comfyui", comfyui], check=False)
    if status == 0:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print("kept for a look: " + tmp)
    return status


if __name__ == "__main__":
    sys.exit(main())
