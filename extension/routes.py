"""The extension's routes in ComfyUI's aiohttp server, and what it needs from ComfyUI (its
history, its queue, ``/free``, its log, its folders).

Every request is treated as hostile: a body is at most 4 KiB of JSON naming one of the tool's
own actions; a state-changing route is a POST that must come from a page this server served
(core.same_origin, besides ComfyUI's own origin check); a read must name this server by a
loopback name where it listens on loopback only (core.host_allowed) and come from no other
site; the blocking work runs off the event loop, one of each kind at a time.
"""

import asyncio
import atexit
import json
import logging
import os
import sys
import threading
import time

from aiohttp import web

from . import core

MAX_BODY = 4096
FREE_WAIT_S = 60


class ComfyHost(core.Host):
    """This ComfyUI, as core.Extension sees it."""

    def __init__(self, server):
        import folder_paths

        self.server = server
        self.python = sys.executable
        self.comfyui_dir = os.path.dirname(os.path.abspath(folder_paths.__file__))
        self.user_dir = folder_paths.get_user_directory()
        self.argv = list(sys.argv[1:])

    def known_flags(self):
        """The launch flags this ComfyUI accepts (its own argparse parser), or None."""
        try:
            from comfy.cli_args import parser

            return sorted(o for o in parser._option_string_actions if o.startswith("--"))
        except Exception:  # noqa: BLE001 - no such parser here: nothing known
            return None

    def history(self, prompt_id):
        found = self.server.prompt_queue.get_history(prompt_id=prompt_id)
        return found.get(prompt_id) if isinstance(found, dict) else None

    def queue_busy(self):
        q = self.server.prompt_queue
        running, pending = q.get_current_queue_volatile() if hasattr(q, "get_current_queue_volatile") \
            else q.get_current_queue()
        return len(running) + len(pending)

    def free(self):
        """ComfyUI's POST /free with both flags, waited for (the prompt worker takes the flags
        as soon as it is woken), then what this process still holds on its device."""
        q = self.server.prompt_queue
        q.set_flag("unload_models", True)
        q.set_flag("free_memory", True)
        deadline = time.monotonic() + FREE_WAIT_S
        freed = False
        # The worker takes the flags first and unloads after (main.py's prompt_worker): wait
        # for the flags to be taken, then for the loaded models to be gone.
        while time.monotonic() < deadline:
            flags = q.get_flags(reset=False)
            if "unload_models" not in flags and "free_memory" not in flags:
                break
            time.sleep(0.1)
        while time.monotonic() < deadline:
            if not loaded_models():
                freed = True
                break
            time.sleep(0.1)
        time.sleep(0.5)  # the cache is emptied right after the models are unloaded
        held = device_memory()
        held["freed"] = freed
        return held


def loaded_models():
    """How many models ComfyUI holds loaded (0 when that cannot be known)."""
    try:
        import comfy.model_management as mm

        return len(mm.current_loaded_models)
    except Exception:  # noqa: BLE001 - no ComfyUI model manager here: nothing known loaded
        return 0


def device_memory():
    """What this ComfyUI holds on its device after /free: PyTorch's reserved memory and the
    device's free and total (the CUDA context itself, some hundreds of MiB, is not in
    PyTorch's count)."""
    try:
        import comfy.model_management as mm
        import torch

        dev = mm.get_torch_device()
        out = {"device": str(dev)}
        if getattr(dev, "type", "") == "cuda":
            out["torch_reserved_bytes"] = int(torch.cuda.memory_reserved(dev))
            free, total = torch.cuda.mem_get_info(dev)
            out["device_free_bytes"] = int(free)
            out["device_total_bytes"] = int(total)
        return out
    except Exception as e:  # noqa: BLE001 - a reading that fails is said, not fatal
        return {"device": None, "error": str(e)}


def _reply(status, data):
    return web.json_response(data, status=status, headers={"Cache-Control": "no-store"})


def _refused(e):
    return _reply(e.status, {"error": {"kind": e.kind, "message": e.message}})


def _guarded(handler):
    """An unexpected error is one line of JSON, not a traceback in ComfyUI's log (which the
    panel's own reading of that log would then count)."""
    async def wrapped(self, request):
        try:
            return await handler(self, request)
        except core.Refused as e:
            return _refused(e)
        except Exception as e:  # noqa: BLE001 - a hostile request must not leave a traceback
            logging.warning("vrambisect: %s %s failed: %s", request.method, request.path, type(e).__name__)
            return _refused(core.Refused(500, "vrambisect's extension failed: %s" % type(e).__name__, "internal"))
    wrapped.__name__ = handler.__name__
    return wrapped


class Routes:
    def __init__(self, ext):
        self.ext = ext
        # One of each at a time (core.Extension keeps diagnoses to one by itself).
        self.busy = {name: threading.Lock() for name in ("scan", "report")}

    async def _body(self, request):
        if request.content_length is not None and request.content_length > MAX_BODY:
            raise core.Refused(413, "request too large", "bad_request")
        raw = await request.content.read(MAX_BODY + 1)
        if len(raw) > MAX_BODY:
            raise core.Refused(413, "request too large", "bad_request")
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise core.Refused(400, "the request body is not JSON", "bad_request")
        if not isinstance(body, dict):
            raise core.Refused(400, "the request body is not a JSON object", "bad_request")
        unknown = sorted(set(body) - {"prompt_id"})
        if unknown:
            raise core.Refused(400, "unknown field(s): %s" % ", ".join(unknown[:5])[:200], "bad_request")
        return body

    def _check_get(self, request):
        """A read is answered only to this server's own page: on a server that listens on
        loopback only, the Host must be a loopback name (a page of another site whose name was
        pointed at 127.0.0.1, DNS rebinding, sends its own name and no Origin); a read that
        carries an Origin must come from this server's origin; a browser's cross-site request
        is refused. A navigation or a download of this server's page (no Origin) is not."""
        if not core.host_allowed(request.headers, self.ext.loopback):
            raise core.Refused(403, "refused: this server is reached by another name than its own", "origin")
        if request.headers.get("Origin") and not core.same_origin(request.headers, self.ext.loopback):
            raise core.Refused(403, "refused: another site's page", "origin")
        if (request.headers.get("Sec-Fetch-Site") or "").strip().lower() == "cross-site":
            raise core.Refused(403, "refused: another site's page", "origin")

    def _check_post(self, request):
        if not core.same_origin(request.headers, self.ext.loopback):
            raise core.Refused(403, "refused: this request did not come from this ComfyUI's page", "origin")
        ctype = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            raise core.Refused(415, "send JSON (Content-Type: application/json)", "bad_request")

    async def _blocking(self, name, fn, *args):
        """fn off the event loop; with a name, one of that kind at a time."""
        lock = self.busy.get(name)
        if lock is not None and not lock.acquire(blocking=False):
            raise core.Refused(429, "a %s is already under way on this server" % name, "busy")
        try:
            return await asyncio.get_running_loop().run_in_executor(None, fn, *args)
        finally:
            if lock is not None:
                lock.release()

    # Each handler's refusals (core.Refused) become their status and one line (_guarded).
    @_guarded
    async def status(self, request):
        self._check_get(request)
        return _reply(200, await self._blocking(None, self.ext.status))

    @_guarded
    async def scan(self, request):
        self._check_post(request)
        body = await self._body(request)
        return _reply(200, await self._blocking("scan", self.ext.scan, body.get("prompt_id")))

    @_guarded
    async def diagnose(self, request):
        self._check_post(request)
        body = await self._body(request)
        return _reply(202, await self._blocking(None, self.ext.diagnose, body.get("prompt_id")))

    @_guarded
    async def cancel(self, request):
        self._check_post(request)
        await self._body(request)
        return _reply(200, self.ext.cancel())

    @_guarded
    async def report(self, request):
        self._check_post(request)
        body = await self._body(request)
        return _reply(200, await self._blocking("report", self.ext.report, body.get("prompt_id")))

    @_guarded
    async def download(self, request):
        self._check_get(request)
        name = request.match_info.get("name", "")
        data = await self._blocking(None, self.ext.report_file, name)
        return web.Response(body=data, headers={
            "Content-Disposition": 'attachment; filename="%s"' % name,
            "Content-Type": "application/zip",
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
        })

    def guard(self):
        """A middleware refusing prompts while a diagnosis runs, in ComfyUI's own error shape
        (the frontend shows its message)."""
        ext = self.ext

        @web.middleware
        async def vrambisect_prompt_guard(request, handler):
            if request.method == "POST" and request.path in ("/prompt", "/api/prompt"):
                message = ext.guard_prompt()
                if message:
                    return web.json_response({
                        "error": {"type": "vrambisect_diagnosis_running", "message": message,
                                  "details": "", "extra_info": {}},
                        "node_errors": {},
                    }, status=400)
            return await handler(request)

        return vrambisect_prompt_guard

    def add(self, routes):
        """Under /vrambisect/; ComfyUI serves each route under /api/ too (add_routes)."""
        routes.get("/vrambisect/status")(self.status)
        routes.post("/vrambisect/scan")(self.scan)
        routes.post("/vrambisect/diagnose")(self.diagnose)
        routes.post("/vrambisect/cancel")(self.cancel)
        routes.post("/vrambisect/report")(self.report)
        routes.get("/vrambisect/report/{name}")(self.download)


def register(server):
    """Adds the routes and the prompt guard to ComfyUI's server (called at import, before the
    server starts)."""
    try:
        import app.logger as comfy_logger
    except ImportError:
        comfy_logger = None
    host = ComfyHost(server)
    log = core.LogCapture(comfy_logger, fallback_file=os.path.join(host.user_dir, "comfyui.log"))
    ext = core.Extension(host, log)
    routes = Routes(ext)
    routes.add(server.routes)
    try:
        server.app.middlewares.append(routes.guard())
        ext.guard_installed = True
    except (AttributeError, RuntimeError) as e:
        logging.warning("vrambisect: prompts cannot be held back during a diagnosis here (%s)", e)
    atexit.register(ext.shutdown)
    return ext
