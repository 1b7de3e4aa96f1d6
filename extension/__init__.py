"""vrambisect inside ComfyUI: a panel that reads a failed prompt's log, diagnoses it with
``vrambisect bisect`` on this install, and writes the bug report bundle.

A node pack with no nodes: server routes under ``/vrambisect/`` (routes.py) and a frontend
script (web/vrambisect.js). The work is done by the vrambisect program in this ComfyUI's
Python (the ``vrambisect`` wheel that requirements.txt pins).
"""

NODE_CLASS_MAPPINGS = {}
NODE_DISPLAY_NAME_MAPPINGS = {}
WEB_DIRECTORY = "./web"

try:
    from server import PromptServer
except ImportError:  # imported outside ComfyUI (tests, tools): nothing to register
    PromptServer = None

if PromptServer is not None and getattr(PromptServer, "instance", None) is not None:
    from . import routes

    routes.register(PromptServer.instance)

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "WEB_DIRECTORY"]
