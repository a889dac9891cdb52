"""A worker pool whose workers died of the process group's SIGTERM shuts down, rather than waiting forever for
the task queue's lock an idle worker held when it died (it held the store's writer lock with it)."""

import os
import signal
import threading
import time

import multiprocess

from pipeline.runner import POOL_LOCK_SECONDS, shutdown_past_dead_workers


def test_a_pool_whose_idle_workers_died_of_sigterm_shuts_down_promptly():
    shutdown_past_dead_workers()
    pool = multiprocess.get_context("fork").Pool(2)
    assert pool.map(abs, [-1, -2]) == [1, 2]
    time.sleep(0.2)  # both idle: one waits for its next task holding the task queue's read lock
    for worker in list(pool._pool):
        os.kill(worker.pid, signal.SIGTERM)  # the default action: gone on the spot, the lock never released
    time.sleep(0.2)
    closing = threading.Thread(target=pool.terminate, daemon=True)
    closing.start()
    closing.join(timeout=POOL_LOCK_SECONDS + 60)  # guards a hang only: without the fix it never returns
    assert not closing.is_alive(), "the pool's shutdown waits for a lock a dead worker held"


def test_a_pool_whose_worker_died_holding_the_result_queue_lock_shuts_down():
    """A worker killed between sending its result and releasing the result queue's write lock: the shutdown's
    sentinel on that queue does not wait for it forever."""
    shutdown_past_dead_workers()
    pool = multiprocess.get_context("fork").Pool(2)
    assert pool.map(abs, [-1, -2]) == [1, 2]
    holder = os.fork()
    if holder == 0:  # stands for the worker: takes the lock and dies holding it
        pool._outqueue._wlock.acquire()
        os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(holder, 0)
    closing = threading.Thread(target=pool.terminate, daemon=True)
    closing.start()
    closing.join(timeout=2 * POOL_LOCK_SECONDS + 60)  # only guards a hang
    assert not closing.is_alive(), "the pool's shutdown waits for the result queue's lock a dead worker held"
