"""What tests/extension/standin.py and real.py share: a ComfyUI copy with the pack installed by
`vrambisect extension install`, started with the given frontend, tests/extension/browser.py run
against it, the server stopped (its process group) and the pack removed again.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
READY_S = 300
STOP_S = 60


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(server, url, log_path):
    """Until the pack's status route answers (ComfyUI prints its ready line just before it
    serves)."""
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit("ComfyUI ended (%s) before it was ready: see %s" % (server.returncode, log_path))
        try:
            with urllib.request.urlopen(url + "/vrambisect/status", timeout=5) as r:
                if r.status == 200:
                    return
        except urllib.error.HTTPError as e:
            raise SystemExit("ComfyUI answers /vrambisect/status with %d: is the pack loaded? see %s"
                             % (e.code, log_path))
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("ComfyUI was not ready within %d s: see %s" % (READY_S, log_path))


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


def add_arguments(ap):
    """The options both drivers take."""
    ap.add_argument("--python", required=True, help="runs ComfyUI; needs aiohttp (the pack's routes)")
    ap.add_argument("--tool", required=True)
    ap.add_argument("--front-end-root", required=True)
    ap.add_argument("--label", required=True)
    ap.add_argument("--shots", required=True)
    ap.add_argument("--browser-python", default=sys.executable)
    ap.add_argument("--verdict-timeout", type=float, default=900)


def drive(a, tmp, comfyui, flags, workflow, expect_fix, after=None):
    """Installs the pack into `comfyui` (a copy inside `tmp`), starts it with `flags` and the
    frontend from an environment without PYTORCH_CUDA_ALLOC_CONF (ComfyUI's cuda_malloc step
    sets it in its own process), runs the browser checks, then `after(server, log_path)` while
    the server still runs where they held (its exit status counts too); returns the exit
    status (tmp removed when every check held)."""
    tool = os.path.abspath(a.tool)
    subprocess.run([tool, "extension", "install", "--comfyui", comfyui], check=True)
    port = free_port()
    url = "http://127.0.0.1:%d" % port
    # A login name that is also a word of ComfyUI's code: the report warns of it, in the panel.
    env = dict(os.environ, VRAMBISECT_EXTENSION_TOOL=tool, USER="model", LOGNAME="model")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    log_path = os.path.join(tmp, "comfyui.log")
    log = open(log_path, "wb")
    server = subprocess.Popen([os.path.abspath(a.python), "main.py", *flags, "--listen", "127.0.0.1", "--port",
                               str(port), "--front-end-root", os.path.abspath(a.front_end_root)],
                              cwd=comfyui, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    status = 1
    try:
        wait_ready(server, url, log_path)
        status = subprocess.call([a.browser_python, os.path.join(HERE, "browser.py"), "--url", url,
                                  "--workflow", workflow, "--expect-outcome", "oom",
                                  "--expect-fix=" + expect_fix, "--shots", a.shots,
                                  "--label", a.label, "--verdict-timeout", str(a.verdict_timeout)])
        if status == 0 and after is not None:
            log.flush()
            status = after(server, log_path)
    finally:
        stop(server)
        log.close()
        subprocess.run([tool, "extension", "remove", "--comfyui", comfyui], check=False)
    if status == 0:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print("kept for a look: " + tmp)
    return status
