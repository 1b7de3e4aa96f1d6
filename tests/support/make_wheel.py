"""Builds a wheel of a made-up package into a folder that pip reads as a package index
(``--find-links``), with no network and no build tools.

    python3 make_wheel.py OUT NAME VERSION [--sdist]

The wheel holds one module (NAME with ``_`` for ``-``) whose ``__version__`` is VERSION, and
the metadata pip and ``importlib.metadata`` read. ``--sdist`` writes a source archive
instead: a version pip can install only by building it.
"""

import base64
import hashlib
import io
import os
import sys
import tarfile
import zipfile


def record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "{},sha256={},{}".format(path, digest, len(data))


def wheel(out, name, version):
    module = name.replace("-", "_")
    dist = "{}-{}.dist-info".format(module, version)
    files = {
        module + "/__init__.py": '__version__ = "{}"\n'.format(version).encode(),
        dist + "/METADATA": "Metadata-Version: 2.1\nName: {}\nVersion: {}\n".format(name, version).encode(),
        dist + "/WHEEL": b"Wheel-Version: 1.0\nGenerator: make_wheel\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [record_line(p, d) for p, d in files.items()] + [dist + "/RECORD,,"]
    files[dist + "/RECORD"] = ("\n".join(record) + "\n").encode()
    path = os.path.join(out, "{}-{}-py3-none-any.whl".format(module, version))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for p, d in files.items():
            z.writestr(p, d)
    return path


def sdist(out, name, version):
    module = name.replace("-", "_")
    top = "{}-{}".format(module, version)
    path = os.path.join(out, top + ".tar.gz")
    setup = "from setuptools import setup\nsetup(name={!r}, version={!r})\n".format(name, version).encode()
    with tarfile.open(path, "w:gz") as t:
        info = tarfile.TarInfo(top + "/setup.py")
        info.size = len(setup)
        t.addfile(info, io.BytesIO(setup))
    return path


if __name__ == "__main__":
    out, name, version = sys.argv[1:4]
    os.makedirs(out, exist_ok=True)
    make = sdist if "--sdist" in sys.argv[4:] else wheel
    print(make(out, name, version))
