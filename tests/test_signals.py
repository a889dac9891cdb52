"""SIGTERM under `sigterm_as_interrupt`: the process that installed it stops as Ctrl-C stops it; a child it
forked (the HTML extractor's sandbox, ended with SIGTERM after every WARC run) ends quietly as by default."""

import signal
import subprocess
import sys

FORKED = """
import os, signal, sys, time
from millrace.signals import sigterm_as_interrupt
with sigterm_as_interrupt():
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.write(write, b"up")
        time.sleep(30)
        os._exit(0)
    os.read(read, 2)
    os.kill(child, signal.SIGTERM)
    _, status = os.waitpid(child, 0)
    print(os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM)
"""

WATCHED = """
import os, signal, time
import millrace.signals as signals
signals.SHUTDOWN_GRACE_SECONDS = 0.5
with signals.sigterm_as_interrupt():
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
    except signals.TerminateSignal:
        time.sleep(30)  # an unwinding that never ends (a pool that cannot be shut down)
"""

# Many short commands in one process (the tests call `millrace.cli.main` in-process): after each, a new pipe takes
# the number of the watchdog's closed one, and a byte written to it must still be there a moment later. A watch
# thread scheduled late once read it: a subprocess's stdout, gone from `subprocess.run`'s output.
REUSED = """
import os, sys, time
from millrace.signals import sigterm_as_interrupt
sys.setswitchinterval(1e-6)  # switch threads as often as possible: a late watch thread is the race's one side
stolen = 0
for _ in range(300):
    with sigterm_as_interrupt(["x"]):
        pass
    read, write = os.pipe()
    os.write(write, b"x")
    time.sleep(0.002)
    os.set_blocking(read, False)
    try:
        stolen += os.read(read, 8) != b"x"
    except BlockingIOError:
        stolen += 1
    os.close(read)
    os.close(write)
print(stolen)
"""


def test_the_watch_thread_never_reads_a_pipe_number_the_block_gave_back():
    done = subprocess.run([sys.executable, "-c", REUSED], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "0", f"{done.stdout.strip()} of 300 bytes were read by a finished watch thread"


def test_a_forked_child_ends_by_the_signal_without_a_traceback():
    done = subprocess.run([sys.executable, "-c", FORKED], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "TerminateSignal" not in done.stderr, done.stderr[-2000:]


def test_a_stop_that_does_not_unwind_in_time_ends_with_143_and_one_line():
    done = subprocess.run(
        [sys.executable, "-c", WATCHED, "pipeline", "run", "p.toml"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 128 + signal.SIGTERM, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        "error: stopped by SIGTERM; shutting down took over 0.5s, so the process ends now; finished work is kept, "
        "continue with: millrace pipeline run p.toml"
    ]


BLOCKED = """
import signal, threading, time
import millrace.signals as signals
signals.SHUTDOWN_GRACE_SECONDS = 0.5
with signals.sigterm_as_interrupt(["millrace", "pipeline", "run", "p.toml"]):
    def deliver():
        time.sleep(0.2)
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # the kernel may pick any thread: this one
    threading.Thread(target=deliver, daemon=True).start()
    threading.Event().wait()  # the main thread waits in C: no Python handler runs until the wait ends
"""


def test_a_sigterm_taken_by_another_thread_while_the_main_one_waits_still_ends_the_process():
    done = subprocess.run([sys.executable, "-c", BLOCKED], capture_output=True, text=True, timeout=60)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr[-2000:]
    assert done.stderr.strip().endswith("continue with: millrace pipeline run p.toml"), done.stderr[-2000:]


DEFERRED = """
import os, signal, time
import millrace.signals as signals
signals.SHUTDOWN_GRACE_SECONDS = 0.3
with signals.sigterm_as_interrupt(["millrace", "train"]):
    with signals.StopRequest() as stop:  # a training loop: SIGTERM asks it to finish its step and checkpoint
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1.5)  # a checkpoint longer than the grace
        print(stop.requested)
"""


def test_a_sigterm_taken_as_a_request_is_not_cut_short_by_the_watchdog():
    done = subprocess.run([sys.executable, "-c", DEFERRED], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "True", (done.returncode, done.stderr[-2000:])
