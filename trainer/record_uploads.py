"""Rank 0's copies of a run's records to its URL (`trainer.run_url.push_records`), on one background thread, so
that no rank waits on the object store after a checkpoint.

After each checkpoint the training thread notes each record file's size (a stat per file: the records as they
stand at the checkpoint; `.jsonl` files only grow until a resume cuts them back) and queues that snapshot; the
uploader pushes the snapshots one at a time, in order, each `.jsonl` as its new tail up to the noted size. The
queue is bounded (`DEPTH`), and the run finishes the previous push before queueing the next
(`Training.push_records`): a store slower than the checkpoints holds the training thread at the next
checkpoint rather than letting pushes pile up. `flush` waits for every queued push; the run flushes and joins
the thread when it ends, is preempted, is interrupted or fails. A failed push stops the uploader and is raised
on the training thread at its next submit or flush, as one line naming the URL: never dropped.
"""

from __future__ import annotations

import logging
import queue
import threading
from pathlib import Path
from types import TracebackType

from millrace.errors import ArtifactError
from trainer.run_url import RemoteDir, forget_pushed, push_records, record_sizes

log = logging.getLogger(__name__)

DEPTH = 2  # snapshots waiting at most: the one being pushed and the next checkpoint's


class RecordUploads:
    """The run's records pushed to `remote` on one thread, in the order `submit` was called."""

    def __init__(self, run_dir: Path, remote: RemoteDir, depth: int = DEPTH):
        self.run_dir, self.remote = run_dir, remote
        forget_pushed(remote)  # a run resumed in the same process (a fleet worker): its first push goes up whole
        self._queue: queue.Queue[dict[str, int] | None] = queue.Queue(maxsize=depth)
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name=f"records to {remote}", daemon=True)
        self._thread.start()

    def submit(self) -> None:
        """Queue the records as they stand now (blocks while `depth` snapshots wait); a failed earlier push is
        raised here."""
        self._raise_failure()
        self._queue.put(record_sizes(self.run_dir))

    def flush(self) -> None:
        """Wait until every queued snapshot is at the URL (or one failed: raised here)."""
        self._queue.join()
        self._raise_failure()

    def close(self) -> None:
        """Flush, then end and join the thread (a second close does nothing)."""
        if not self._thread.is_alive():
            self._raise_failure()
            return
        try:
            self.flush()
        finally:
            self._queue.put(None)
            self._thread.join()

    def __enter__(self) -> RecordUploads:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, trace: TracebackType | None
    ) -> None:
        """Closed on the way out; while another error propagates, a failed upload is logged, not raised over it."""
        try:
            self.close()
        except ArtifactError as failure:
            if kind is None:
                raise
            log.error("%s", failure)

    def _work(self) -> None:
        while True:
            sizes = self._queue.get()
            try:
                if sizes is None:
                    return
                if self._failure is None:  # after a failure, later tails would leave a gap: keep the first error
                    push_records(self.run_dir, self.remote, sizes)
            except BaseException as exc:  # handed to the training thread, never swallowed
                self._failure = exc
            finally:
                self._queue.task_done()

    def _raise_failure(self) -> None:
        failure = self._failure
        if failure is None:
            return
        if isinstance(failure, ArtifactError):
            raise ArtifactError(f"run records to {self.remote}: {failure}") from None
        first = str(failure).splitlines()[0] if str(failure) else ""
        raise ArtifactError(f"run records to {self.remote}: upload failed ({type(failure).__name__}: {first})")
