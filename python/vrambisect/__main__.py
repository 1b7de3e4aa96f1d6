"""``python -m vrambisect ARGS``: runs the vrambisect program with ARGS.

The program learns which Python started it (``VRAMBISECT_PYTHON``): that interpreter is the
default ``--python``, and the ComfyUI folder is found from it. On Unix the program replaces
this process, so its exit status and signals are its own. On Windows it runs as a child that
shares this console: Ctrl-C, Ctrl-Break and closing the window reach it directly, and this
process waits for it and exits with its status.
"""

import os
import sys

from vrambisect import find_vrambisect_bin


def _exit_status(code):
    """A Windows exit status (an unsigned 32-bit number) as sys.exit takes it."""
    return code - (1 << 32) if code >= (1 << 31) else code


def main():
    try:
        program = find_vrambisect_bin()
    except FileNotFoundError as e:
        sys.stderr.write("vrambisect: error: %s\n" % e)
        return 3
    if sys.executable:
        os.environ["VRAMBISECT_PYTHON"] = sys.executable
    argv = [program] + sys.argv[1:]
    if os.name != "nt":
        os.execv(program, argv)
    import signal
    import subprocess

    # The program handles the console's Ctrl-C and Ctrl-Break itself (it stops ComfyUI
    # cleanly); here they must not end the wait, or the status would be lost.
    for name in ("SIGINT", "SIGBREAK"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), lambda *_: None)
    child = subprocess.Popen(argv)
    while True:
        try:
            return _exit_status(child.wait())
        except KeyboardInterrupt:
            continue


if __name__ == "__main__":
    sys.exit(main())
