#!/usr/bin/env python3
"""Installs a vrambisect wheel the way ComfyUI users do and checks what they will run.

    scripts/check-wheel.py unix WHEEL                 (Linux, macOS)
    scripts/check-wheel.py windows WHEEL EMBED_ZIP PIP_WHEEL [SHIM]
                     (on Windows, or under wine elsewhere; EMBED_ZIP: the official embeddable
                      CPython for Windows; SHIM: the bcryptprimitives.dll wine before 9 lacks)

unix: a fresh venv, `python -m vrambisect --version`, the README's main job (a bisect of the
stand-in), exit statuses, Ctrl-C, the pty, and the defaults found from a venv inside or beside
the ComfyUI folder, from the current folder, two candidates, and ComfyUI Desktop's settings
(Linux; on macOS, that the GPU parts say they do not apply).

windows: the portable build's layout (python_embeded beside ComfyUI, its ._pth as ComfyUI's
release workflow writes it, pip inside it), `python_embeded\\python.exe -s -m pip install`,
then the same bisect through `python.exe -m vrambisect` with no --comfyui and no --python,
and the defaults found for ComfyUI Desktop's layout.

One line per check; the figures go to target/wheel-check-<platform>.json. Exits 1 when a check
fails.
"""

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile

REPO = pathlib.Path(__file__).resolve().parent.parent
STAND_IN = REPO / "fixtures" / "fake-comfyui"
WORKFLOW = REPO / "fixtures" / "workflows" / "sd15_txt2img.json"
STARTED_BY = "the Python that ran python -m vrambisect"

failures = []
figures = {}


def check(name, ok, detail=""):
    """One line per check; what went wrong under a failed one."""
    print(("ok    " if ok else "FAIL  ") + name)
    if not ok and detail:
        print("      " + detail.replace("\n", "\n      "))
    if not ok:
        failures.append(name)
    return ok


def cargo_version():
    text = (REPO / "Cargo.toml").read_text()
    return re.search(r'^version = "([^"]+)"', text, re.M).group(1)


def copy_stand_in(to, scenario=None):
    """A fresh copy of the stand-in, without the state a run leaves in it."""
    ignore = shutil.ignore_patterns("__pycache__", "run-counter.txt", "gpu-state.txt", "*.lock", "*.db", "tests")
    shutil.copytree(STAND_IN, to, ignore=ignore)
    if scenario:
        shutil.copy(STAND_IN / "examples" / scenario, to / "scenario.json")
    return to


def run(cmd, cwd=None, env=None, timeout=300):
    started = time.monotonic()
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, encoding="utf-8", errors="replace", timeout=timeout)
    p.seconds = time.monotonic() - started
    return p


def as_json(p):
    try:
        return json.loads(p.stdout)
    except ValueError:
        return None


def same(a, b):
    return os.path.normcase(os.path.realpath(str(a))) == os.path.normcase(os.path.realpath(str(b)))


def fixed_by_dynamic_vram(doc):
    v = (doc or {}).get("verdict") or {}
    return v.get("kind") == "fixed_by" and v.get("fixing_flags") == ["--disable-dynamic-vram"]


def process_cwd(pid):
    try:
        return os.readlink("/proc/%d/cwd" % pid)
    except OSError:
        pass
    # macOS has no /proc.
    p = subprocess.run(["lsof", "-a", "-p", str(pid), "-d", "cwd", "-Fn"], capture_output=True, text=True)
    names = [l[1:] for l in p.stdout.splitlines() if l.startswith("n")]
    return names[0] if names else ""


def leftover(folder):
    """Processes started in folder or naming it (a stand-in left behind)."""
    folder = str(folder)
    out = subprocess.run(["ps", "-A", "-o", "pid=", "-o", "command="], capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        pid, _, cmdline = line.strip().partition(" ")
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        if folder in cmdline or ("main.py" in cmdline and process_cwd(int(pid)).startswith(folder)):
            found.append((int(pid), cmdline.strip()))
    return found


# --- Linux and macOS ----------------------------------------------------------------------------------


def venv_with_wheel(where, wheel):
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    py = where / "bin" / "python"
    subprocess.run(
        [str(py), "-m", "pip", "install", "--quiet", "--no-index", "--disable-pip-version-check", str(wheel)],
        check=True,
    )
    return py


def unix(wheel, tmp):
    env = dict(os.environ, VRAMBISECT_LOCK_DIR=str(tmp))
    env.pop("VRAMBISECT_PYTHON", None)
    started = time.monotonic()
    py = venv_with_wheel(tmp / "venv", wheel)
    figures["install_seconds"] = round(time.monotonic() - started, 1)
    check("the program is installed in the venv's bin", (tmp / "venv" / "bin" / "vrambisect").is_file())

    p = run([str(py), "-m", "vrambisect", "--version"], env=env)
    check("python -m vrambisect --version", p.returncode == 0 and p.stdout.strip() == "vrambisect " + cargo_version(), p.stdout.strip() or p.stderr.strip())

    # The README's main job, through python -m.
    p = run([str(py), "-m", "vrambisect", "bisect", "--json", "--comfyui", str(STAND_IN), "--workflow", str(WORKFLOW), "--output", str(tmp / "s1")], cwd=tmp, env=env)
    doc = as_json(p)
    figures["fresh_venv_to_verdict_seconds"] = round(time.monotonic() - started, 1)
    figures["bisect_seconds"] = round(p.seconds, 1)
    check("the README's bisect through python -m: fixed by --disable-dynamic-vram", p.returncode == 0 and fixed_by_dynamic_vram(doc), p.stderr.strip()[-300:])
    python = ((doc or {}).get("defaults") or {}).get("python") or {}
    check(
        "its Python is the one that ran python -m vrambisect, and says so",
        python.get("path") == str(py) and python.get("source", "").startswith(STARTED_BY),
        json.dumps(python),
    )
    check("the first lines of the bisect say where ComfyUI and its Python came from", "ComfyUI: " in p.stderr and "(--comfyui)" in p.stderr and "Python:  " + str(py) in p.stderr)

    # Exit statuses come through: 1 for a run that fails, 2 for a bad command line.
    p = run([str(py), "-m", "vrambisect", "run", "--comfyui", str(STAND_IN), "--workflow", str(WORKFLOW), "--output", str(tmp / "r1")], cwd=tmp, env=env)
    check("run's exit status 1 (out of memory) comes through python -m", p.returncode == 1, "exit %d" % p.returncode)
    p = run([str(py), "-m", "vrambisect", "no-such-command"], env=env)
    check("a usage error's exit status 2 comes through", p.returncode == 2 and "error" in p.stderr, "exit %d" % p.returncode)

    extension(py, tmp, env)

    # In a terminal: the same bisect finishes (a pty, as a person runs it).
    check_pty(py, tmp, env)
    # Ctrl-C reaches the program: it stops ComfyUI, keeps what it has, exits 130.
    check_ctrl_c(py, tmp, env)
    defaults(wheel, py, tmp, env)
    if sys.platform == "darwin":
        p = run([str(py), "-m", "vrambisect", "doctor", "--json"], cwd=tmp, env=env)
        nvml = [c for c in (as_json(p) or {}).get("checks", []) if c.get("id") == "nvml"]
        check("macOS: the GPU parts say they do not apply", nvml and "do not apply on macOS" in nvml[0].get("summary", ""), p.stdout[-300:])


def extension(py, tmp, env):
    """The ComfyUI extension from the wheel: installed by python -m vrambisect into the ComfyUI
    found from the current folder, finding the wheel's program from ComfyUI's Python as it does
    inside ComfyUI (no VRAMBISECT_EXTENSION_TOOL), and removed again."""
    comfy = copy_stand_in(tmp / "ext-ComfyUI")
    env = dict(env)
    env.pop("VRAMBISECT_EXTENSION_TOOL", None)
    p = run([str(py), "-m", "vrambisect", "extension", "install"], cwd=comfy, env=env)
    pack = comfy / "custom_nodes" / "comfyui-vrambisect"
    check("python -m vrambisect extension install (from the ComfyUI folder)", p.returncode == 0 and (pack / "web" / "vrambisect.js").is_file(), (p.stdout + p.stderr).strip()[-300:])
    probe = "import sys; sys.path.insert(0, sys.argv[1]); import core, json; print(json.dumps(core.Tool(sys.executable).state()))"
    p = run([str(py), "-c", probe, str(pack)], cwd=tmp, env=env)
    state = as_json(p) or {}
    check("the pack finds the wheel's program in ComfyUI's Python", state.get("ok") is True and state.get("version") == cargo_version(), (p.stdout + p.stderr).strip()[-300:])
    p = run([str(py), "-m", "vrambisect", "extension", "remove", "--comfyui", str(comfy)], cwd=tmp, env=env)
    check("python -m vrambisect extension remove", p.returncode == 0 and not pack.exists(), (p.stdout + p.stderr).strip()[-300:])


def check_pty(py, tmp, env):
    import pty
    import select

    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(str(tmp))
        os.execve(str(py), [str(py), "-m", "vrambisect", "bisect", "--comfyui", str(STAND_IN), "--workflow", str(WORKFLOW), "--output", str(tmp / "pty")], env)
    out, status, t0 = b"", None, time.monotonic()
    while time.monotonic() - t0 < 60:
        if select.select([fd], [], [], 0.2)[0]:
            try:
                out += os.read(fd, 65536)
            except OSError:
                pass
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = os.waitstatus_to_exitcode(st)
            break
    if status is None:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.decode(errors="replace"))
    check("the bisect through python -m finishes in a terminal", status == 0 and "FIXED BY --disable-dynamic-vram" in text, "exit %s; %s" % (status, text.strip()[-200:]))


def check_ctrl_c(py, tmp, env):
    comfy = copy_stand_in(tmp / "hanging" / "ComfyUI", scenario="hang-on-load.json")
    p = subprocess.Popen(
        [str(py), "-m", "vrambisect", "run", "--comfyui", str(comfy), "--workflow", str(WORKFLOW), "--output", str(tmp / "interrupted"), "--stall-timeout", "5m"],
        cwd=str(tmp), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    t0 = time.monotonic()
    while time.monotonic() - t0 < 30 and not leftover(comfy):
        time.sleep(0.2)
    time.sleep(1.5)
    p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=40)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
    time.sleep(0.5)
    left = [c for _, c in leftover(comfy)]
    check("Ctrl-C through python -m: exit 130, ComfyUI stopped", p.returncode == 130 and not left, "exit %s; left: %s; %s" % (p.returncode, left, err.decode(errors="replace").strip()[-200:]))
    check("the interrupted run keeps its folder and record", (tmp / "interrupted" / "record.json").is_file())


def defaults(wheel, py, tmp, env):
    # A venv inside the ComfyUI folder, started from elsewhere: no --comfyui, no --python.
    inside = copy_stand_in(tmp / "inside" / "ComfyUI")
    inside_py = venv_with_wheel(inside / "venv", wheel)
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    p = run([str(inside_py), "-m", "vrambisect", "bisect", "--json", "--workflow", str(WORKFLOW), "--output", str(tmp / "s2")], cwd=elsewhere, env=env)
    doc = as_json(p) or {}
    d = doc.get("defaults") or {}
    check(
        "venv inside ComfyUI: the folder and the Python are found, and the bisect runs",
        fixed_by_dynamic_vram(doc) and same(d.get("comfyui", {}).get("path"), inside) and d.get("python", {}).get("path") == str(inside_py),
        json.dumps(d) + " " + p.stderr.strip()[-200:],
    )
    check("  ... and say where they came from", "the folder holding venv" in d.get("comfyui", {}).get("source", ""), d.get("comfyui", {}).get("source", ""))

    # The same venv's program started by its own name (an activated venv), from elsewhere.
    p = run([str(inside / "venv" / "bin" / "vrambisect"), "doctor", "--json"], cwd=elsewhere, env=env)
    d = (as_json(p) or {}).get("defaults") or {}
    check(
        "plain vrambisect from the venv: the same folder and Python",
        same(d.get("comfyui", {}).get("path"), inside) and d.get("python", {}).get("path") == str(inside_py)
        and "the Python vrambisect is installed in" in d.get("comfyui", {}).get("source", ""),
        json.dumps(d),
    )
    # Another tool's venv beside a ComfyUI that has its own is not ComfyUI's.
    stranger_py = venv_with_wheel(tmp / "inside" / "tools-venv", wheel)
    p = run([str(stranger_py), "-m", "vrambisect", "doctor", "--json"], cwd=inside, env=env)
    d = (as_json(p) or {}).get("defaults") or {}
    check(
        "another venv beside ComfyUI: the install keeps its own Python",
        same(d.get("comfyui", {}).get("path"), inside) and d.get("python", {}).get("path") == str(inside_py),
        json.dumps(d),
    )

    # A venv beside the ComfyUI folder.
    beside = copy_stand_in(tmp / "beside" / "ComfyUI")
    beside_py = venv_with_wheel(tmp / "beside" / ".venv", wheel)
    p = run([str(beside_py), "-m", "vrambisect", "doctor", "--json"], cwd=elsewhere, env=env)
    d = (as_json(p) or {}).get("defaults") or {}
    check("venv beside ComfyUI: doctor finds the folder", same(d.get("comfyui", {}).get("path"), beside) and "beside .venv" in d.get("comfyui", {}).get("source", ""), json.dumps(d))

    # The current folder, with a Python that belongs to no install.
    p = run([str(py), "-m", "vrambisect", "doctor", "--json"], cwd=beside, env=env)
    d = (as_json(p) or {}).get("defaults") or {}
    check(
        "the current folder, with another Python: the folder from here, that Python",
        same(d.get("comfyui", {}).get("path"), beside) and d.get("comfyui", {}).get("source") == "the current folder" and d.get("python", {}).get("path") == str(py),
        json.dumps(d),
    )

    # Two candidates: one install's Python, started in another install's folder.
    p = run([str(inside_py), "-m", "vrambisect", "run", "--workflow", str(WORKFLOW)], cwd=beside, env=env)
    check(
        "two ComfyUI folders could be meant: exit 2 naming both",
        p.returncode == 2 and "more than one ComfyUI folder could be meant" in p.stderr and str(beside) in p.stderr and "--comfyui" in p.stderr,
        p.stderr.strip(),
    )

    # ComfyUI Desktop's settings name the base folder holding .venv; Desktop ships no Linux
    # app, so its own ComfyUI folder is not found: said in one line.
    if sys.platform != "linux":
        return
    home = tmp / "home"
    base = tmp / "desktop-base"
    desktop_py = venv_with_wheel(base / ".venv", wheel)
    (home / ".config" / "ComfyUI").mkdir(parents=True)
    (home / ".config" / "ComfyUI" / "config.json").write_text(json.dumps({"basePath": str(base)}))
    denv = dict(env, HOME=str(home))
    denv.pop("XDG_CONFIG_HOME", None)
    p = run([str(desktop_py), "-m", "vrambisect", "run", "--workflow", str(WORKFLOW)], cwd=elsewhere, env=denv)
    check(
        "ComfyUI Desktop's base folder without its app: exit 2, one line",
        p.returncode == 2 and "is ComfyUI Desktop's base folder, but Desktop's own ComfyUI folder was not found" in p.stderr,
        p.stderr.strip(),
    )


# --- Windows, under wine ----------------------------------------------------------------------


WINE = os.name != "nt"


def winepath(path):
    """A path as the Windows program sees it."""
    if not WINE:
        return str(path)
    path = pathlib.Path(path).absolute()
    # Wine's default prefix maps Z: to the root folder: the mapping needs no wine process
    # (winepath itself fails now and then while a wineserver shuts down).
    prefix = pathlib.Path(os.environ.get("WINEPREFIX") or pathlib.Path.home() / ".wine")
    z = prefix / "dosdevices" / "z:"
    if z.is_symlink() and os.readlink(z).rstrip("/") == "":
        return "Z:" + str(path).replace("/", "\\")
    for attempt in range(3):
        p = subprocess.run(["winepath", "-w", str(path)], capture_output=True, text=True)
        if p.returncode == 0 and p.stdout.strip():
            return p.stdout.strip()
        time.sleep(1 + attempt)
    sys.exit(f"winepath -w {path} failed: {p.stderr.strip()}")


def wine(args, cwd=None, env=None, timeout=300):
    """Runs a Windows program: directly on Windows, under wine elsewhere."""
    return run((["wine"] if WINE else []) + [str(a) for a in args], cwd=cwd, env=env, timeout=timeout)


def portable_python(top, embed_zip, pip_wheel):
    """python_embeded as ComfyUI's release workflow makes it: the embeddable CPython, its
    ._pth given ../ComfyUI first and `import site` last, pip in Lib/site-packages."""
    embed = top / "python_embeded"
    with zipfile.ZipFile(embed_zip) as z:
        # The archive holds the embeddable distribution in a folder (cp312/).
        for info in z.infolist():
            name = info.filename.split("/", 1)[-1] if "/" in info.filename else info.filename
            if not name or info.is_dir():
                continue
            (embed / name).parent.mkdir(parents=True, exist_ok=True)
            (embed / name).write_bytes(z.read(info))
    if WINE:
        # Wine 8 lacks propsys.dll's VariantToString, which Python 3.12's _wmi calls (pip
        # asks platform.win32_ver for its user agent) and wine aborts on; without _wmi.pyd,
        # platform falls back to sys.getwindowsversion(). A wine gap, not the portable build's.
        (embed / "_wmi.pyd").unlink()
    (pth,) = embed.glob("python3*._pth")
    pth.write_text("../ComfyUI\n" + pth.read_text() + "import site\n")
    site = embed / "Lib" / "site-packages"
    site.mkdir(parents=True)
    with zipfile.ZipFile(pip_wheel) as z:
        z.extractall(site)
    return embed / "python.exe"


def windows(wheel, tmp, embed_zip, pip_wheel, shim):
    env = dict(os.environ, WINEDEBUG="-all")
    env.pop("VRAMBISECT_PYTHON", None)
    top = tmp / "ComfyUI_windows_portable"
    comfy = copy_stand_in(top / "ComfyUI")
    started = time.monotonic()
    py = portable_python(top, embed_zip, pip_wheel)
    p = wine([py, "-s", "-m", "pip", "install", "--no-index", "--disable-pip-version-check", winepath(wheel)], cwd=top, env=env)
    figures["install_seconds"] = round(time.monotonic() - started, 1)
    exe = top / "python_embeded" / "Scripts" / "vrambisect.exe"
    check("python_embeded\\python.exe -s -m pip install puts vrambisect.exe in python_embeded\\Scripts", p.returncode == 0 and exe.is_file(), (p.stdout + p.stderr).strip()[-300:])
    if not exe.is_file():
        return
    if shim:
        # Wine before 9 lacks bcryptprimitives.dll, which Rust's standard library loads.
        shutil.copy(shim, exe.parent)

    p = wine([py, "-s", "-m", "vrambisect", "--version"], cwd=top, env=env)
    check("python.exe -s -m vrambisect --version", p.returncode == 0 and p.stdout.strip() == "vrambisect " + cargo_version(), (p.stdout + p.stderr).strip()[-200:])

    # From the portable folder, as its users would: no --comfyui, no --python.
    wf = winepath(WORKFLOW)
    p = wine([py, "-s", "-m", "vrambisect", "bisect", "--json", "--workflow", wf, "--output", winepath(tmp / "s1")], cwd=top, env=env)
    doc = as_json(p)
    figures["fresh_install_to_verdict_seconds"] = round(time.monotonic() - started, 1)
    figures["bisect_seconds"] = round(p.seconds, 1)
    check("the bisect through python_embeded\\python.exe -m vrambisect: fixed by --disable-dynamic-vram", p.returncode == 0 and fixed_by_dynamic_vram(doc), p.stderr.strip()[-300:])
    d = (doc or {}).get("defaults") or {}
    check(
        "the portable layout: ComfyUI beside python_embeded, python_embeded\\python.exe",
        d.get("comfyui", {}).get("source", "").startswith("the ComfyUI folder beside python_embeded")
        and d.get("comfyui", {}).get("path", "").lower().endswith("comfyui_windows_portable\\comfyui")
        and d.get("python", {}).get("path", "").lower().endswith("python_embeded\\python.exe"),
        json.dumps(d),
    )
    p = wine([py, "-s", "-m", "vrambisect", "run", "--workflow", wf, "--output", winepath(tmp / "r1")], cwd=top, env=env)
    check("run's exit status 1 comes through python.exe -m", p.returncode == 1, "exit %d" % p.returncode)
    # python_embeded\Scripts\vrambisect.exe started by its path, from elsewhere.
    p = wine([exe, "doctor", "--json"], cwd=tmp, env=env)
    d = (as_json(p) or {}).get("defaults") or {}
    check(
        "python_embeded\\Scripts\\vrambisect.exe knows its Python and the ComfyUI beside it",
        d.get("comfyui", {}).get("path", "").lower().endswith("comfyui_windows_portable\\comfyui")
        and d.get("python", {}).get("path", "").lower().endswith("python_embeded\\python.exe")
        and "installed in" in d.get("comfyui", {}).get("source", ""),
        json.dumps(d),
    )
    windows_desktop(exe, comfy, tmp, env)


def windows_desktop(exe, stand_in, tmp, env):
    """ComfyUI Desktop's layout in the wine prefix: the app's ComfyUI under
    %LOCALAPPDATA%\\Programs, its settings in %APPDATA%\\ComfyUI\\config.json naming the base
    folder that holds .venv. The interpreter is named as python -m would name it."""
    def folder(var):
        if not WINE:
            return pathlib.Path(os.environ[var])
        p = wine(["cmd", "/c", "echo", "%" + var + "%"], env=env)
        return pathlib.Path(subprocess.run(["winepath", "-u", p.stdout.strip()], capture_output=True, text=True).stdout.strip())

    local, roaming, profile = folder("LOCALAPPDATA"), folder("APPDATA"), folder("USERPROFILE")
    app = local / "Programs" / "@comfyorgcomfyui-electron" / "resources" / "ComfyUI"
    base = profile / "Documents" / "ComfyUI-vrambisect-check"
    config = roaming / "ComfyUI" / "config.json"
    made = [app.parent.parent, base]
    try:
        if config.exists():
            check("ComfyUI Desktop's layout (the wine prefix has a config.json of its own: not touched)", True)
            return
        made.append(config)
        shutil.copytree(stand_in, app, ignore=shutil.ignore_patterns("__pycache__"))
        (base / ".venv" / "Scripts").mkdir(parents=True)
        (base / ".venv" / "pyvenv.cfg").write_text("home = C:\\Python312\n")
        (base / ".venv" / "Scripts" / "python.exe").write_bytes(b"")
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps({"basePath": winepath(base), "installState": "installed"}))
        denv = dict(env, VRAMBISECT_PYTHON=winepath(base / ".venv" / "Scripts" / "python.exe"))
        p = wine([exe, "doctor", "--json"], cwd=tmp, env=denv)
        d = (as_json(p) or {}).get("defaults") or {}
        check(
            "ComfyUI Desktop: its own ComfyUI folder, its base folder's .venv",
            d.get("comfyui", {}).get("path", "").lower().endswith("@comfyorgcomfyui-electron\\resources\\comfyui")
            and d.get("comfyui", {}).get("source", "").startswith("ComfyUI Desktop's own ComfyUI folder")
            and d.get("python", {}).get("path", "").lower().endswith("comfyui-vrambisect-check\\.venv\\scripts\\python.exe"),
            json.dumps(d) + p.stderr.strip()[-200:],
        )
    finally:
        for m in made:
            if m.is_dir():
                shutil.rmtree(m, ignore_errors=True)
            elif m.exists():
                m.unlink()


def main():
    platform, wheel = sys.argv[1], pathlib.Path(sys.argv[2]).resolve()
    figures["wheel"] = wheel.name
    figures["wheel_bytes"] = wheel.stat().st_size
    with zipfile.ZipFile(wheel) as z:
        figures["program_bytes"] = max(i.file_size for i in z.infolist() if "/scripts/" in i.filename)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="vrambisect-wheel-check-"))
    try:
        if platform == "unix":
            unix(wheel, tmp)
        else:
            shim = pathlib.Path(sys.argv[5]) if len(sys.argv) > 5 else None
            windows(wheel, tmp, pathlib.Path(sys.argv[3]), pathlib.Path(sys.argv[4]), shim)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = REPO / "target" / ("wheel-check-%s.json" % platform)
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print("figures: " + json.dumps(figures))
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
