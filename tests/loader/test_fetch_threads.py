"""The read-ahead's fetch threads never keep a failed process alive: a fetch stalled on a server that does not
answer (minutes of retries) is abandoned when the process ends on its one-line error."""

import subprocess
import sys
import time

STALLED = """
import threading, time
from loader.files import ChunkFetcher, ReadOptions
fetcher = ChunkFetcher(ReadOptions(fetch_threads=2))
started = threading.Event()
def stalled():
    started.set()
    time.sleep(120)  # a range read retried against a server that never answers
fetcher._pool.submit(stalled)
started.wait()
raise SystemExit("error: a read stalled")
"""


def test_a_process_ends_at_once_with_a_fetch_in_flight():
    begun = time.monotonic()
    done = subprocess.run([sys.executable, "-c", STALLED], capture_output=True, text=True, timeout=100)
    took = time.monotonic() - begun
    assert done.returncode == 1 and done.stderr.strip() == "error: a read stalled", done.stderr[-2000:]
    assert took < 20, took


def test_the_fetch_threads_run_calls_and_hand_back_their_results_and_errors():
    from loader.files import DaemonPool

    pool = DaemonPool(2, "test-fetch")
    assert pool.submit(lambda a, b: a + b, 2, 3).result(timeout=5) == 5
    failed = pool.submit(lambda: 1 / 0)
    assert isinstance(failed.exception(timeout=5), ZeroDivisionError)
    pool.shutdown()
