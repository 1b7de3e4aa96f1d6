"""vrambisect: diagnose ComfyUI memory failures and find the startup flags that fix them.

The tool is a single program installed with this package (in the environment's scripts
folder: ``bin/`` in a venv, ``Scripts\\`` on Windows and in the portable build's
``python_embeded``). ``python -m vrambisect ARGS`` runs it with ARGS; this module only finds it.
"""

import os
import sys
import sysconfig

__all__ = ["find_vrambisect_bin"]


def _scripts_dirs():
    """The folders where an installer may have put the program, most likely first."""
    yield sysconfig.get_path("scripts")
    # pip install --user
    for scheme in ("nt_user", "posix_user", "osx_framework_user"):
        if scheme in sysconfig.get_scheme_names():
            try:
                yield sysconfig.get_path("scripts", scheme=scheme)
            except KeyError:
                pass
    # pip install --target DIR puts the package in DIR and the program in DIR/bin.
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    yield os.path.join(package_parent, "bin")
    # pip install --prefix DIR: DIR/lib/pythonX.Y/site-packages/vrambisect, DIR/bin.
    prefix = package_parent
    for _ in range(3):
        prefix = os.path.dirname(prefix)
        yield os.path.join(prefix, "Scripts" if os.name == "nt" else "bin")
    # Next to the interpreter (an embeddable Python whose sysconfig knows no scripts folder).
    interpreter_dir = os.path.dirname(sys.executable or "")
    if interpreter_dir:
        yield os.path.join(interpreter_dir, "Scripts")
        yield interpreter_dir


def find_vrambisect_bin():
    """The path of the vrambisect program installed with this package."""
    name = "vrambisect.exe" if os.name == "nt" else "vrambisect"
    seen = []
    for folder in _scripts_dirs():
        if not folder or folder in seen:
            continue
        seen.append(folder)
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    raise FileNotFoundError(
        "the vrambisect program is not installed with this package (looked in: "
        + ", ".join(seen)
        + "); reinstall it with: python -m pip install --force-reinstall vrambisect"
    )
