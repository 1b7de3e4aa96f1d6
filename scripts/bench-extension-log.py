"""The extension's log follower (extension/core.py LogCapture.poll): the process time of one look
at a full ComfyUI log deque (300 entries) with new lines, and its share of a core at the
four looks a second the pack makes. BENCHMARKS.md records the figures.

    python3 scripts/bench-extension-log.py
"""

import collections
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "extension"))
import core  # noqa: E402


class Logger:
    logs = collections.deque(maxlen=300)

    def get_logs(self):
        return self.logs


def main(looks=4000):
    lg = Logger()
    for i in range(300):
        lg.logs.append({"t": "2026-01-01T00:00:%09.6f" % i, "m": "line %d of the log with some text\n" % i})
    cap = core.LogCapture()
    cap.attach(lg, start_thread=False)
    started = time.process_time()
    for i in range(looks):
        if i % 4 == 0:
            lg.logs.append({"t": "2026-01-02T00:00:%09.6f" % i, "m": "new line %d\n" % i})
        cap.poll()
    per = (time.process_time() - started) / looks
    print("one look: %.1f us; at 4 looks a second: %.3f %% of one core" % (per * 1e6, per * 4 * 100))


if __name__ == "__main__":
    main()
