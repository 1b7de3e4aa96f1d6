"""The extension's server routes, through a real aiohttp server, with a real vrambisect program
(``VRAMBISECT_EXTENSION_TOOL``) diagnosing the stand-in ComfyUI (``fixtures/fake-comfyui``).

ComfyUI itself is replaced by a host object (its history, queue and /free) so that every
request, hostile ones first, can be sent without a GPU or torch. The same routes run in the real
ComfyUI in tests/extension/browser.py.

    VRAMBISECT_EXTENSION_TOOL=target/debug/vrambisect python -m unittest discover tests/extension
"""

import asyncio
import glob
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
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


def _group_alive(pid):
    try:
        os.killpg(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


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

    def restart(self):
        """This server's extension made anew (as at ComfyUI's start), with its routes."""
        self.loop.run_until_complete(self.client.close())
        self.ext = core.Extension(self.host, self.log)
        self.client = self.loop.run_until_complete(self._client())

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

    def test_dns_rebinding_reads_nothing_from_any_route(self):
        # A report that exists, so that its route would have something to give.
        status, rep, _ = self.request("POST", "/vrambisect/report", {"prompt_id": "p-1"})
        self.assertEqual(status, 200, rep)
        port = self.client.port
        routes_all = [("GET", "/vrambisect/status"), ("GET", "/vrambisect/report/" + rep["name"]),
                      ("POST", "/vrambisect/scan"), ("POST", "/vrambisect/diagnose"),
                      ("POST", "/vrambisect/cancel"), ("POST", "/vrambisect/report")]
        rebound = [
            # A browser's same-origin request from the rebound page: its own name, no Origin on a GET.
            {"Host": "evil.example:%d" % port, "Origin": None},
            {"Host": "evil.example:%d" % port, "Origin": "http://evil.example:%d" % port},
            {"Host": "127.0.0.1.nip.io:%d" % port, "Origin": None},
        ]
        for method, path in routes_all:
            for headers in rebound:
                status, body, _ = self.request(method, path, {"prompt_id": "p-1"} if method == "POST" else None,
                                               headers)
                self.assertEqual(status, 403, (method, path, headers, body))
        # A browser says another site asked: refused even with this server's own Host.
        for method, path in routes_all[:2]:
            status, _, _ = self.request(method, path, headers={"Origin": None, "Sec-Fetch-Site": "cross-site"})
            self.assertEqual(status, 403, path)
        self.assertIsNone(self.ext.diagnosis)
        # The same GETs from this server's page are answered.
        status, _, _ = self.request("GET", "/vrambisect/status", headers={"Origin": None, "Sec-Fetch-Site": "same-origin"})
        self.assertEqual(status, 200)
        # A server that listens beyond loopback cannot know the names it is reached by.
        self.assertTrue(core.host_allowed({"Host": "my-box.lan:8188"}, False))
        self.assertFalse(core.host_allowed({"Host": "my-box.lan:8188"}, True))
        self.assertFalse(core.host_allowed({}, True))

    def test_status_and_reports_carry_no_path_but_the_resume_line(self):
        status, body, _ = self.request("GET", "/vrambisect/status", headers={"Origin": None})
        self.assertNotIn(self.tmp, json.dumps(body))
        status, rep, _ = self.request("POST", "/vrambisect/report", {"prompt_id": "p-1"})
        self.assertEqual(status, 200, rep)
        self.assertNotIn(self.tmp, json.dumps(rep))
        self.assertEqual(rep["template"], "https://github.com/Comfy-Org/ComfyUI/issues/new?template=bug-report.yml")
        # Names are not guessable: 128 random bits after the time.
        status, again, _ = self.request("POST", "/vrambisect/report", {"prompt_id": "p-1"})
        self.assertNotEqual(rep["name"][-36:], again["name"][-36:])
        guessed = rep["name"][:-36] + "0" * 32 + ".zip"
        status, _, _ = self.request("GET", "/vrambisect/report/" + guessed, headers={"Origin": None})
        self.assertEqual(status, 404)

    def test_a_report_replaced_by_a_link_or_not_written_here_is_not_served(self):
        status, rep, _ = self.request("POST", "/vrambisect/report", {"prompt_id": "p-1"})
        self.assertEqual(status, 200, rep)
        reports = os.path.join(self.user, "vrambisect", "reports")
        secret = os.path.join(self.tmp, "secret.txt")
        with open(secret, "w") as f:
            f.write("private")
        path = os.path.join(reports, rep["name"])
        os.remove(path)
        os.symlink(secret, path)
        status, body, _ = self.request("GET", "/vrambisect/report/" + rep["name"], headers={"Origin": None})
        self.assertEqual(status, 404, body)
        # A file of the right shape that this server did not write (another server's, planted).
        planted = "vrambisect-report-20261206-101010-" + "a" * 32 + ".zip"
        with open(os.path.join(reports, planted), "wb") as f:
            f.write(b"PK")
        status, _, _ = self.request("GET", "/vrambisect/report/" + planted, headers={"Origin": None})
        self.assertEqual(status, 404)
        # A folder of reports that is itself a link.
        status, rep, _ = self.request("POST", "/vrambisect/report", {"prompt_id": "p-1"})
        moved = os.path.join(self.tmp, "elsewhere")
        os.rename(reports, moved)
        os.symlink(moved, reports)
        status, _, _ = self.request("GET", "/vrambisect/report/" + rep["name"], headers={"Origin": None})
        self.assertEqual(status, 404)

    def test_loose_inputs_are_refused(self):
        status, body, _ = self.request("POST", "/vrambisect/report", {"prompt_id": "not-in-history"})
        self.assertEqual(status, 404, body)
        self.assertIn("not in this server's history", body["error"]["message"])
        self.assertFalse(os.path.isdir(os.path.join(self.user, "vrambisect", "reports"))
                         and os.listdir(os.path.join(self.user, "vrambisect", "reports")), "no bundle written")
        for bad in (7, 7.5, True, ["p-1"], {"a": 1}, "../x"):
            for path in ("/vrambisect/scan", "/vrambisect/report", "/vrambisect/diagnose"):
                status, body, _ = self.request("POST", path, {"prompt_id": bad})
                self.assertEqual(status, 400, (path, bad, body))
                self.assertEqual(body["error"]["message"].count("\n"), 0)

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
        self.assertNotIn("session", body, "no path of this machine in what the panel gets")
        folder = os.path.dirname(self.ext.diagnosis.session)
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
        # The line starts ComfyUI as the user reaches it: the networking flags stay.
        self.assertTrue(v["launch"]["line"].endswith("main.py --listen 127.0.0.1 --port 8188 --disable-dynamic-vram"),
                        v["launch"])
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

    def test_the_runs_of_an_install_with_the_pack_are_not_held_back_by_it(self):
        # The pack installed in the install it diagnoses, as `vrambisect extension install`
        # puts it: each run's ComfyUI loads it too, finds the diagnosis under way in the same
        # user folder, and must take the run's own prompt.
        tool = os.environ["VRAMBISECT_EXTENSION_TOOL"]
        subprocess.run([tool, "extension", "install", "--comfyui", self.comfyui], check=True,
                       capture_output=True)
        self.host.argv = []
        status, body, _ = self.request("POST", "/vrambisect/diagnose", {"prompt_id": "p-1"})
        self.assertEqual(status, 202, body)
        d = self.wait_done()["diagnosis"]
        self.assertEqual(d["state"], "done", d)
        self.assertEqual(d["verdict"]["kind"], "fixed_by", d)
        self.assertEqual(d["verdict"]["fixing_flags"], ["--disable-dynamic-vram"], d)
        rejected = glob.glob(os.path.join(self.ext.diagnosis.session, "runs", "*", "rejected-*.json"))
        self.assertEqual(rejected, [], "no run's prompt was refused")
        # A process standing for a bisect of that session that outlived its server: another
        # ComfyUI of this install holds prompts back for it, a run of it does not.
        session = self.ext.diagnosis.session
        stand = subprocess.Popen([sys.executable, "-c", "import time; print(1, flush=True); time.sleep(60)", session],
                                 stdout=subprocess.PIPE)
        self.addCleanup(stand.stdout.close)
        self.addCleanup(stand.wait)
        self.addCleanup(stand.kill)
        stand.stdout.readline()  # its command line is its own (after exec)
        data = {"state": "running", "pid": stand.pid, "server_pid": stand.pid + 1, "session": session}
        run = core.Extension(self.host, self.log, tool=core.Tool(self.host.python, env={core.DIAGNOSIS_VAR: session}))
        other = core.Extension(self.host, self.log, tool=core.Tool(self.host.python, env={}))
        self.assertEqual(other._orphan_of(data), stand.pid)
        self.assertIsNone(run._orphan_of(data))

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
        if "verdict" in done:
            self.assertEqual(done["verdict"]["kind"], "incomplete", done)
        # Read back after a restart, it is still a cancelled diagnosis.
        again = core.Extension(self.host, self.log).status()["diagnosis"]
        self.assertEqual(again["state"], "cancelled", again)
        self.assertEqual(again["resume"], done["resume"])
        self.assertTrue(os.path.isfile(os.path.join(d.session, "session.json")))
        # The bisect's process group (it and the ComfyUI it started) is gone.
        with self.assertRaises(ProcessLookupError):
            os.killpg(d.proc.pid, 0)
        status, body, _ = self.request("POST", "/vrambisect/cancel", {})
        self.assertEqual(status, 409)

    def test_the_runs_get_the_environment_comfyui_was_started_with(self):
        # What ComfyUI's cuda_malloc step does in its own process, after it started (so not in
        # the start environment the system keeps).
        with open("/proc/self/environ", "rb") as f:
            self.assertNotIn(b"PYTORCH_CUDA_ALLOC_CONF=", f.read())
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
        self.addCleanup(os.environ.pop, "PYTORCH_CUDA_ALLOC_CONF", None)
        self.restart()
        self.host.argv = ["--disable-cuda-malloc"]
        self.assertEqual(self.ext.tool.changed_env, {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"})
        self.assertNotIn("PYTORCH_CUDA_ALLOC_CONF", self.ext.tool.child_env())
        status, body, _ = self.request("POST", "/vrambisect/diagnose", {"prompt_id": "p-1"})
        self.assertEqual(status, 202, body)
        d = self.wait_done()["diagnosis"]
        self.assertEqual(d["state"], "done", d)
        records = sorted(glob.glob(os.path.join(self.ext.diagnosis.session, "runs", "*", "record.json")))
        with_flag = 0
        for path in records:
            with open(path, encoding="utf-8") as f:
                rec = json.load(f)
            # (The search also tries removing the user's flag.)
            if "--disable-cuda-malloc" not in rec["argv"]:
                continue
            with_flag += 1
            # The stand-in's cuda_malloc step, as ComfyUI's: an inherited backend would win.
            self.assertEqual(rec["effective"]["allocator"], "native", path)
        self.assertGreater(with_flag, 0, records)
        status, rep, _ = self.request("POST", "/vrambisect/report", {})
        self.assertEqual(status, 200, rep)
        status, content, _ = self.request("GET", "/vrambisect/report/" + rep["name"], headers={"Origin": None})
        path = os.path.join(self.tmp, "env.zip")
        with open(path, "wb") as f:
            f.write(content)
        with zipfile.ZipFile(path) as z:
            env = json.loads(z.read("environment.json"))
            issue = z.read("ISSUE.md").decode()
        self.assertNotIn("PYTORCH_CUDA_ALLOC_CONF", env["env"]["value"], env["env"])
        self.assertEqual(env["env_set_by_comfyui"]["value"], {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"})
        self.assertIn("Set by ComfyUI itself", issue)

    def test_a_failed_prompt_gives_the_bisect_this_servers_log(self):
        status, body, _ = self.request("POST", "/vrambisect/diagnose", {"prompt_id": "p-1"})
        self.assertEqual(status, 202, body)
        argv = self.ext.diagnosis.argv
        i = argv.index("--failed-log")
        self.assertLess(i, argv.index("--"), argv)
        log = argv[i + 1]
        self.assertEqual(os.path.dirname(log), os.path.dirname(self.ext.diagnosis.session))
        with open(log, encoding="utf-8") as f:
            self.assertEqual(f.read(), self.log.value)
        self.assertEqual(self.wait_done()["diagnosis"]["state"], "done")
        # A prompt whose entry shows no error: the log says nothing of it.
        entry = json.loads(json.dumps(self.host.entries["p-1"]))
        entry["prompt"][1] = "p-2"
        entry["status"] = {"status_str": "success", "completed": True,
                           "messages": [["execution_start", {"prompt_id": "p-2"}]]}
        self.host.entries["p-2"] = entry
        status, body, _ = self.request("POST", "/vrambisect/diagnose", {"prompt_id": "p-2"})
        self.assertEqual(status, 202, body)
        self.assertNotIn("--failed-log", self.ext.diagnosis.argv)
        self.assertEqual(self.wait_done()["diagnosis"]["state"], "done")

    def test_the_launch_line_keeps_the_flags_the_runs_left_out(self):
        self.host.argv = ["--listen", "0.0.0.0", "--port", "8189", "--disable-auto-launch"]
        self.restart()
        status, body, _ = self.request("POST", "/vrambisect/diagnose", {"prompt_id": "p-1"})
        self.assertEqual(status, 202, body)
        argv = self.ext.diagnosis.argv
        for left_out in ("--listen", "0.0.0.0", "--port", "8189", "--disable-auto-launch"):
            self.assertNotIn(left_out, argv, "the runs start their own ComfyUI on loopback")
        v = self.wait_done()["diagnosis"]["verdict"]
        self.assertEqual(v["kind"], "fixed_by", v)
        line = v["launch"]["line"]
        self.assertTrue(line.endswith("main.py --listen 0.0.0.0 --port 8189 --disable-auto-launch --disable-dynamic-vram"),
                        line)

    def test_old_results_are_removed_with_a_word_and_resumable_ones_kept(self):
        root = os.path.join(self.user, "vrambisect", "diagnoses")
        for i in range(12):
            folder = os.path.join(root, "20260101-0000%02d" % i)
            os.makedirs(os.path.join(folder, "session"))
            with open(os.path.join(folder, "session", "session.json"), "w") as f:
                f.write("{}")
            if i not in (0, 3):  # 0 and 3 were cancelled: they can be resumed
                with open(os.path.join(folder, "bisect.json"), "w") as f:
                    json.dump({"verdict": {"kind": "fixed_by"}}, f)
        status, body, _ = self.request("POST", "/vrambisect/diagnose", {"prompt_id": "p-1"})
        self.assertEqual(status, 202, body)
        self.wait_done()
        left = sorted(os.listdir(root))
        self.assertIn("20260101-000000", left)
        self.assertIn("20260101-000003", left)
        status, body, _ = self.request("GET", "/vrambisect/status", headers={"Origin": None})
        removed = body["removed"]["diagnoses"]
        # The newest 10 stay (the new one among them), and an older one that can be resumed.
        self.assertEqual(removed["names"], ["20260101-000001", "20260101-000002"])
        self.assertEqual(removed["kept"], 10)
        self.assertEqual(len(left), 11, left)

    def test_a_failure_is_reported_as_it_happened_without_a_diagnosis(self):
        status, body, _ = self.request("POST", "/vrambisect/report", {})
        self.assertEqual(status, 409, body)
        status, body, _ = self.request("POST", "/vrambisect/report", {"prompt_id": "../x"})
        self.assertEqual(status, 400, body)
        status, rep, _ = self.request("POST", "/vrambisect/report", {"prompt_id": "p-1"})
        self.assertEqual(status, 200, rep)
        self.assertFalse(rep["diagnosed"])
        self.assertRegex(rep["name"], r"^vrambisect-report-\d{8}-\d{6}-failure-[0-9a-f]{32}\.zip$")
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

    def start_in_a_first_comfyui(self, scenario=None):
        """A diagnosis started by another ComfyUI process, which is then stopped with SIGTERM
        (Python's default: no atexit): its bisect goes on with no server watching it."""
        if scenario:
            shutil.copy(os.path.join(self.comfyui, "examples", scenario), os.path.join(self.comfyui, "scenario.json"))
        code = (
            "import os, signal, sys, time\n"
            "sys.path.insert(0, %r)\n"
            "import test_routes as t\n"
            "host = t.Host(%r, %r, [])\n"
            "ext = t.core.Extension(host, t.Log('log'))\n"
            "d = ext.diagnose('p-1')\n"
            "session = ext.diagnosis.session\n"
            "deadline = time.time() + 60\n"
            "while time.time() < deadline and not os.path.isfile(os.path.join(session, 'progress.json')):\n"
            "    time.sleep(0.1)\n"
            "print(ext.diagnosis.proc.pid, flush=True)\n"
            "os.kill(os.getpid(), signal.SIGTERM)\n"
        ) % (os.path.dirname(os.path.abspath(__file__)), self.comfyui, self.user)
        first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        self.assertEqual(first.returncode, -signal.SIGTERM, first.stderr)
        pid = int(first.stdout.split()[0])
        self.addCleanup(_kill_group, pid)
        return pid

    def test_a_diagnosis_that_outlives_its_comfyui_holds_prompts_back_and_cancels_with_its_resume_line(self):
        pid = self.start_in_a_first_comfyui("hang-on-load.json")
        # This server (a new process of ComfyUI) finds it still running.
        status, body, _ = self.request("GET", "/vrambisect/status", headers={"Origin": None})
        self.assertEqual(body["diagnosis"]["state"], "orphaned", body)
        self.assertTrue(body["running"], body)
        self.assertIn("--resume", body["diagnosis"]["resume"] or "", body)
        status, refused, _ = self.request("POST", "/prompt", {"prompt": {}})
        self.assertEqual(status, 400, "prompts are held back while the orphan runs")
        self.assertEqual(refused["error"]["type"], "vrambisect_diagnosis_running")
        status, body, _ = self.request("POST", "/vrambisect/diagnose", {"prompt_id": "p-1"})
        self.assertEqual(status, 409, body)
        self.assertIn("still running", body["error"]["message"])
        status, body, _ = self.request("POST", "/vrambisect/report", {})
        self.assertEqual(status, 409, body)
        status, body, _ = self.request("POST", "/vrambisect/cancel", {})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["state"], "stopping", body)
        self.assertIn("--resume", body["resume"] or "", body)
        deadline = time.time() + 60
        while time.time() < deadline and _group_alive(pid):
            time.sleep(0.1)
        self.assertFalse(_group_alive(pid), "the bisect and the ComfyUI it started are gone")
        done = self.wait_done()["diagnosis"]
        self.assertEqual(done["state"], "cancelled", done)
        self.assertIn("--resume", done["resume"], done)
        session = done["resume"].split("--resume ", 1)[1].strip('"')
        self.assertTrue(os.path.isfile(os.path.join(session, "journal.jsonl")) or
                        os.path.isfile(os.path.join(session, "session.json")))
        status, _, _ = self.request("POST", "/prompt", {"prompt": {}})
        self.assertEqual(status, 200, "prompts are taken again")

    def test_a_diagnosis_that_outlives_its_comfyui_is_read_back_with_its_verdict(self):
        pid = self.start_in_a_first_comfyui()
        deadline = time.time() + 120
        while time.time() < deadline and _group_alive(pid):
            time.sleep(0.2)
        done = self.wait_done()["diagnosis"]
        self.assertEqual(done["state"], "done", done)
        self.assertEqual(done["verdict"]["kind"], "fixed_by", done)
        self.assertTrue(done["reportable"], done)

    def test_a_process_that_took_an_orphans_number_is_not_taken_for_it(self):
        other = subprocess.Popen(["sleep", "60"], start_new_session=True)
        self.addCleanup(other.kill)
        os.makedirs(os.path.join(self.user, "vrambisect"), exist_ok=True)
        with open(os.path.join(self.user, "vrambisect", "last-diagnosis.json"), "w") as f:
            json.dump({"state": "running", "pid": other.pid, "server_pid": other.pid + 1,
                       "prompt_id": "p-1", "session": os.path.join(self.tmp, "s")}, f)
        status, body, _ = self.request("GET", "/vrambisect/status", headers={"Origin": None})
        self.assertEqual(body["diagnosis"]["state"], "stopped", body)
        status, _, _ = self.request("POST", "/prompt", {"prompt": {}})
        self.assertEqual(status, 200)
        status, body, _ = self.request("POST", "/vrambisect/cancel", {})
        self.assertEqual(status, 409, body)
        self.assertIsNone(other.poll(), "an unrelated process is never signalled")

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


    def test_a_program_without_facts_is_said_and_asked_again_later(self):
        # A program that runs and is new enough by its version, but has no `extension facts`
        # (a build from before it): its JSON error, exit 2.
        stub = os.path.join(self.tmp, "no-facts")
        with open(stub, "w") as f:
            f.write("#!/bin/sh\n"
                    "if [ \"$1\" = --version ]; then echo \"vrambisect %s\"; exit 0; fi\n"
                    "echo '{\"error\": {\"exit_code\": 2, \"message\": \"unrecognized subcommand facts\"}}'\n"
                    "exit 2\n" % core.VERSION)
        os.chmod(stub, 0o755)
        now = [0.0]
        tool = core.Tool(self.host.python, env={"VRAMBISECT_EXTENSION_TOOL": stub}, clock=lambda: now[0])
        self.ext.tool = tool
        status, body, _ = self.request("GET", "/vrambisect/status", headers={"Origin": None})
        self.assertEqual(status, 200, body)
        self.assertIsNone(body["flags"])
        self.assertIsNone(body["outcomes"])
        with self.assertRaises(core.Refused) as e:
            self.ext.flags()
        self.assertIn("unrecognized subcommand facts", e.exception.message)
        self.assertIn("pip install vrambisect==" + core.VERSION, e.exception.message)
        self.assertEqual(len(e.exception.message.splitlines()), 1)
        status, body, _ = self.request("POST", "/vrambisect/diagnose", {"prompt_id": "p-1"})
        self.assertEqual(status, 500, body)
        # The failure is said again without asking until RECHECK_S has passed; then the
        # program is asked again.
        shutil.copy(os.environ["VRAMBISECT_EXTENSION_TOOL"], stub)
        with self.assertRaises(core.Refused):
            self.ext.flags()
        now[0] += core.Tool.RECHECK_S + 1
        self.assertEqual(self.ext.flags(), self.ext.facts()["flags"]["tested"])
        self.assertIsNotNone(self.ext.outcomes())


class PureTest(unittest.TestCase):
    def test_listen(self):
        self.assertTrue(core.listens_on_loopback_only([]))
        self.assertTrue(core.listens_on_loopback_only(["--listen", "127.0.0.1"]))
        self.assertFalse(core.listens_on_loopback_only(["--listen"]))
        self.assertFalse(core.listens_on_loopback_only(["--listen", "0.0.0.0"]))
        self.assertFalse(core.listens_on_loopback_only(["--listen=127.0.0.1,192.168.1.2"]))

    def test_the_start_environment_is_what_the_process_was_given(self):
        code = ("import json, os, sys\n"
                "sys.path.insert(0, %r)\n"
                "import test_routes as t\n"
                "os.environ['PYTORCH_CUDA_ALLOC_CONF'] += ',backend:cudaMallocAsync'\n"
                "os.environ['FROM_A_NODE_PACK'] = '1'\n"
                "del os.environ['REMOVED_LATER']\n"
                "start, known = t.core.start_environment()\n"
                "tool = t.core.Tool(sys.executable)\n"
                "print(json.dumps([start.get('PYTORCH_CUDA_ALLOC_CONF'), 'FROM_A_NODE_PACK' in start,\n"
                "                  start.get('REMOVED_LATER'), known, tool.changed_env,\n"
                "                  tool.child_env().get('PYTORCH_CUDA_ALLOC_CONF'),\n"
                "                  json.loads(tool.report_env()['VRAMBISECT_COMFYUI_SET_ENV'])]))\n"
                ) % os.path.dirname(os.path.abspath(__file__))
        env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True", REMOVED_LATER="x")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        changed = {"FROM_A_NODE_PACK": "1", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,backend:cudaMallocAsync",
                   "REMOVED_LATER": None}
        self.assertEqual(json.loads(out.stdout), ["expandable_segments:True", False, "x", True, changed,
                                                  "expandable_segments:True", changed])
        # Where the start cannot be read, the environment now is given and nothing is claimed.
        env, known = core.start_environment(proc_environ="/nonexistent/environ")
        self.assertFalse(known)
        self.assertEqual(env, dict(os.environ))

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
