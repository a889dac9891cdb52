"""Runs the pipeline and SIGKILLs its whole process group at a chosen point of a chosen phase.

    python -m tests.drills.kill_harness CONFIG HOME PHASE DELAY_SECONDS

The kill comes from a timer started when the runner announces PHASE, so it lands
DELAY seconds into that phase (or later, if the phase is shorter). Exit status 0
means the run finished before the timer fired.
"""

import os
import signal
import sys
import threading

from millrace.home import Home
from pipeline.config import load_pipeline_config
from pipeline.runner import run_pipeline


def main() -> int:
    config_path, home, phase, delay = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])

    def on_phase(label: str) -> None:
        if label == phase:
            threading.Timer(delay, lambda: os.killpg(os.getpgid(0), signal.SIGKILL)).start()

    run_pipeline(load_pipeline_config(config_path), Home.resolve(home), on_phase=on_phase)
    return 0


if __name__ == "__main__":
    sys.exit(main())
