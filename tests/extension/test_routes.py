"""The extension's server routes, through a real aiohttp server, with a real vrambisect program
(``VRAMBISECT_EXTENSION_TOOL``) diagnosing the stand-in ComfyUI (``fixtures/fake-comfyui``).

ComfyUI itself is replaced by a host object (its history, queue and /free) so that every
request, hostile ones first, can be sent without a GPU or torch. The same routes run in the real
ComfyUI in tests/extension/browser.py.

    VRAMBISECT_EXTENSION_TOOL=target/debug/vrambisect python -m unittest discover tests/extension
"""

import asyncio
import importlib.util
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import unittest
import zipfile

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAKE = os.path.join(ROOT, "fixtures", "fake-comfyui")
WORKFLOW = os.path.join(ROOT, "fixtures", "workflows", "sd15_txt2img.json")
OOM_LOG = os.path.join(ROOT, "fixtures", "logs", "real", "05-vbar-oom-traceback-tail-portable.log")


def load_pack():
    """The pack as ComfyUI imports it: a package named after its folder."""
    path = os.path.join(ROOT, "extension", "__init__.py")
    spec = importlib.util.spec_from_file_location("comfyui_vrambisect", path,
                                                  submodule_search_locations=[os.path.dirname(path)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["comfyui_vrambisect"] = module
    spec.loader.exec_module(module)
    from comfyui_vrambisect import core, routes  # noqa: E402
    return module, core, routes


pack, core, routes = load_pack()


class Queue:
    def __init__(self):
        self.flags = {}
        self.running = []
        self.pending = []

    def set_flag(self, name, value):
        self.flags[name] = value

    def get_flags(self, reset=True):
        out = dict(self.flags)
        if reset:
            self.flags = {}
        return out


class Host(core.Host):
    """ComfyUI as the extension sees it: a history holding one failed prompt (the stand-in's
    workflow, as ComfyUI keeps it) and a prompt worker that takes /free's flags."""

    def __init__(self, comfyui, user, argv):
        self.python = sys.executable
        self.comfyui_dir = comfyui
        self.user_dir = user
        self.argv = argv
        self.queue = Queue()
        with open(WORKFLOW, encoding="utf-8") as f:
            prompt = json.load(f)
        self.entries = {
            "p-1": {
                "prompt": [0, "p-1", prompt, {"extra_pnginfo": {"workflow": {"nodes": [], "links": []}},
                                              "client_id": "c"}, ["9"]],
                "outputs": {},
                "status": {"status_str": "error", "completed": False, "messages": [
                    ["execution_start", {"prompt_id": "p-1"}],
                    ["execution_error", {"prompt_id": "p-1", "node_id": "3", "node_type": "KSampler",
                                         "exception_type": "torch.OutOfMemoryError",
                                         "exception_message": "CUDA out of memory. Tried to allocate 2.00 GiB",
                                         "traceback": ["..."], "current_inputs": {"secret": "x"}}],
                ]},
            }
        }
        self.freed = 0

    def history(self, prompt_id):
        return self.entries.get(prompt_id)

    def queue_busy(self):
        return len(self.queue.running) + len(self.queue.pending)

    def free(self):
        self.freed += 1
        return {"device": "cpu", "freed": True}


class Log:
    def __init__(self, text):
        self.value = text

    def text(self):
        return self.value


class RoutesTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="vb-ext-")
        self.comfyui = os.path.join(self.tmp, "ComfyUI")
        shutil.copytree(FAKE, self.comfyui, ignore=shutil.ignore_patterns("__pycache__", "tests"))
        self.user = os.path.join(self.comfyui, "user")
        with open(OOM_LOG, encoding="utf-8") as f:
            self.log = Log(f.read())
        self.host = Host(self.comfyui, self.user, ["--listen", "127.0.0.1", "--port", "8188", "--highvram"])
        self.ext = core.Extension(self.host, self.log)
        self.loop = asyncio.new_event_loop()
        self.client = self.loop.run_until_complete(self._client())

    def tearDown(self):
        d = self.ext.diagnosis
        if d is not None and d.alive():
            d.cancel()
            d.proc.wait(timeout=60)
        self.loop.run_until_complete(self.client.close())
        self.loop.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    async def _client(self):
        r = routes.Routes(self.ext)
        table = web.RouteTableDef()
        r.add(table)

        async def post_prompt(request):
            return web.json_response({"prompt_id": "new", "number": 1, "node_errors": {}})

        table.post("/prompt")(post_prompt)
        app = web.Application(middlewares=[r.guard()])
        app.add_routes(table)
        client = TestClient(TestServer(app, host="127.0.0.1"))
        await client.start_server()
        return client

    def request(self, method, path, body=None, headers=None, raw=None):
        here = "127.0.0.1:%d" % self.client.port
        h = {"Origin": "http://" + here, "Host": here, "Content-Type": "application/json"}
        h.update(headers or {})
        h = {k: v for k, v in h.items() if v is not None}
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)

        async def go():
            resp = await self.client.request(method, path, data=data, headers=h)
            content = await resp.read()
            return resp.status, content, resp.headers

        status, content, headers = self.loop.run_until_complete(go())
        try:
            return status, json.loads(content), headers
        except ValueError:
            return status, content, headers

    def wait_first_run(self, timeout=60):
        """The diagnosis under way, once its first run has started (its progress.json)."""
        d = self.ext.diagnosis
        deadline = time.time() + timeout
        while time.time() < deadline and not os.path.isfile(os.path.join(d.session, "progress.json")):
            time.sleep(0.1)
        return d

    def wait_done(self, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            status, body, _ = self.request("GET", "/vrambisect/status", headers={"Origin": None})
            if not body["running"]:
                return body
            time.sleep(0.2)
        self.fail("the diagnosis did not end in %d s" % timeout)

    # -- hostile requests ----------------------------------------------------------------
    def test_a_post_from_another_origin_or_none_is_refused(self):
        for headers in ({"Origin": "http://evil.example"}, {"Origin": None}, {"Origin": "null"},
                        {"Origin": "http://127.0.0.1:9999"}):
            for path in ("/vrambisect/scan", "/vrambisect/diagnose", "/vrambisect/cancel", "/vrambisect/report"):
                status, body, _ = self.request("POST", path, {"prompt_id": "p-1"}, headers)
                self.assertEqual(status, 403, (path, headers, body))
        self.assertIsNone(self.ext.diagnosis)

    def test_dns_rebinding_is_refused_on_a_loopback_server(self):
        port = self.client.port
        headers = {"Host": "evil.example:%d" % port, "Origin": "http://evil.example:%d" % port}
        status, _, _ = self.request("POST", "/vrambisect/scan", {}, headers)
        self.assertEqual(status, 403)
        self.assertFalse(core.same_origin({"Host": "evil.example:8188", "Origin": "http://evil.example:8188"}, True))
        self.assertTrue(core.same_origin({"Host": "192.168.1.5:8188", "Origin": "http://192.168.1.5:8188"}, False))
        self.assertTrue(core.same_origin({"Host": "localhost:8188", "Origin": "http://localhost:8188"}, True))
        self.assertTrue(core.same_origin({"Host": "[::1]:8188", "Origin": "http://[::1]:8188"}, True))
        # A name that merely begins like a loopback address is a name anyone can point anywhere.
        for name in ("127.evil.example", "127.0.0.1.nip.io"):
            self.assertFalse(core.same_origin({"Host": name + ":8188", "Origin": "http://%s:8188" % name}, True), name)
            self.assertFalse(core.listens_on_loopback_only(["--listen", name]), name)

    def test_only_json_naming_an_action_is_taken(self):
        status, body, _ = self.request("POST", "/vrambisect/scan", raw="prompt_id=p-1",
                                       headers={"Content-Type": "application/x-www-form-urlencoded"})
        self.assertEqual(status, 415, body)
        status, body, _ = self.request("POST", "/vrambisect/scan", raw="{not json")
        self.assertEqual(status, 400, body)
        status, body, _ = self.request("POST", "/vrambisect/scan", raw="[1]")
        self.assertEqual(status, 400, body)
        status, body, _ = self.request("POST", "/vrambisect/scan", raw="x" * 5000)
        self.assertEqual(status, 413, body)
        for extra in ({"path": "/etc/passwd"}, {"flags": ["--cpu"]}, {"command": "rm -rf /"},
                      {"workflow": {}}, {"comfyui": "/tmp"}):
            status, body, _ = self.request("POST", "/vrambisect/diagnose", dict(extra, prompt_id="p-1"))
            self.assertEqual(status, 400, (extra, body))
            self.assertIn("unknown field", body["error"]["message"])
        status, body, _ = self.request("POST", "/vrambisect/scan", raw="[" * 4000)
        self.assertEqual(status, 400, body)
        for bad in ("../../etc/passwd", "p-1; ls", "", "a" * 65, 7, None, ["p-1"], "p-1\n"):
            status, body, _ = self.request("POST", "/vrambisect/diagnose", {"prompt_id": bad})
            self.assertEqual(status, 400, (bad, body))
        self.assertIsNone(self.ext.diagnosis)

    def test_downloads_are_only_the_reports_written(self):
        secret = os.path.join(self.user, "vrambisect", "reports")
        os.makedirs(secret)
        with open(os.path.join(self.user, "vrambisect", "last-diagnosis.json"), "w") as f:
            f.write("{}")
        for name in ("../last-diagnosis.json", "..%2Flast-diagnosis.json", "vrambisect-report-x.zip",
                     "vrambisect-report-20261202-101010.zip", "%2e%2e%2f%2e%2e%2fcomfyui.log"):
            status, _, _ = self.request("GET", "/vrambisect/report/" + name, headers={"Origin": None})
            self.assertEqual(status, 404, name)

    # -- what a user does ----------------------------------------------------------------
    def test_status_names_the_tool_and_this_servers_flags(self):
        status, body, headers = self.request("GET", "/vrambisect/status", headers={"Origin": None})
        self.assertEqual(status, 200)
        self.assertTrue(body["tool"]["ok"], body)
        self.assertEqual(body["flags"], ["--highvram"])
        self.assertFalse(body["running"])
        self.assertEqual(headers.get("Cache-Control"), "no-store")
        status, _, _ = self.request("GET", "/vrambisect/status", headers={"Origin": "http://evil.example"})
        self.assertEqual(status, 403)

    def test_scan_reads_this_servers_log_and_the_prompts_error(self):
        status, body, _ = self.request("POST", "/vrambisect/scan", {"prompt_id": "p-1"})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["reading"]["outcome"], "vbar")
        self.assertEqual(body["reading"]["known_issues"][0]["id"], "vbar_allocation_failed")
        self.assertEqual(body["error"]["node_type"], "KSampler")
        self.assertNotIn("current_inputs", body["error"])
        self.assertEqual(body["flags"], ["--highvram"])
        self.assertIsNone(body["known_flags"], "this host cannot say which flags it accepts")
        self.host.known_flags = lambda: ["--cpu", "--highvram"]
        status, body, _ = self.request("POST", "/vrambisect/scan", {})
        self.assertEqual(body["known_flags"], ["--cpu", "--highvram"])
        self.log.value = ""
        status, body, _ = self.request("POST", "/vrambisect/scan", {})
        self.assertEqual(status, 409, body)

    def test_diagnose_runs_the_bisect_to_its_verdict_and_holds_prompts_back(self):
        self.host.argv = ["--listen", "127.0.0.1", "--port", "8188"]
        self.host.queue.pending = ["x"]
        status, body, _ = self.request("POST", "/vrambisect/diagnose", {"prompt_id": "p-1"})
        self.assertEqual(status, 409, body)
        self.assertEqual(body["error"]["kind"], "queue_busy")
        self.host.queue.pending = []
        status, body, _ = self.request("POST", "/vrambisect/diagnose", {"prompt_id": "unknown"})
        self.assertEqual(status, 404, body)

        status, body, _ = self.request("POST", "/vrambisect/diagnose", {"prompt_id": "p-1"})
        self.assertEqual(status, 202, body)
        self.assertEqual(self.host.freed, 1, "ComfyUI's models are unloaded first")
        folder = os.path.dirname(body["session"])
        with open(os.path.join(folder, "prompt.json"), encoding="utf-8") as f:
            self.assertEqual(json.load(f), self.host.entries["p-1"]["prompt"][2])
        self.assertTrue(os.path.isfile(os.path.join(folder, "workflow.json")))
        status, refused, _ = self.request("POST", "/prompt", {"prompt": {}})
        self.assertEqual(status, 400)
        self.assertEqual(refused["error"]["type"], "vrambisect_diagnosis_running")
        status, second, _ = self.request("POST", "/vrambisect/diagnose", {"prompt_id": "p-1"})
        self.assertEqual(status, 409, second)

        done = self.wait_done()
        d = done["diagnosis"]
        self.assertEqual(d["state"], "done", d)
        v = d["verdict"]
        self.assertEqual(v["kind"], "fixed_by")
        self.assertEqual(v["fixing_flags"], ["--disable-dynamic-vram"])
        self.assertTrue(v["launch"]["line"].endswith("main.py --disable-dynamic-vram"), v["launch"])
        self.assertEqual(d["progress"]["runs_done"], v["runs_total"])
        self.assertEqual(d["gpu_held_by_this_comfyui"]["device"], "cpu")
        status, _, _ = self.request("POST", "/prompt", {"prompt": {}})
        self.assertEqual(status, 200, "prompts are taken again")

        # After a restart: a new extension reads the last verdict back.
        again = core.Extension(self.host, self.log).status()["diagnosis"]
        self.assertEqual(again["verdict"]["statement"], v["statement"])

        status, rep, _ = self.request("POST", "/vrambisect/report", {})
        self.assertEqual(status, 200, rep)
        self.assertTrue(rep["report"]["redaction"]["enabled"])
        status, content, headers = self.request("GET", "/vrambisect/report/" + rep["name"], headers={"Origin": None})
        self.assertEqual(status, 200)
        self.assertIn("attachment", headers["Content-Disposition"])
        path = os.path.join(self.tmp, "dl.zip")
        with open(path, "wb") as f:
            f.write(content)
        with zipfile.ZipFile(path) as z:
            self.assertIn("ISSUE.md", z.namelist())
        status, _, _ = self.request("GET", "/vrambisect/report/" + rep["name"], headers={"Origin": "http://evil.example"})
        self.assertEqual(status, 403)

    def test_cancel_stops_the_bisect_and_its_comfyui_and_keeps_the_resume_line(self):
        shutil.copy(os.path.join(self.comfyui, "examples", "hang-on-load.json"),
                    os.path.join(self.comfyui, "scenario.json"))
        self.host.argv = []
        status, body, _ = self.request("POST", "/vrambisect/diagnose", {"prompt_id": "p-1"})
        self.assertEqual(status, 202, body)
        d = self.wait_first_run()
        # The panel's "run 1 of about N": the plan is known from the first run on, without a
        # terminal too.
        progress = self.ext.status()["diagnosis"]["progress"]
        self.assertEqual(progress["run"], 1, progress)
        self.assertGreater(progress["runs_planned"], 1, progress)
        status, body, _ = self.request("POST", "/vrambisect/cancel", {})
        self.assertEqual(status, 200, body)
        done = self.wait_done(timeout=90)["diagnosis"]
        self.assertEqual(done["state"], "cancelled", done)
        self.assertIn("--resume", done["resume"])
        self.assertTrue(os.path.isfile(os.path.join(d.session, "session.json")))
        # The bisect's process group (it and the ComfyUI it started) is gone.
        with self.assertRaises(ProcessLookupError):
            os.killpg(d.proc.pid, 0)
        status, body, _ = self.request("POST", "/vrambisect/cancel", {})
        self.assertEqual(status, 409)

    def test_a_failure_is_reported_as_it_happened_without_a_diagnosis(self):
        status, body, _ = self.request("POST", "/vrambisect/report", {})
        self.assertEqual(status, 409, body)
        status, body, _ = self.request("POST", "/vrambisect/report", {"prompt_id": "../x"})
        self.assertEqual(status, 400, body)
        status, rep, _ = self.request("POST", "/vrambisect/report", {"prompt_id": "p-1"})
        self.assertEqual(status, 200, rep)
        self.assertFalse(rep["diagnosed"])
        self.assertTrue(rep["name"].endswith("-failure.zip"), rep["name"])
        self.assertEqual(rep["report"]["source_kind"], "failure")
        self.assertEqual(rep["report"]["runs"], 0)
        status, content, _ = self.request("GET", "/vrambisect/report/" + rep["name"], headers={"Origin": None})
        self.assertEqual(status, 200)
        path = os.path.join(self.tmp, "failure.zip")
        with open(path, "wb") as f:
            f.write(content)
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            history = z.read("history.json").decode()
            issue = z.read("ISSUE.md").decode()
        for want in ("ISSUE.md", "comfyui.log", "logscan.json", "workflow.json", "history.json", "environment.json"):
            self.assertIn(want, names)
        self.assertNotIn('"secret": "x"', history, "current_inputs redacted as report redacts them")
        self.assertIn("torch.OutOfMemoryError in KSampler", issue)
        self.assertIsNone(self.ext.diagnosis, "nothing was rerun")

    def test_a_bisect_that_cannot_run_is_a_failed_diagnosis_with_its_reason(self):
        os.remove(os.path.join(self.comfyui, "main.py"))
        status, body, _ = self.request("POST", "/vrambisect/diagnose", {"prompt_id": "p-1"})
        self.assertEqual(status, 202, body)
        d = self.wait_done()["diagnosis"]
        self.assertEqual(d["state"], "failed", d)
        self.assertNotIn("verdict", d)
        self.assertIn("main.py", d["message"])
        self.assertIsNone(d["resume"], "no session to resume")

    def test_a_diagnosis_left_running_by_an_earlier_comfyui_is_not_doubled(self):
        import subprocess
        # A program that SIGINT ends (as it ends the bisect's group).
        orphan = subprocess.Popen(["sleep", "60"], start_new_session=True)
        try:
            os.makedirs(os.path.join(self.user, "vrambisect"), exist_ok=True)
            with open(os.path.join(self.user, "vrambisect", "last-diagnosis.json"), "w") as f:
                json.dump({"state": "running", "pid": orphan.pid, "server_pid": orphan.pid + 1,
                           "prompt_id": "p-1", "session": "/nowhere"}, f)
            status, body, _ = self.request("GET", "/vrambisect/status", headers={"Origin": None})
            self.assertEqual(body["diagnosis"]["state"], "orphaned", body)
            status, body, _ = self.request("POST", "/vrambisect/diagnose", {"prompt_id": "p-1"})
            self.assertEqual(status, 409, body)
            self.assertIn("still running", body["error"]["message"])
            status, body, _ = self.request("POST", "/vrambisect/cancel", {})
            self.assertEqual(status, 200, body)
            self.assertEqual(orphan.wait(timeout=10), -signal.SIGINT)
            status, body, _ = self.request("GET", "/vrambisect/status", headers={"Origin": None})
            self.assertEqual(body["diagnosis"]["state"], "stopped", body)
        finally:
            if orphan.poll() is None:
                orphan.kill()

    def test_comfyui_exiting_stops_the_diagnosis(self):
        shutil.copy(os.path.join(self.comfyui, "examples", "hang-on-load.json"),
                    os.path.join(self.comfyui, "scenario.json"))
        status, body, _ = self.request("POST", "/vrambisect/diagnose", {"prompt_id": "p-1"})
        self.assertEqual(status, 202, body)
        d = self.wait_first_run()
        self.ext.shutdown()
        with self.assertRaises(ProcessLookupError):
            os.killpg(d.proc.pid, 0)
        deadline = time.time() + 10
        while time.time() < deadline and d.alive():
            time.sleep(0.05)
        last = core.Extension(self.host, self.log).status()["diagnosis"]
        self.assertEqual(last["state"], "cancelled", last)

    def test_a_missing_tool_is_looked_for_again(self):
        now = [0.0]
        env = {"VRAMBISECT_EXTENSION_TOOL": os.path.join(self.tmp, "later")}
        tool = core.Tool(self.host.python, env=env, clock=lambda: now[0])
        self.assertFalse(tool.state()["found"])
        shutil.copy(os.environ["VRAMBISECT_EXTENSION_TOOL"], env["VRAMBISECT_EXTENSION_TOOL"])
        self.assertFalse(tool.state()["found"], "not looked for again at once")
        now[0] += core.Tool.RECHECK_S + 1
        self.assertTrue(tool.state()["ok"], "found once installed")

    def test_a_missing_or_old_tool_says_how_to_install_it(self):
        tool = core.Tool(self.host.python, env={"VRAMBISECT_EXTENSION_TOOL": os.path.join(self.tmp, "none")})
        state = tool.state()
        self.assertFalse(state["ok"])
        self.assertIn("-m pip install vrambisect==" + core.VERSION, state["message"])
        self.assertEqual(len(state["message"].splitlines()), 1)
        old = os.path.join(self.tmp, "old-vrambisect")
        with open(old, "w") as f:
            f.write("#!/bin/sh\necho vrambisect 0.0.1\n")
        os.chmod(old, 0o755)
        state = core.Tool(self.host.python, env={"VRAMBISECT_EXTENSION_TOOL": old}).state()
        self.assertFalse(state["ok"])
        self.assertIn("0.0.1 is older", state["message"])
        self.ext.tool = tool
        status, body, _ = self.request("POST", "/vrambisect/diagnose", {"prompt_id": "p-1"})
        self.assertEqual(status, 409)
        self.assertIn("pip install", body["error"]["message"])


class PureTest(unittest.TestCase):
    def test_server_flags_drop_networking_only(self):
        argv = ["--listen", "--port", "8000", "--highvram", "--enable-cors-header", "--tls-keyfile", "k",
                "--listen=0.0.0.0", "--front-end-root", "/x", "--reserve-vram", "2", "--disable-auto-launch"]
        self.assertEqual(core.server_flags(argv), ["--highvram", "--reserve-vram", "2"])
        self.assertEqual(core.server_flags(["--listen", "0.0.0.0", "--cpu"]), ["--cpu"])

    def test_listen(self):
        self.assertTrue(core.listens_on_loopback_only([]))
        self.assertTrue(core.listens_on_loopback_only(["--listen", "127.0.0.1"]))
        self.assertFalse(core.listens_on_loopback_only(["--listen"]))
        self.assertFalse(core.listens_on_loopback_only(["--listen", "0.0.0.0"]))
        self.assertFalse(core.listens_on_loopback_only(["--listen=127.0.0.1,192.168.1.2"]))

    def test_launch_lines(self):
        py = r"C:\AI\ComfyUI_windows_portable\python_embeded\python.exe"
        kind = core.install_kind(py, r"C:\AI\ComfyUI_windows_portable\ComfyUI", ["--windows-standalone-build"])
        self.assertEqual(kind, "portable")
        line = core.launch_line(kind, py, "", ["--disable-dynamic-vram"])
        self.assertIn("run_nvidia_gpu.bat", line["where"])
        self.assertEqual(line["line"], r".\python_embeded\python.exe -s ComfyUI\main.py --windows-standalone-build "
                                       "--disable-dynamic-vram")
        self.assertEqual(core.install_kind("/home/u/ComfyUI/venv/bin/python", "/home/u/ComfyUI", []), "python")
        line = core.launch_line("python", "/home/u/My ComfyUI/venv/bin/python", "/home/u/My ComfyUI", ["--cpu"])
        self.assertEqual(line["line"], '"/home/u/My ComfyUI/venv/bin/python" "/home/u/My ComfyUI/main.py" --cpu')
        desk = core.install_kind(r"C:\Users\u\Documents\ComfyUI\.venv\Scripts\python.exe",
                                 r"C:\Users\u\AppData\Local\Programs\ComfyUI\resources\ComfyUI",
                                 ["--base-directory", r"C:\Users\u\Documents\ComfyUI"])
        self.assertEqual(desk, "desktop")
        self.assertIn("Server-Config", core.launch_line(desk, "", "", ["--cpu"])["where"])

    def test_log_capture_follows_comfyuis_deque(self):
        import collections

        class Logger:
            logs = collections.deque(maxlen=4)

            def get_logs(self):
                return self.logs

        lg = Logger()
        lg.logs.append({"t": "2026-01-01T00:00:00.000001", "m": "start\n"})
        cap = core.LogCapture()
        cap.attach(lg, start_thread=False)
        for i in range(3):
            lg.logs.append({"t": "2026-01-01T00:00:01.%06d" % i, "m": "line %d\n" % i})
        cap.poll()
        # A progress line replaced by its next state (ComfyUI pops the last entry), then more
        # lines than the deque holds between two looks: nothing taken twice, nothing older lost.
        lg.logs.append({"t": "2026-01-01T00:00:02.000000", "m": "\r 10%"})
        cap.poll()
        lg.logs.pop()
        lg.logs.append({"t": "2026-01-01T00:00:02.500000", "m": "\r 50%"})
        cap.poll()
        self.assertEqual(cap.text(), "start\nline 0\nline 1\nline 2\n\r 10%\r 50%")


if __name__ == "__main__":
    unittest.main()
