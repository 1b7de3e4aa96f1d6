"""The extension on Windows, in the portable build's layout: run by the embeddable CPython of a
``ComfyUI_windows_portable`` folder (``python_embeded``, the stand-in as ``ComfyUI``, a
``run_nvidia_gpu.bat``) that ``scripts/windows-extension-check.sh`` lays out, with the
vrambisect package and ``vrambisect.exe`` where pip puts them in ``python_embeded``.

The routes' tests of tests/extension/test_routes.py that make sense on Windows run here too
(hostile requests, status, scan, report); then what only Windows has: the launch line is the
``.bat``'s python line, Cancel ends the bisect and every ComfyUI it started (Ctrl-Break to its
group, or where no console is shared, the bisect ended and its Job Object with it) and the
resume line goes on, and a diagnosis that outlived its ComfyUI is found by its process number
(OpenProcess) and stopped.

    python_embeded\\python.exe -s -m unittest test_windows   (VRAMBISECT_PORTABLE=the folder)
"""

import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import zipfile
from ctypes import wintypes

import test_routes
from test_routes import Host, Log, RoutesTest, core

PORTABLE = os.environ.get("VRAMBISECT_PORTABLE", "")


def under_wine():
    try:
        return hasattr(ctypes.WinDLL("ntdll"), "wine_get_version")
    except (OSError, AttributeError):
        return False


if os.name == "nt" and under_wine():
    # Wine 8 lacks CopyFile2, which Python 3.12's shutil.copy2 calls where _winapi has it (and
    # wine aborts the process): without it, shutil copies as before 3.12. A wine gap; the tests'
    # copies only, the extension copies nothing.
    import _winapi

    if hasattr(_winapi, "CopyFile2"):
        del _winapi.CopyFile2
BAT_LINE = r".\python_embeded\python.exe -s ComfyUI\main.py --windows-standalone-build"

# The tests of test_routes.py that need no Unix process groups, /proc or sh.
SHARED = [
    "test_a_post_from_another_origin_or_none_is_refused",
    "test_dns_rebinding_is_refused_on_a_loopback_server",
    "test_dns_rebinding_reads_nothing_from_any_route",
    "test_loose_inputs_are_refused",
    "test_only_json_naming_an_action_is_taken",
    "test_downloads_are_only_the_reports_written",
    "test_status_names_the_tool_and_this_servers_flags",
    "test_scan_reads_this_servers_log_and_the_prompts_error",
    "test_a_failure_is_reported_as_it_happened_without_a_diagnosis",
    "test_a_report_replaced_by_a_link_or_not_written_here_is_not_served",
]


class PROCESSENTRY32W(ctypes.Structure):
    _fields_ = [("dwSize", wintypes.DWORD), ("cntUsage", wintypes.DWORD), ("th32ProcessID", wintypes.DWORD),
                ("th32DefaultHeapID", ctypes.c_size_t), ("th32ModuleID", wintypes.DWORD),
                ("cntThreads", wintypes.DWORD), ("th32ParentProcessID", wintypes.DWORD),
                ("pcPriClassBase", ctypes.c_long), ("dwFlags", wintypes.DWORD), ("szExeFile", ctypes.c_wchar * 260)]


def processes():
    """{pid: (parent pid, image name)} of every process now (Toolhelp32)."""
    k = ctypes.WinDLL("kernel32", use_last_error=True)
    k.CreateToolhelp32Snapshot.restype = wintypes.HANDLE
    k.CreateToolhelp32Snapshot.argtypes = (wintypes.DWORD, wintypes.DWORD)
    k.Process32FirstW.argtypes = (wintypes.HANDLE, ctypes.POINTER(PROCESSENTRY32W))
    k.Process32NextW.argtypes = (wintypes.HANDLE, ctypes.POINTER(PROCESSENTRY32W))
    k.CloseHandle.argtypes = (wintypes.HANDLE,)
    snap = k.CreateToolhelp32Snapshot(2, 0)  # TH32CS_SNAPPROCESS
    out = {}
    try:
        entry = PROCESSENTRY32W()
        entry.dwSize = ctypes.sizeof(entry)
        ok = k.Process32FirstW(snap, ctypes.byref(entry))
        while ok:
            out[entry.th32ProcessID] = (entry.th32ParentProcessID, entry.szExeFile)
            ok = k.Process32NextW(snap, ctypes.byref(entry))
    finally:
        k.CloseHandle(snap)
    return out


def descendants(pid):
    """The processes started by pid and by them, alive now: {pid: image name}."""
    table = processes()
    found, todo = {}, [pid]
    while todo:
        parent = todo.pop()
        for child, (ppid, exe) in table.items():
            if ppid == parent and child not in found and child != pid:
                found[child] = exe
                todo.append(child)
    return found


@unittest.skipUnless(os.name == "nt" and PORTABLE, "needs Windows (or wine) and VRAMBISECT_PORTABLE")
class PortableTest(RoutesTest):
    """The routes served by a ComfyUI of the portable build: this Python is its python_embeded."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="vb-ext-win-")
        self.comfyui = os.path.join(PORTABLE, "ComfyUI")
        self.user = os.path.join(self.comfyui, "user")
        shutil.rmtree(os.path.join(self.user, "vrambisect"), ignore_errors=True)
        self.set_scenario(None)
        with open(test_routes.OOM_LOG, encoding="utf-8") as f:
            self.log = Log(f.read())
        # The .bat's flags, as ComfyUI's sys.argv has them.
        self.host = Host(self.comfyui, self.user, ["--windows-standalone-build"])
        self.ext = core.Extension(self.host, self.log)
        self.loop = test_routes.asyncio.new_event_loop()
        self.client = self.loop.run_until_complete(self._client())

    def set_scenario(self, name):
        target = os.path.join(self.comfyui, "scenario.json")
        shutil.copy(os.path.join(self.comfyui, "examples", name) if name else
                    os.path.join(test_routes.FAKE, "scenario.json"), target)

    def test_this_is_the_portable_layout(self):
        self.assertTrue(sys.executable.lower().endswith("\\python_embeded\\python.exe"), sys.executable)
        self.assertNotIn("VRAMBISECT_EXTENSION_TOOL", os.environ, "the program is found as the wheel installs it")
        self.assertTrue(self.ext.tool.state()["ok"], self.ext.tool.state())
        with open(os.path.join(PORTABLE, "run_nvidia_gpu.bat"), encoding="utf-8") as f:
            self.assertIn(BAT_LINE, f.read())

    def test_the_verdict_gives_the_bat_line(self):
        status, body, _ = self.request("POST", "/vrambisect/diagnose", {"prompt_id": "p-1"})
        self.assertEqual(status, 202, body)
        d = self.wait_done(timeout=300)["diagnosis"]
        self.assertEqual(d["state"], "done", d)
        v = d["verdict"]
        self.assertEqual(v["fixing_flags"], ["--disable-dynamic-vram"], v)
        self.assertTrue(v["launch"]["where"].startswith("run_nvidia_gpu.bat"), v["launch"])
        self.assertEqual(v["launch"]["line"], BAT_LINE + " --disable-dynamic-vram", v["launch"])
        status, rep, _ = self.request("POST", "/vrambisect/report", {})
        self.assertEqual(status, 200, rep)
        status, content, _ = self.request("GET", "/vrambisect/report/" + rep["name"], headers={"Origin": None})
        self.assertEqual(status, 200)
        path = os.path.join(self.tmp, "r.zip")
        with open(path, "wb") as f:
            f.write(content)
        with zipfile.ZipFile(path) as z:
            self.assertIn("ISSUE.md", z.namelist())

    def wait_for_comfyui(self, pid, timeout=120):
        """The processes the bisect started, once its ComfyUI (a python.exe) runs."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            found = descendants(pid)
            if any(exe.lower() == "python.exe" for exe in found.values()):
                return found
            time.sleep(0.2)
        self.fail("the bisect started no ComfyUI in %d s" % timeout)

    def assert_all_gone(self, pid, started):
        deadline = time.time() + 60
        while time.time() < deadline and (core._alive(pid) or any(core._alive(p) for p in started)):
            time.sleep(0.2)
        self.assertFalse(core._alive(pid), "the bisect is gone")
        left = {p: exe for p, exe in started.items() if core._alive(p)}
        self.assertEqual(left, {}, "every process the bisect started is gone")
        self.assertEqual(descendants(pid), {})

    def resume(self, line):
        """The panel's resume line, as the user pastes it (the runs no longer hang)."""
        self.set_scenario(None)
        self.assertTrue(line.startswith('"%s" -m vrambisect bisect --resume ' % sys.executable) or
                        line.startswith("%s -m vrambisect bisect --resume " % sys.executable), line)
        done = subprocess.run(line, capture_output=True, text=True, timeout=300, cwd=PORTABLE)
        said = done.stdout + done.stderr
        self.assertIn("--disable-dynamic-vram", said, said[-2000:])
        session = line.split("--resume ", 1)[1].strip().strip('"')
        with open(os.path.join(session, "result.json"), encoding="utf-8") as f:
            result = json.load(f)
        self.assertEqual(result["verdict"]["fixing_flags"], ["--disable-dynamic-vram"], result["verdict"])

    def test_cancel_ends_the_bisect_and_every_comfyui_and_the_resume_line_goes_on(self):
        self.set_scenario("hang-on-load.json")
        status, body, _ = self.request("POST", "/vrambisect/diagnose", {"prompt_id": "p-1"})
        self.assertEqual(status, 202, body)
        d = self.wait_first_run()
        pid = d.proc.pid
        self.assertTrue(core._alive(pid))
        self.assertTrue(core._is_bisect(pid, d.session, d.argv[0]))
        self.assertFalse(core._is_bisect(pid, d.session, sys.executable), "another program's image is not it")
        started = self.wait_for_comfyui(pid)
        status, body, _ = self.request("POST", "/vrambisect/cancel", {})
        self.assertEqual(status, 200, body)
        done = self.wait_done(timeout=120)["diagnosis"]
        self.assertEqual(done["state"], "cancelled", done)
        self.assert_all_gone(pid, started)
        self.assertIn("--resume", done["resume"] or "", done)
        self.resume(done["resume"])

    def test_a_diagnosis_that_outlives_its_comfyui_is_found_and_stopped(self):
        self.set_scenario("hang-on-load.json")
        # A first server starts it and ends at once (TerminateProcess: no exit handler).
        code = (
            "import os, sys, time\n"
            "sys.path.insert(0, %r)\n"
            "import test_routes as t\n"
            "host = t.Host(%r, %r, ['--windows-standalone-build'])\n"
            "ext = t.core.Extension(host, t.Log('log'))\n"
            "ext.diagnose('p-1')\n"
            "session = ext.diagnosis.session\n"
            "deadline = time.time() + 120\n"
            "while time.time() < deadline and not os.path.isfile(os.path.join(session, 'progress.json')):\n"
            "    time.sleep(0.1)\n"
            "print(ext.diagnosis.proc.pid, flush=True)\n"
            "os._exit(9)\n"
        ) % (os.path.dirname(os.path.abspath(__file__)), self.comfyui, self.user)
        first = subprocess.run([sys.executable, "-s", "-c", code], capture_output=True, text=True, timeout=180)
        self.assertEqual(first.returncode, 9, first.stderr)
        pid = int(first.stdout.split()[0])
        self.assertTrue(core._alive(pid), "the bisect outlived the server that started it")
        started = self.wait_for_comfyui(pid)
        status, body, _ = self.request("GET", "/vrambisect/status", headers={"Origin": None})
        self.assertEqual(body["diagnosis"]["state"], "orphaned", body)
        status, refused, _ = self.request("POST", "/prompt", {"prompt": {}})
        self.assertEqual(status, 400, "prompts are held back while it runs")
        status, body, _ = self.request("POST", "/vrambisect/cancel", {})
        self.assertEqual(status, 200, body)
        self.assert_all_gone(pid, started)
        done = self.wait_done()["diagnosis"]
        self.assertEqual(done["state"], "cancelled", done)
        status, _, _ = self.request("POST", "/prompt", {"prompt": {}})
        self.assertEqual(status, 200, "prompts are taken again")
        self.resume(done["resume"])


def load_tests(loader, standard, pattern):
    """The shared tests and this module's own; elsewhere than Windows, one skip."""
    suite = unittest.TestSuite()
    if not (os.name == "nt" and PORTABLE):
        suite.addTest(PortableTest("test_this_is_the_portable_layout"))
        return suite
    for name in SHARED:
        suite.addTest(RoutesTest(name))
    for name in sorted(n for n in PortableTest.__dict__ if n.startswith("test_")):
        suite.addTest(PortableTest(name))
    return suite


if __name__ == "__main__":
    unittest.main()
