"""The extension's actions, apart from any web framework: read this server's failure, start and
follow a diagnosis (``vrambisect bisect`` on this install), write the bug report bundle.

Nothing here takes a path, a flag or a command from a request: a request only chooses an action
and, for Diagnose, the id of a prompt in this server's own history. Every command it starts is
one a user could type (``logscan``, ``bisect``, ``report``) on this install, with this Python,
this ComfyUI folder and this server's own launch flags. What it writes goes under ComfyUI's user
folder (``user/vrambisect/``).
"""

import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time

# The version of this pack; the vrambisect program must be at least this (the wheel and the
# pack are released together with one version number).
VERSION = "0.1.0"

# A prompt id as ComfyUI makes them (a uuid4) or as API clients send them: letters, digits,
# dashes and underscores only, so that it can never name a file.
PROMPT_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# The names of the bundles this pack writes: the time, then 128 random bits, so that a name
# cannot be guessed. Only the bundles this server wrote are served.
REPORT_NAME = re.compile(r"^vrambisect-report-[0-9]{8}-[0-9]{6}(-failure)?-[0-9a-f]{32}\.zip$")

# Set in the environment of the bisect a diagnosis starts (so in the ComfyUI of each of its
# runs, which loads this pack too where it is installed in the install diagnosed): its session
# folder. The pack in such a run's ComfyUI knows the diagnosis under way as its own runner, not
# as an orphan to hold prompts back for.
DIAGNOSIS_VAR = "VRAMBISECT_DIAGNOSIS"

# How many of each kind of result are kept under user/vrambisect/ (the newest; a diagnosis
# that did not end with a verdict is kept until it is resumed or deleted by hand).
KEEP = {"diagnoses": 10, "reports": 10, "scans": 5, "failures": 5}

# A log kept in memory is capped: the start (ComfyUI's startup block, what the reading needs
# most) and the newest lines.
LOG_TAIL_BYTES = 8 << 20


class Refused(Exception):
    """A request the extension will not carry out: `status` is the HTTP status, `message` one
    line saying what is wrong and what to do."""

    def __init__(self, status, message, kind="refused"):
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind


def start_environment(proc_environ="/proc/self/environ"):
    """The environment this process was started with, before ComfyUI (its cuda_malloc step sets
    ``PYTORCH_CUDA_ALLOC_CONF`` in its own process) or a node pack changed it, as
    (dict, known): known is False where the start cannot be read (then the dict is the
    environment now).

    Linux keeps the start in ``/proc/self/environ``; on Windows ``nt.environ`` is the
    interpreter's copy of it, which assignments to ``os.environ`` do not change.
    """
    if os.name == "nt":
        try:
            import nt

            return {str(k): str(v) for k, v in nt.environ.items()}, True
        except (ImportError, AttributeError):
            return dict(os.environ), False
    try:
        with open(proc_environ, "rb") as f:
            raw = f.read()
    except OSError:
        return dict(os.environ), False
    env = {}
    for item in raw.split(b"\0"):
        key, eq, value = item.partition(b"=")
        if eq and key:
            env.setdefault(os.fsdecode(key), os.fsdecode(value))
    return env, True


def changed_environment(start, now):
    """{name: value now, or None where it was removed} for what this process changed."""
    names = set(start) | set(now)
    return {k: now.get(k) for k in sorted(names) if start.get(k) != now.get(k)}


def same_origin(headers, listen_loopback):
    """Whether a state-changing request comes from a page this server served.

    ComfyUI's own check (``origin_only_middleware``) compares Origin and Host only when Host is
    a loopback name, and is off under ``--enable-cors-header``. Here: a POST must carry an
    Origin whose host and port are the request's Host, whatever the host; and when the server
    listens on loopback only, the Host must be a loopback name, so that a page of another site
    whose name was pointed at 127.0.0.1 (DNS rebinding) is refused too.
    """
    host = (headers.get("Host") or "").strip().lower()
    origin = (headers.get("Origin") or "").strip().lower()
    if not host or not origin or origin == "null":
        return False
    m = re.fullmatch(r"[a-z][a-z0-9+.-]*://([^/?#]+)", origin.rstrip("/"))
    if m is None or m.group(1) != host:
        return False
    return host_allowed(headers, listen_loopback)


def host_allowed(headers, listen_loopback):
    """Whether the Host a request names may reach this server: any, where it listens beyond
    loopback (it cannot know the names it is reached by); a loopback name otherwise."""
    if not listen_loopback:
        return True
    host = (headers.get("Host") or "").strip().lower()
    if not host:
        return False
    name = host.rsplit(":", 1)[0] if not host.startswith("[") else host[1:].split("]")[0]
    return is_loopback_name(name)


def is_loopback_name(name):
    """`localhost` or a loopback IP literal; a DNS name that merely starts with "127." is not."""
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def listens_on_loopback_only(argv):
    """Whether this server's ``--listen`` keeps it on loopback (ComfyUI's default)."""
    value = "127.0.0.1"
    for i, arg in enumerate(argv):
        if arg == "--listen":
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            value = nxt if nxt is not None and not nxt.startswith("-") else "0.0.0.0,::"
        elif arg.startswith("--listen="):
            value = arg.split("=", 1)[1]
    names = [v.strip() for v in value.split(",") if v.strip()]
    return bool(names) and all(is_loopback_name(n) for n in names)


def _quote(arg):
    if arg and re.fullmatch(r"[A-Za-z0-9_@%+=:,./\\-]+", arg):
        return arg
    return '"' + arg.replace('"', '\\"') + '"'


class Tool:
    """The vrambisect program this ComfyUI's Python has (the wheel), or the one an operator named
    with ``VRAMBISECT_EXTENSION_TOOL`` (a program path, for a build from a checkout)."""

    # A program found and new enough stays so while the server runs; a missing one is looked
    # for again at most this often (the user may be installing it now).
    RECHECK_S = 10

    def __init__(self, python, env=None, clock=time.monotonic, start_env=None):
        self.python = python
        self.env = os.environ if env is None else env
        self.clock = clock
        self._state = None
        self._checked = None
        self._facts = {}
        self._facts_failed = None
        # What the programs it starts get: the environment the user started ComfyUI with, not
        # what ComfyUI's process made of it; and what was changed in between, for the bundle.
        if start_env is None:
            start_env, known = start_environment() if env is None else (dict(self.env), True)
        else:
            known = True
        self.start_env = start_env
        self.start_env_known = known
        self.changed_env = changed_environment(start_env, dict(self.env)) if known else {}

    def program(self):
        named = self.env.get("VRAMBISECT_EXTENSION_TOOL")
        if named:
            return named if os.path.isfile(named) else None
        try:
            from vrambisect import find_vrambisect_bin  # the wheel's module
        except ImportError:
            return None
        try:
            return find_vrambisect_bin()
        except (FileNotFoundError, OSError):
            return None

    def install_hint(self):
        return "%s -m pip install vrambisect==%s" % (_quote(self.python), VERSION)

    def state(self):
        """{found, version, ok, message}: whether the program is there and new enough."""
        now = self.clock()
        if self._state is not None and (self._state["ok"] or now - self._checked < self.RECHECK_S):
            return self._state
        self._state, self._checked = self._look(), now
        return self._state

    def _look(self):
        program = self.program()
        if program is None:
            return {"found": False, "version": None, "ok": False,
                    "message": "vrambisect is not installed in this ComfyUI's Python; install it with: "
                    + self.install_hint()}
        try:
            out = subprocess.run([program, "--version"], capture_output=True, text=True, timeout=30,
                                 env=self.child_env())
            version = out.stdout.strip().split()[-1] if out.stdout.strip() else None
        except (OSError, subprocess.SubprocessError):
            version = None
        if version is None:
            return {"found": True, "version": None, "ok": False,
                    "message": "vrambisect is installed but does not run; reinstall it with: " + self.install_hint()}
        if _version_tuple(version) < _version_tuple(VERSION):
            return {"found": True, "version": version, "ok": False,
                    "message": "vrambisect %s is older than this extension (%s); update it with: %s"
                    % (version, VERSION, self.install_hint())}
        return {"found": True, "version": version, "ok": True, "message": None}

    def child_env(self):
        env = dict(self.start_env)
        # Set for this pack's own use (an operator's build from a checkout), not for ComfyUI.
        if self.env.get("VRAMBISECT_EXTENSION_TOOL"):
            env["VRAMBISECT_EXTENSION_TOOL"] = self.env["VRAMBISECT_EXTENSION_TOOL"]
        env["VRAMBISECT_PYTHON"] = self.python
        env["NO_COLOR"] = "1"
        return env

    def report_env(self):
        """child_env, and for ``report`` what ComfyUI's process changed in it (the bundle tells
        those apart from the user's own variables)."""
        env = self.child_env()
        own = {k: v for k, v in self.changed_env.items() if not k.startswith("VRAMBISECT_")}
        if own:
            env["VRAMBISECT_COMFYUI_SET_ENV"] = json.dumps(own, sort_keys=True)
        return env

    def facts(self, comfyui_dir, argv):
        """What the program knows of this server (``vrambisect extension facts``): the
        install's kind, its flags as a diagnosis tests them and those left out, the line that
        starts it with ``argv``, the outcome names and the session folder's file names. An
        answer is kept for each command line; a failure is said again for RECHECK_S seconds
        without asking (the user may be updating the program). Raises Refused."""
        key = (comfyui_dir, tuple(argv))
        known = self._facts.get(key)
        if known is not None:
            return known
        now = self.clock()
        if self._facts_failed is not None and now - self._facts_failed[0] < self.RECHECK_S:
            raise self._facts_failed[1]
        try:
            facts = self._ask_facts(comfyui_dir, argv)
        except Refused as e:
            self._facts_failed = (now, e)
            raise
        self._facts_failed = None
        self._facts[key] = facts
        return facts

    def _ask_facts(self, comfyui_dir, argv):
        state = self.state()
        if not state["ok"]:
            raise Refused(409, state["message"], "tool_missing")
        cmd = self.command("extension", "facts", "--json", "--comfyui", comfyui_dir, "--python", self.python,
                           "--", *argv)
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=60, env=self.child_env(),
                                  cwd=comfyui_dir or None)
        except subprocess.TimeoutExpired:
            raise Refused(504, "vrambisect extension facts took longer than 60 s", "timeout")
        except OSError as e:
            raise Refused(500, "vrambisect could not be started: %s" % (e.strerror or e), "tool_failed")
        try:
            facts = json.loads(done.stdout.decode("utf-8", "replace"))
        except ValueError:
            facts = None
        if done.returncode == 0 and _facts_complete(facts):
            return facts
        said = facts.get("error", {}).get("message") if isinstance(facts, dict) and isinstance(
            facts.get("error"), dict) else None
        if not said:
            err = done.stderr.decode("utf-8", "replace").strip().splitlines()
            said = err[-1] if err else "no answer"
        raise Refused(500, "vrambisect extension facts failed (%s): update vrambisect with: %s"
                      % (said, self.install_hint()), "tool_failed")

    def command(self, *args):
        program = self.program()
        if program is None:
            raise Refused(409, "vrambisect is not installed in this ComfyUI's Python; install it with: "
                          + self.install_hint(), "tool_missing")
        return [program] + list(args)


def _facts_complete(facts):
    """Whether an answer of ``vrambisect extension facts`` has everything this pack reads."""
    def has(d, *keys):
        return isinstance(d, dict) and all(k in d for k in keys)
    return (has(facts, "flags", "launch", "outcomes", "session_files")
            and has(facts["flags"], "tested", "left_out")
            and isinstance(facts["flags"]["tested"], list) and isinstance(facts["flags"]["left_out"], list)
            and has(facts["launch"], "where", "line")
            and isinstance(facts["outcomes"], list)
            and all(has(o, "name", "title", "flags_may_fix") for o in facts["outcomes"])
            and has(facts["session_files"], "bisect")
            and has(facts["session_files"]["bisect"], "spec", "progress"))


def _version_tuple(text):
    parts = []
    for p in text.split("."):
        m = re.match(r"^(\d+)", p)
        parts.append(int(m.group(1)) if m else 0)
    return tuple(parts)


class LogCapture:
    """This server's console output, kept from the moment the pack is imported.

    ComfyUI keeps its recent output in memory (``app.logger``: a deque of the last 300 writes,
    what ``/internal/logs`` serves). Its flush callbacks cannot be shared (``LogInterceptor.flush``
    empties the batch after the first callback, so a second one gets nothing: 0.3.64 and since),
    so the deque is read every ``interval`` seconds and what is new is appended here, capped at
    ``LOG_TAIL_BYTES`` of the newest beside the startup block.
    """

    def __init__(self, logger_module=None, fallback_file=None, interval=0.25):
        self.lock = threading.Lock()
        self.head = []
        self.tail = []
        self.tail_bytes = 0
        self.fallback_file = fallback_file
        self.interval = interval
        self.logs = None
        self.last = None
        self.last_t = ""
        if logger_module is not None:
            self.attach(logger_module)

    def attach(self, logger_module, start_thread=True):
        logs = logger_module.get_logs() if hasattr(logger_module, "get_logs") else None
        if logs is None:
            return
        self.logs = logs
        entries = self._entries()
        self.head = [e["m"] for e in entries]
        if entries:
            self.last, self.last_t = entries[-1], entries[-1].get("t", "")
        if start_thread:
            threading.Thread(target=self._follow, name="vrambisect-log", daemon=True).start()

    def _entries(self):
        for _ in range(10):
            try:
                return [e for e in list(self.logs) if isinstance(e, dict) and isinstance(e.get("m"), str)]
            except RuntimeError:  # appended to while copied
                continue
        return []

    def _follow(self):
        while True:
            time.sleep(self.interval)
            try:
                self.poll()
            except Exception:  # noqa: BLE001 - the capture must never take the server down
                pass

    def poll(self):
        """Takes the entries written since the last look."""
        entries = self._entries()
        with self.lock:
            start = 0
            for i in range(len(entries) - 1, -1, -1):
                if entries[i] is self.last:
                    start = i + 1
                    break
            else:
                # The last entry taken left the deque (evicted, or a progress line replaced by
                # its next state): what is newer than it, by its timestamp.
                start = next((i for i, e in enumerate(entries) if e.get("t", "") > self.last_t), len(entries))
            for e in entries[start:]:
                self.tail.append(e["m"])
                self.tail_bytes += len(e["m"])
            if entries[start:]:
                self.last, self.last_t = entries[-1], entries[-1].get("t", "")
            while self.tail_bytes > LOG_TAIL_BYTES and len(self.tail) > 1:
                self.tail_bytes -= len(self.tail.pop(0))

    def text(self):
        if self.logs is not None:
            self.poll()
            with self.lock:
                return "".join(self.head) + "".join(self.tail)
        if self.fallback_file and os.path.isfile(self.fallback_file):
            with open(self.fallback_file, "r", encoding="utf-8", errors="replace") as f:
                data = f.read()
            return data[-LOG_TAIL_BYTES:]
        return ""


class Host:
    """What the extension needs from the ComfyUI it runs in; the real one wraps
    ``server.PromptServer.instance`` (see routes.py), tests give their own."""

    python = sys.executable
    comfyui_dir = ""
    user_dir = ""
    argv = ()

    def history(self, prompt_id):
        """The history entry of one prompt, or None."""
        raise NotImplementedError

    def known_flags(self):
        """The launch flags this ComfyUI accepts, or None when that cannot be known."""
        return None

    def queue_busy(self):
        """How many prompts are running or waiting."""
        raise NotImplementedError

    def free(self):
        """Unload models and free the cache (ComfyUI's POST /free), and wait until done;
        returns what this process still holds on the GPU as a dict or None."""
        raise NotImplementedError


class Extension:
    """The actions behind the routes. One per server."""

    def __init__(self, host, log, tool=None, clock=time.time):
        self.host = host
        self.log = log
        self.tool = tool or Tool(host.python)
        self.clock = clock
        self.lock = threading.Lock()
        self.diagnosis = None
        self.root = os.path.join(host.user_dir, "vrambisect")
        self.loopback = listens_on_loopback_only(list(host.argv))
        # Whether prompts queued during a diagnosis are refused (routes.py's middleware).
        self.guard_installed = False
        # A diagnosis is being started (between its checks and its process).
        self.starting = False
        # The bundles this server wrote: the only files it serves.
        self.written = set()
        # What the last clean-up of each kind removed, said in the panel.
        self.removed = {}
        # The session of the diagnosis whose run this server is, if it is one.
        self.run_of = self.tool.start_env.get(DIAGNOSIS_VAR) or None

    # -- paths -----------------------------------------------------------------------------
    def _dir(self, *parts):
        path = os.path.join(self.root, *parts)
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise Refused(507, "cannot write in %s (%s): vrambisect keeps its files in ComfyUI's user folder; "
                          "make it writable" % (path, e.strerror or e), "not_writable")
        return path

    def _state_file(self):
        return os.path.join(self.root, "last-diagnosis.json")

    def facts(self, argv=None):
        """The program's facts for this server's command line, or for ``argv`` given."""
        return self.tool.facts(self.host.comfyui_dir, list(self.host.argv if argv is None else argv))

    def flags(self):
        """This server's flags as a diagnosis tests them (the networking and user-folder ones
        left out: its runs start their own ComfyUI on loopback)."""
        return self.facts()["flags"]["tested"]

    def session_file(self, name, session):
        """A file of a bisect's session folder by the program's own name for it (``spec``,
        ``progress``), or None where the program cannot be asked."""
        try:
            return os.path.join(session, self.facts()["session_files"]["bisect"][name])
        except Refused:
            return None

    def outcomes(self):
        """{name: {title, flags_may_fix}} for the panel, or None where the program cannot be
        asked."""
        try:
            return {o["name"]: {"title": o["title"], "flags_may_fix": o["flags_may_fix"]}
                    for o in self.facts()["outcomes"]}
        except Refused:
            return None

    def _resumable(self, path):
        """A diagnosis folder whose session can still be resumed: it got as far as its spec
        and did not end with a verdict."""
        spec = self.session_file("spec", os.path.join(path, "session"))
        if spec is None or not os.path.isfile(spec):
            return False
        result = _read_result(path)
        verdict = result.get("verdict") if result else None
        return verdict is None or verdict.get("kind") == "incomplete"

    def _clean(self, kind, keep=None, room=0):
        """Keeps the newest KEEP[kind] of a kind (less room for one about to be added), and
        any that keep says to (a diagnosis that can still be resumed); a removal of
        diagnoses or reports is remembered for the panel to say."""
        removed = _keep_newest(os.path.join(self.root, kind), KEEP[kind] - room, keep)
        if removed and kind in ("diagnoses", "reports"):
            self.removed[kind] = {"names": removed, "kept": KEEP[kind], "folder": "user/vrambisect/" + kind}
        return removed

    # -- status ----------------------------------------------------------------------------
    def status(self):
        """What the panel shows, and nothing more: no path of this machine but the resume
        line the panel gives the user to copy."""
        with self.lock:
            running = self.diagnosis is not None and self.diagnosis.alive()
            current = self.diagnosis.describe() if self.diagnosis is not None else None
        last = None
        if current is None:
            last = self._read_last()
            running = bool(last and last.get("state") in ("orphaned", "stopping"))
        try:
            flags = self.flags()
        except Refused:
            flags = None
        return {
            "version": VERSION,
            "tool": self.tool.state(),
            "running": running,
            "diagnosis": public_diagnosis(current or last),
            "flags": flags,
            "outcomes": self.outcomes(),
            "holds_prompts": self.guard_installed,
            "removed": self.removed,
        }

    def _read_last(self):
        """The diagnosis an earlier run of this ComfyUI started, as its state file and its
        session folder say now."""
        try:
            with open(self._state_file(), "r", encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict):
            return None
        session = data.get("session") if isinstance(data.get("session"), str) else None
        if session:
            data["resume"] = _resume_line(self, session)
        if data.get("state") != "running":
            return data
        if self._orphan_of(data):
            # ComfyUI ended without stopping it (killed, crashed): it still runs.
            if data.get("cancel_requested"):
                data["state"] = "stopping"
                data["message"] = "stopping the diagnosis started before ComfyUI restarted; every finished run is kept"
            else:
                data["state"] = "orphaned"
                data["message"] = ("this diagnosis was started before ComfyUI restarted and still runs "
                                   "(process %d); Cancel stops it" % data["pid"])
            return data
        # It ended while no server watched it: its own answer is in its folder.
        result = _read_result(os.path.dirname(session)) if session else None
        verdict = result.get("verdict") if result else None
        if verdict is not None:
            data["verdict"] = summarize_verdict(result, self)
        if data.get("cancel_requested") and (verdict is None or verdict.get("kind") == "incomplete"):
            data["state"] = "cancelled"
            data["message"] = "cancelled after ComfyUI restarted"
        elif verdict is not None:
            data["state"] = "done"
        else:
            data["state"] = "stopped"
            data["message"] = ("ComfyUI restarted while the diagnosis ran; resume it with the line below"
                               if data.get("resume") else "ComfyUI restarted while the diagnosis ran")
        return data

    # -- scan ------------------------------------------------------------------------------
    def scan(self, prompt_id=None):
        """logscan's reading of this server's log, with the failed prompt's own error."""
        if prompt_id is not None and (not isinstance(prompt_id, str) or not PROMPT_ID.fullmatch(prompt_id)):
            raise Refused(400, "not a prompt id of this server", "bad_request")
        text = self.log.text()
        if not text.strip():
            raise Refused(409, "this server's log is empty: nothing to read yet", "no_log")
        folder = self._dir("scans")
        path = os.path.join(folder, "comfyui-%s.log" % time.strftime("%Y%m%d-%H%M%S", time.localtime(self.clock())))
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        self._clean("scans")
        out = self._run_json(self.tool.command("logscan", "--json", path), timeout=120)
        entry = self.host.history(prompt_id) if prompt_id else None
        return {
            "reading": out,
            "error": _prompt_error(entry),
            "flags": self.flags(),
            "known_flags": self.host.known_flags(),
        }

    def _run_json(self, argv, timeout, env=None):
        try:
            done = subprocess.run(argv, capture_output=True, timeout=timeout,
                                  env=env if env is not None else self.tool.child_env(),
                                  cwd=self.host.comfyui_dir or None)
        except subprocess.TimeoutExpired:
            raise Refused(504, "vrambisect %s took longer than %d s" % (argv[1], timeout), "timeout")
        except OSError as e:
            raise Refused(500, "vrambisect could not be started: %s" % e, "tool_failed")
        try:
            return json.loads(done.stdout.decode("utf-8", "replace"))
        except ValueError:
            err = done.stderr.decode("utf-8", "replace").strip().splitlines()
            raise Refused(500, "vrambisect %s failed: %s" % (argv[1], err[-1] if err else "no output"), "tool_failed")

    # -- diagnose --------------------------------------------------------------------------
    def diagnose(self, prompt_id):
        if not isinstance(prompt_id, str) or not PROMPT_ID.fullmatch(prompt_id):
            raise Refused(400, "Diagnose takes the id of a prompt in this server's history", "bad_request")
        state = self.tool.state()
        if not state["ok"]:
            raise Refused(409, state["message"], "tool_missing")
        # The flags its runs test, as the program reads this server's command line.
        flags = self.flags()
        # Checked and reserved under the lock; the slow part (/free, the start) outside it, so
        # that the prompt guard on ComfyUI's event loop never waits for it.
        with self.lock:
            if self.starting or (self.diagnosis is not None and self.diagnosis.alive()):
                raise Refused(409, "a diagnosis is already running: cancel it or wait for its verdict", "busy")
            orphan = self.orphan()
            if orphan:
                raise Refused(409, "a diagnosis started before ComfyUI restarted is still running (process %d): "
                              "cancel it in the panel or wait for it to end" % orphan, "busy")
            busy = self.host.queue_busy()
            if busy:
                raise Refused(409, "%d prompt(s) are queued or running on this server: let them finish, or "
                              "clear the queue (interrupt a prompt that hangs), then diagnose" % busy, "queue_busy")
            entry = self.host.history(prompt_id)
            if entry is None:
                raise Refused(404, "prompt %s is not in this server's history (restarted since?): queue it "
                              "again and diagnose when it fails" % prompt_id, "not_found")
            api, ui = _prompt_of(entry)
            if not api:
                raise Refused(409, "the history entry of prompt %s holds no workflow" % prompt_id, "not_found")
            stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(self.clock()))
            self._dir("diagnoses")
            # One place for the new one; a diagnosis that can still be resumed is kept.
            self._clean("diagnoses", keep=self._resumable, room=1)
            folder = self._dir("diagnoses", stamp)
            workflow = os.path.join(folder, "prompt.json")
            with open(workflow, "w", encoding="utf-8") as f:
                json.dump(api, f, indent=1)
            if ui:
                with open(os.path.join(folder, "workflow.json"), "w", encoding="utf-8") as f:
                    json.dump(ui, f, indent=1)
            # The prompt failed here: this server's log shows how, and the bisect starts from
            # a shortened run of these flags rather than the whole workflow (--failed-log).
            failed_log = []
            text = self.log.text() if _prompt_error(entry) is not None else ""
            if text.strip():
                path = os.path.join(folder, "comfyui.log")
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
                failed_log = ["--failed-log", path]
            self.starting = True
        try:
            held = self.host.free()
            session = os.path.join(folder, "session")
            argv = self.tool.command(
                "bisect", "--json", "--comfyui", self.host.comfyui_dir, "--python", self.host.python,
                "--workflow", workflow, "--output", session, *failed_log, "--", *flags)
            d = Diagnosis(self, folder, session, argv, prompt_id, flags, held)
            try:
                d.start()
            except OSError as e:
                raise Refused(500, "vrambisect could not be started: %s" % (e.strerror or e), "tool_failed")
            with self.lock:
                self.diagnosis = d
            return public_diagnosis(d.describe())
        finally:
            self.starting = False

    def orphan(self):
        """The process of a diagnosis that an earlier run of this ComfyUI started and that still
        runs (ComfyUI ended without stopping it: killed, crashed), or None."""
        try:
            with open(self._state_file(), "r", encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return None
        return self._orphan_of(data)

    def _orphan_of(self, data):
        if not isinstance(data, dict) or data.get("state") != "running":
            return None
        pid = data.get("pid")
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or data.get("server_pid") == os.getpid():
            return None
        if self.run_of is not None and data.get("session") == self.run_of:
            # This server is one of that diagnosis's runs: its prompts are the run's own.
            return None
        return pid if _is_bisect(pid, data.get("session"), data.get("program")) else None

    def guard_prompt(self):
        """None when prompts may be queued; otherwise the message refusing one. Takes no lock:
        it runs on ComfyUI's event loop."""
        d = self.diagnosis
        if self.starting or (d is not None and d.alive()) or (d is None and self.orphan()):
            return ("vrambisect is diagnosing a workflow on this GPU: a prompt now would change "
                    "what its runs measure. Wait for the verdict or cancel the diagnosis in its panel.")
        return None

    def shutdown(self):
        """ComfyUI is exiting: a diagnosis under way is stopped as Cancel stops it (its ComfyUI
        with it), so that nothing is left holding the GPU; its --resume line stays."""
        with self.lock:
            d = self.diagnosis
        if d is not None and d.alive():
            d.cancel()
            try:
                d.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass

    def cancel(self):
        with self.lock:
            d = self.diagnosis
        if d is None or not d.alive():
            data = self._read_last() if d is None else None
            if data and data.get("state") in ("orphaned", "stopping"):
                return public_diagnosis(self._cancel_orphan(data))
            raise Refused(409, "no diagnosis is running", "not_running")
        d.cancel()
        return public_diagnosis(d.describe())

    def _cancel_orphan(self, data):
        """Ctrl-C to an orphan's group, as for one of ours (its group is its own pid); where that
        cannot reach it (Windows: another console), it is ended, and the Job Object it keeps
        its ComfyUI in ends that with it. Its finished runs stay in its session."""
        pid = data["pid"]
        try:
            with open(self._state_file(), "r", encoding="utf-8") as f:
                saved = json.load(f)
            saved["cancel_requested"] = True
            _write_json(self._state_file(), saved)
        except (OSError, ValueError):
            pass
        try:
            if os.name == "nt":
                try:
                    os.kill(pid, signal.CTRL_BREAK_EVENT)
                except OSError:
                    os.kill(pid, signal.SIGTERM)
            else:
                os.killpg(pid, signal.SIGINT)
        except OSError:
            pass
        data = dict(data)
        data["state"] = "stopping"
        data["message"] = "stopping the diagnosis started before ComfyUI restarted; every finished run is kept"
        return data

    # -- report ----------------------------------------------------------------------------
    def report(self, prompt_id=None):
        """The bug report bundle: of the diagnosis of this prompt (or the last diagnosis when
        no prompt is named), else of the prompt's failure as it happened (nothing rerun:
        this server's log, the prompt's history entry and workflow)."""
        if prompt_id is not None and (not isinstance(prompt_id, str) or not PROMPT_ID.fullmatch(prompt_id)):
            raise Refused(400, "not a prompt id of this server", "bad_request")
        with self.lock:
            if self.diagnosis is not None and self.diagnosis.alive():
                raise Refused(409, "the diagnosis is still running: the report is written from its runs when it ends",
                              "busy")
        last = self._current_or_last()
        if last and last.get("state") in ("orphaned", "stopping", "running"):
            raise Refused(409, "the diagnosis is still running: the report is written from its runs when it ends",
                          "busy")
        session = last.get("session") if last else None
        diagnosed = bool(session and os.path.isdir(session)) and (prompt_id is None or last.get("prompt_id") == prompt_id)
        if not diagnosed and prompt_id is not None and self.host.history(prompt_id) is None:
            raise Refused(404, "prompt %s is not in this server's history (restarted since?): queue it again "
                          "and report it when it fails" % prompt_id, "not_found")
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(self.clock()))
        token = secrets.token_hex(16)
        common = ["--comfyui", self.host.comfyui_dir, "--python", self.host.python]
        if diagnosed:
            name = "vrambisect-report-%s-%s.zip" % (stamp, token)
            args = ["report", "--json", session]
        elif prompt_id is not None:
            name = "vrambisect-report-%s-failure-%s.zip" % (stamp, token)
            args = ["report", "--json"] + self._failure_files(prompt_id, stamp)
        else:
            raise Refused(409, "no diagnosis to report yet: run Diagnose, or report a failed prompt", "nothing")
        out = os.path.join(self._dir("reports"), name)
        reading = self._run_json(self.tool.command(*(args + ["--output", out] + common)), timeout=300,
                                 env=self.tool.report_env())
        if not os.path.isfile(out):
            raise Refused(500, "vrambisect report wrote no bundle", "tool_failed")
        self.written.add(name)
        removed = self._clean("reports")
        # The panel shows the bundle's name and counts, not where this machine keeps it.
        if isinstance(reading, dict):
            reading.pop("bundle", None)
            reading.pop("source_dir", None)
        return {"name": name, "diagnosed": diagnosed, "report": reading,
                "template": (reading or {}).get("issue_form") if isinstance(reading, dict) else None,
                "removed": removed}

    def _current_or_last(self):
        with self.lock:
            d = self.diagnosis
        return d.describe() if d is not None else self._read_last()

    def _failure_files(self, prompt_id, stamp):
        """Writes what the failure bundle is made of (this server's log, the prompt's history
        entry and its workflow) and returns report's arguments for them."""
        text = self.log.text()
        if not text.strip():
            raise Refused(409, "this server's log is empty: nothing to report", "no_log")
        self._dir("failures")
        self._clean("failures", room=1)
        folder = self._dir("failures", stamp)
        log = os.path.join(folder, "comfyui.log")
        with open(log, "w", encoding="utf-8") as f:
            f.write(text)
        args = ["--log", log]
        entry = self.host.history(prompt_id)
        if entry is not None:
            history = os.path.join(folder, "history.json")
            with open(history, "w", encoding="utf-8") as f:
                json.dump(entry, f, indent=1)
            args += ["--history", history]
            api, _ui = _prompt_of(entry)
            if api:
                workflow = os.path.join(folder, "workflow.json")
                with open(workflow, "w", encoding="utf-8") as f:
                    json.dump(api, f, indent=1)
                args += ["--workflow", workflow]
        return args

    def report_file(self, name):
        """The bytes of a bundle this server wrote, by its name: a regular file in the reports
        folder, opened without following a link; anything else is refused."""
        if not isinstance(name, str) or not REPORT_NAME.fullmatch(name) or name not in self.written:
            raise Refused(404, "no such report", "not_found")
        folder = os.path.join(self.root, "reports")
        try:
            if not stat.S_ISDIR(os.lstat(folder).st_mode) or not stat.S_ISDIR(os.lstat(self.root).st_mode):
                raise Refused(404, "no such report", "not_found")
            path = os.path.join(folder, name)
            if os.name == "nt" and os.path.islink(path):
                raise Refused(404, "no such report", "not_found")
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0))
        except OSError:
            raise Refused(404, "no such report", "not_found")
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise Refused(404, "no such report", "not_found")
            return f.read()


def _keep_newest(folder, n, keep=None):
    """Keeps the newest n files or folders (their names begin with their time), and any that
    keep(path) says to; returns the names removed."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    removed = []
    for old in names[:-n] if 0 < n < len(names) else (names if n <= 0 else []):
        path = os.path.join(folder, old)
        if keep is not None and keep(path):
            continue
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
            removed.append(old)
        except OSError:
            pass
    return removed


def _read_result(folder):
    """The bisect's --json answer in a diagnosis folder, or None."""
    try:
        with open(os.path.join(folder, "bisect.json"), "r", encoding="utf-8") as f:
            result = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(result, dict) or not isinstance(result.get("verdict"), dict):
        return None
    return result


def _write_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


def _kernel32():
    """kernel32 with the prototypes used here (a HANDLE is pointer-sized: ctypes' default int
    return would cut it)."""
    import ctypes
    from ctypes import wintypes

    k = ctypes.WinDLL("kernel32", use_last_error=True)
    k.OpenProcess.restype = wintypes.HANDLE
    k.OpenProcess.argtypes = (wintypes.DWORD, wintypes.BOOL, wintypes.DWORD)
    k.GetExitCodeProcess.restype = wintypes.BOOL
    k.GetExitCodeProcess.argtypes = (wintypes.HANDLE, ctypes.POINTER(wintypes.DWORD))
    k.QueryFullProcessImageNameW.restype = wintypes.BOOL
    k.QueryFullProcessImageNameW.argtypes = (wintypes.HANDLE, wintypes.DWORD, wintypes.LPWSTR,
                                             ctypes.POINTER(wintypes.DWORD))
    k.CloseHandle.restype = wintypes.BOOL
    k.CloseHandle.argtypes = (wintypes.HANDLE,)
    return k


def _windows_process(pid):
    """(alive, image path or None) of process pid on Windows."""
    import ctypes
    from ctypes import wintypes

    k = _kernel32()
    handle = k.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
    if not handle:
        return False, None
    try:
        code = wintypes.DWORD()
        if not k.GetExitCodeProcess(handle, ctypes.byref(code)) or code.value != 259:  # STILL_ACTIVE
            return False, None
        size = wintypes.DWORD(32768)
        buf = ctypes.create_unicode_buffer(size.value)
        image = buf.value if k.QueryFullProcessImageNameW(handle, 0, buf, ctypes.byref(size)) else None
        return True, image
    finally:
        k.CloseHandle(handle)


def _alive(pid):
    """Whether process pid exists."""
    if os.name == "nt":
        return _windows_process(pid)[0]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _is_bisect(pid, session, program=None):
    """Whether pid is alive and (where the system says) still the bisect of that session, not
    another process that took its number since: its command line names the session (Linux),
    or its image is the program the diagnosis started (Windows)."""
    if os.name == "nt":
        alive, image = _windows_process(pid)
        if not alive:
            return False
        if not isinstance(program, str) or image is None:
            return True  # the number is all there is
        return os.path.normcase(os.path.basename(image)) == os.path.normcase(os.path.basename(program))
    if not _alive(pid):
        return False
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            argv = [os.fsdecode(a) for a in f.read().split(b"\0")]
    except OSError:
        return True  # no /proc here: the number is all there is
    return isinstance(session, str) and session in argv


def _prompt_of(entry):
    """(API prompt, UI workflow or None) of a history entry (``prompt`` is
    [number, id, prompt, extra_data, outputs_to_execute])."""
    p = entry.get("prompt") if isinstance(entry, dict) else None
    if not isinstance(p, (list, tuple)) or len(p) < 3 or not isinstance(p[2], dict):
        return None, None
    extra = p[3] if len(p) > 3 and isinstance(p[3], dict) else {}
    info = extra.get("extra_pnginfo") if isinstance(extra.get("extra_pnginfo"), dict) else {}
    ui = info.get("workflow") if isinstance(info.get("workflow"), dict) else None
    return p[2], ui


def _prompt_error(entry):
    """The execution_error message of a history entry, reduced to what the panel shows."""
    if not isinstance(entry, dict):
        return None
    status = entry.get("status") or {}
    for msg in status.get("messages") or []:
        if isinstance(msg, (list, tuple)) and len(msg) == 2 and msg[0] == "execution_error" and isinstance(msg[1], dict):
            e = msg[1]
            return {k: e.get(k) for k in ("node_id", "node_type", "exception_type", "exception_message")}
    return None


# What status gives of a diagnosis: what the panel shows. The state file keeps the rest (the
# process ids, the session folder) for this pack alone.
PUBLIC_DIAGNOSIS = ("state", "prompt_id", "started", "ended", "gpu_held_by_this_comfyui", "resume",
                    "progress", "verdict", "message")


def public_diagnosis(d):
    if not isinstance(d, dict):
        return None
    out = {k: d.get(k) for k in PUBLIC_DIAGNOSIS if k in d}
    session = d.get("session")
    out["reportable"] = bool(isinstance(session, str) and os.path.isdir(session)) and \
        d.get("state") not in ("running", "orphaned", "stopping")
    return out


class Diagnosis:
    """One ``vrambisect bisect`` started from the panel: its process, its progress read from the
    session folder, its verdict read from its JSON when it ends."""

    def __init__(self, ext, folder, session, argv, prompt_id, flags, held):
        self.ext = ext
        self.folder = folder
        self.session = session
        self.argv = argv
        self.prompt_id = prompt_id
        self.flags = flags
        self.held = held
        self.proc = None
        self.started = ext.clock()
        self.ended = None
        self.result = None
        self.exit_code = None
        self.cancelled = False
        self.error = None
        # The waiting thread and Cancel both write the state file.
        self.save_lock = threading.Lock()

    def start(self):
        kwargs = {}
        if os.name == "nt":
            kwargs["creationflags"] = subprocess.CREATE_NEW_PROCESS_GROUP
        else:
            kwargs["start_new_session"] = True
        env = self.ext.tool.child_env()
        env[DIAGNOSIS_VAR] = self.session
        self.stdout = open(os.path.join(self.folder, "bisect.json"), "wb")
        self.stderr = open(os.path.join(self.folder, "bisect.log"), "wb")
        try:
            self.proc = subprocess.Popen(self.argv, stdout=self.stdout, stderr=self.stderr,
                                         stdin=subprocess.DEVNULL, env=env,
                                         cwd=self.ext.host.comfyui_dir or None, **kwargs)
        except OSError:
            self.stdout.close()
            self.stderr.close()
            raise
        self._save()
        threading.Thread(target=self._wait, name="vrambisect-diagnosis", daemon=True).start()

    def alive(self):
        return self.proc is not None and self.exit_code is None

    def _wait(self):
        code = self.proc.wait()
        self.stdout.close()
        self.stderr.close()
        self.result = _read_result(self.folder)
        if self.result is None:
            # The bisect stopped before a verdict: its --json error, or its last words.
            try:
                with open(os.path.join(self.folder, "bisect.json"), "r", encoding="utf-8") as f:
                    err = json.load(f).get("error")
            except (OSError, ValueError, AttributeError):
                err = None
            self.error = (err.get("message") if isinstance(err, dict) else None) or \
                _last_line(os.path.join(self.folder, "bisect.log")) or "vrambisect bisect ended with exit status %d" % code
        self.ended = self.ext.clock()
        self.exit_code = code
        self._save()

    def cancel(self):
        """Ctrl-C to the bisect: it stops the ComfyUI it started, keeps every finished run and
        says how to resume."""
        self.cancelled = True
        try:
            if os.name == "nt":
                try:
                    self.proc.send_signal(signal.CTRL_BREAK_EVENT)
                except OSError:
                    # No console this server shares with the bisect's group (a server started
                    # without one, as ComfyUI Desktop's; wine): the bisect is ended, and the Job
                    # Object it keeps each run's ComfyUI in ends that with it. Its finished runs
                    # are in its session already, so the resume line holds.
                    self.proc.terminate()
            else:
                os.killpg(self.proc.pid, signal.SIGINT)
        except (OSError, ProcessLookupError):
            pass
        self._save()

    def progress(self):
        """Runs done and planned, the configuration under way and its phase, the time left:
        the progress file the bisect keeps in its session folder."""
        try:
            with open(self.ext.session_file("progress", self.session), "r", encoding="utf-8") as f:
                p = json.load(f)
        except (OSError, ValueError, TypeError):
            p = {}
        if not isinstance(p, dict):
            p = {}
        return {
            "run": p.get("run"),
            "runs_done": p.get("runs_done", 0),
            "runs_planned": p.get("runs_planned"),
            "current": p.get("current") or None,
            "phase": p.get("phase") or None,
            "eta_s": p.get("eta_s"),
            "elapsed_s": round((self.ended or self.ext.clock()) - self.started, 1),
        }

    def state(self):
        if self.alive():
            return "stopping" if self.cancelled else "running"
        verdict = self.result.get("verdict") if self.result else None
        # A Cancel that came after the verdict was written changes nothing.
        if self.cancelled and (verdict is None or verdict.get("kind") == "incomplete"):
            return "cancelled"
        return "done" if verdict else "failed"

    def describe(self):
        d = {
            "state": self.state(),
            "prompt_id": self.prompt_id,
            "started": self.started,
            "ended": self.ended,
            "flags": self.flags,
            "gpu_held_by_this_comfyui": self.held,
            "session": self.session,
            # Only a session that got as far as its spec can be resumed.
            "resume": _resume_line(self.ext, self.session),
            "progress": self.progress(),
            "pid": self.proc.pid if self.proc is not None else None,
            "program": self.argv[0] if self.argv else None,
            "server_pid": os.getpid(),
            "cancel_requested": self.cancelled,
        }
        if d["state"] == "stopping":
            # Still the bisect's own process: an orphan check after a restart must find it.
            d["state"] = "running"
            d["stopping"] = True
        if self.result is not None:
            d["verdict"] = summarize_verdict(self.result, self.ext)
        if self.error:
            d["message"] = self.error
        if self.cancelled and not self.alive() and d["state"] == "cancelled":
            d["message"] = "cancelled: every finished run is kept"
        return d

    def _save(self):
        with self.save_lock:
            try:
                _write_json(self.ext._state_file(), self.describe())
            except OSError:
                pass


def _resume_line(ext, session):
    """The line that goes on with a session, once it got as far as its spec (else None)."""
    spec = ext.session_file("spec", session) if isinstance(session, str) else None
    if spec is None or not os.path.isfile(spec):
        return None
    return "%s -m vrambisect bisect --resume %s" % (_quote(ext.host.python), _quote(session))


def _last_line(path):
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            lines = [ln.strip() for ln in f if ln.strip()]
        return lines[-1] if lines else None
    except OSError:
        return None


def summarize_verdict(result, ext):
    """The bisect's JSON reduced to what the panel says, with the launch line for this install:
    the verdict's own flags (this server's flags with the fix applied) and the networking flags
    the runs left out on purpose, so that the line starts ComfyUI as the user reaches it."""
    verdict = result.get("verdict") or {}
    kind = verdict.get("kind")
    out = {
        "kind": kind,
        "statement": verdict.get("statement"),
        "confidence": verdict.get("confidence"),
        "fixing_flags": verdict.get("fixing_flags") or [],
        "culprit_flags": verdict.get("culprit_flags") or [],
        "runs_total": result.get("runs_total"),
        "baseline": (result.get("baseline") or {}).get("outcome"),
        # The other fixes that passed, as the bisect compared them with its recommendation.
        "keeps_dynamic_vram": (verdict.get("fix") or {}).get("keeps_dynamic_vram"),
        "alternatives": [
            {"fixing_flags": a.get("fixing_flags") or [], "compared": a.get("compared"),
             "keeps_dynamic_vram": a.get("keeps_dynamic_vram")}
            for a in verdict.get("alternatives") or [] if isinstance(a, dict)
        ],
        "not_helped": [str(n) for n in verdict.get("not_helped") or []],
    }
    flags = verdict.get("flags")
    if kind in ("fixed_by", "caused_by") and isinstance(flags, list):
        # Where this install takes its flags and the line, as the program says.
        try:
            left_out = ext.facts()["flags"]["left_out"]
            out["launch"] = ext.facts(left_out + [str(f) for f in flags])["launch"]
        except Refused:
            out["launch"] = None
    return out
