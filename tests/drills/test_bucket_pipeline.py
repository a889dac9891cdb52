"""Drill: the whole pipeline with sources, work directory and store on S3 (moto's server on loopback, its own
process, stopped by its PID), on Ray with two worker processes, each task in its own local scratch directory;
one worker SIGKILLed in the middle of the tokenize phase. The store equals, byte for byte, the one a local run
(local executor, work and store on this disk) builds from the same sources; so does a rerun by a driver with
a fresh, empty home, which finds every phase complete on the bucket and needs no task's disk. Neither driver
holds a token of the corpus: its disk has only the small files `DRIVER_READS` names, and the shards go from the
work bucket to the store's URL object to object."""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from millrace.home import Home
from pipeline.config import parse_pipeline_config
from pipeline.remote_work import DRIVER_READS, SCRATCH_PREFIX
from pipeline.runner import PipelineError, run_pipeline
from testkit.corpus import make_corpus, store_files
from testkit.s3 import download_tree, s3_server, upload_tree

pytest.importorskip("s3fs")
pytest.importorskip("moto")
pytestmark = pytest.mark.slow  # three pipeline runs and a Ray start-up

VERSION = "2026.01.02"


def config(opts: dict, **sections: dict):
    """Three sources of two layouts (a folder, one file, a folder URL with its slash) read from the bucket."""
    sources = [
        {"name": "articles", "paths": ["s3://data/corpus/articles"], "filters": ["gopher_repetition"]},
        {"name": "notes", "paths": ["s3://data/corpus/notes/notes.jsonl.zst"], "languages": ["en"]},
        {"name": "snippets", "paths": ["s3://data/corpus/snippets/"], "kind": "code", "language_id": False},
    ]
    data = {
        "sources": [{**s, "storage_options": opts} for s in sources],
        "tokenizer": {"vocab_size": 400},
        "output": {"version": VERSION, **sections.get("output", {})},
        "executor": {"tasks": 2, "workers": 2, **sections.get("executor", {})},
    }
    return parse_pipeline_config(data, "bucket drill", Path.cwd())


def driver_read(relative: str) -> bool:
    """Whether a file of the driver's work directory is one that `DRIVER_READS` names (all but the store's files)."""
    patterns = [p for phase, names in DRIVER_READS.items() if phase != "assemble" for p in names]
    return any(relative.startswith(p) if p.endswith("/") else fnmatch.fnmatch(relative, p) for p in patterns)


def tokens_held(home: Path) -> list[str]:
    """Files of the driver's home that hold the corpus's documents or tokens (none should)."""
    found = [p.relative_to(home).as_posix() for p in home.rglob("*") if p.is_file()]
    work = [f.split("/", 3)[3] for f in found if f.startswith("work/")]
    return [f for f in work if not driver_read(f)] + [f for f in found if f.endswith((".bin", ".parquet"))]


class TaskKiller(threading.Thread):
    """SIGKILLs the first task of `phase` seen in `scratch` (its directory names the task's PID), and the Ray
    worker that runs it (its parent: killing only the task's pool process would leave the worker waiting)."""

    def __init__(self, scratch: Path, phase: str):
        super().__init__(daemon=True)
        self.scratch, self.phase = scratch, phase
        self.killed: list[int] = []
        self.done = threading.Event()

    def run(self) -> None:
        prefix = f"{SCRATCH_PREFIX}{self.phase}-"
        while not self.done.is_set() and not self.killed:
            for entry in self.scratch.glob(f"{prefix}*") if self.scratch.is_dir() else ():
                pid = int(entry.name.split("-pid", 1)[1].split("-", 1)[0])
                parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
                for victim in (pid, parent):
                    os.kill(victim, signal.SIGKILL)
                    self.killed.append(victim)
                break
            time.sleep(0.01)


def test_ray_on_a_bucket_gives_the_local_store_through_a_killed_worker_and_a_fresh_driver(tmp_path):
    ray = pytest.importorskip("ray")
    corpus = make_corpus(tmp_path / "corpus")
    with s3_server("data") as server:
        opts = server.storage_options
        upload_tree(corpus, "s3://data/corpus", opts)
        local = run_pipeline(config(opts), Home.resolve(tmp_path / "home-local"))

        scratch = tmp_path / "scratch"
        on_bucket = config(
            opts,
            executor={
                "kind": "ray",
                "work_url": "s3://data/work",
                "work_storage_options": opts,
                "scratch": f"{scratch}",
            },
            output={"url": "s3://data/stores", "storage_options": opts},
        )
        killer = TaskKiller(scratch, "tokenize")
        killer.start()
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            with contextlib.suppress(PipelineError):  # the killed task's rank, if Ray gave up on it: rerun below
                run_pipeline(on_bucket, Home.resolve(tmp_path / "home-driver"))
            killer.done.set()
            assert len(killer.killed) == 2, "no tokenize task was seen running"
            # a driver on another machine: an empty home, everything it needs is on the bucket
            run_pipeline(on_bucket, Home.resolve(tmp_path / "home-fresh-driver"))
        finally:
            ray.shutdown()
        store = download_tree(f"s3://data/stores/local/{VERSION}", opts)
        assert store == store_files(local)
        for driver in ("home-driver", "home-fresh-driver"):
            assert tokens_held(tmp_path / driver) == [], driver
        assert tokens_held(tmp_path / "home-local") != []  # the check sees what a local run keeps

        work = download_tree(f"s3://data/work/local/{VERSION}", opts)
        workers = {json.loads(body)["worker"]["pid"] for name, body in work.items() if name.endswith("held-out.json")}
        assert len(workers) == 2 and os.getpid() not in workers and not set(killer.killed) & workers
        assert {f"logs/3-tokenize/completions/{rank:05d}" for rank in range(2)} <= set(work)
        # every task removed its scratch directory; the killed one's, a task that started after it
        assert [p.name for p in scratch.iterdir()] == []
