"""Drill: the whole pipeline with sources, work directory and store on S3 (moto's server on loopback, its own
process, stopped by its PID), on Ray with two worker processes, each task in its own local scratch directory;
one worker SIGKILLed in the middle of the tokenize phase. The store equals, byte for byte, the one a local run
(local executor, work and store on this disk) builds from the same sources; so does a rerun by a driver with
a fresh, empty home, which finds every phase complete on the bucket and needs no task's disk. Neither driver
holds a token of the corpus: its disk has only the small files `DRIVER_READS` names, and the shards go from the
work bucket to the store's URL object to object.

The Ray runs' requests go through `testkit.counting_proxy`, which ties each to its process: by construction the
driver reads O(files + cells + tasks) (`assert_driver_reads_bounded`) and each task only its own inputs and
files whose size the config bounds (`assert_tasks_read_their_own`); `python -m bench bucket` measures the same
at 1x and 8x the documents."""

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
from millrace.ray_cluster import connect_ray
from pipeline.config import parse_pipeline_config
from pipeline.remote_work import DRIVER_READS, SCRATCH_PREFIX
from pipeline.runner import PipelineError, run_pipeline
from testkit.corpus import make_corpus, store_files
from testkit.counting_proxy import counting_proxy
from testkit.s3 import download_tree, s3_server, upload_tree

pytest.importorskip("s3fs")
pytest.importorskip("moto")
pytestmark = pytest.mark.slow  # three pipeline runs and a Ray start-up

VERSION = "2026.01.02"
DRIVER = "millrace-driver"
DRIVER_RUNS = 2  # on the bucket: the run whose worker is killed, then the fresh driver's
WORK = f"/data/work/local/{VERSION}/"
# what the driver reads of the work URL: the small files it pulls (`DRIVER_READS`), the sample read in place
# up to its budget, the held-out candidates chosen (at most `max_documents_per_cell` a cell); never a folder
# that grows with the documents (filtered/, removed/, signatures/, duplicates/, samples/, store/)
DRIVER_READ = {
    *(p.split("/")[0].split("*")[0] for names in DRIVER_READS.values() for p in names if not p.startswith("store")),
    "deduplicated-samples",
    "tokens",
}


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


def assert_driver_reads_bounded(reads: dict[str, int], corpus: dict[str, bytes]) -> None:
    """Of each source file at most its two fingerprint ranges and the first record's blocks; of the work URL
    only what `DRIVER_READ` names (under tokens/, only the held-out candidates, read in place: never a task's token
    runs)."""
    from pipeline.steps.read.fields import FIRST_RECORD_BLOCK
    from pipeline.work import FINGERPRINT_BYTES

    for path, n in reads.items():
        if path.startswith("/data/corpus/") and path[len("/data/corpus/") :] in corpus:  # (else a folder probed)
            size = len(corpus[path[len("/data/corpus/") :]])
            assert n <= DRIVER_RUNS * (min(size, 2 * FINGERPRINT_BYTES) + min(size, 2 * FIRST_RECORD_BLOCK)), path
        elif path.startswith(WORK) and "." in path.rsplit("/", 1)[-1]:  # (else a folder probed: not found)
            relative = path[len(WORK) :]
            assert relative.split("/")[0] in DRIVER_READ or relative.startswith("logs/"), path
            if relative.startswith("tokens/"):  # the candidates' hashes, the chosen ones' rows and tokens
                assert relative.endswith(("held-out.json", ".placed.npz", ".candidates.tokens")), path


def assert_tasks_read_their_own(reads: dict[str, dict[str, int]], dealt: dict[int, set[str]]) -> None:
    """A filter task reads the source files dealt to it and lists no source; a tokenize, decontaminate or split
    task reads no other rank's documents or token runs; no task reads the raw sketches but its own."""
    for client, paths in reads.items():
        if not client.startswith("millrace-") or client == DRIVER:
            continue
        kind, rank = client[len("millrace-") :].rsplit("-", 1)
        read = {path for path, n in paths.items() if n}
        sources = {p[len("/data/corpus/") :] for p in read if p.startswith("/data/corpus/")}
        assert sources <= (dealt[int(rank)] if kind == "filter" else set()), client
        assert not [p for p in read if p.startswith("/data?prefix=corpus")], f"{client} listed a source"
        others = [p for p in read if p.startswith(WORK) and _other_rank(p[len(WORK) :], int(rank))]
        assert others == [] or kind.startswith("dedup") or kind == "publish", (client, others)


def _other_rank(relative: str, rank: int) -> bool:
    """Whether a work file is another filter task's documents, sketch or token run."""
    parts = relative.split("/")
    own = f"{rank:05d}"
    if parts[0] in ("filtered", "samples", "deduplicated-samples"):
        return not parts[-1].startswith(own)
    if parts[0] == "removed" or (parts[0] == "tokens" and len(parts) > 2):
        return (parts[-1] if parts[0] == "removed" else parts[1]).split(".")[0] != own
    return False


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


def run_killed_then_fresh(on_bucket, scratch: Path, tmp_path: Path) -> TaskKiller:
    """Run on Ray with two workers while a `TaskKiller` SIGKILLs the first tokenize task and its worker, then
    again from a driver with a fresh, empty home (a driver on another machine); the killer, with its victims."""
    import ray  # lazy: optional extra (ray), skipped above when missing

    killer = TaskKiller(scratch, "tokenize")
    killer.start()
    connect_ray(2)
    try:
        with contextlib.suppress(PipelineError):  # the killed task's rank, if Ray gave up on it: rerun below
            run_pipeline(on_bucket, Home.resolve(tmp_path / "home-driver"))
        killer.done.set()
        assert len(killer.killed) == 2, "no tokenize task was seen running"
        # a driver on another machine: an empty home, everything it needs is on the bucket
        run_pipeline(on_bucket, Home.resolve(tmp_path / "home-fresh-driver"))
    finally:
        ray.shutdown()
    return killer


def dealt_files(inputs: dict[str, bytes]) -> dict[int, set[str]]:
    """Each filter task's source files (relative to the corpus), from the inputs files the driver dealt."""
    return {
        int(name.split(".")[0]): {
            f"{folder.split('/corpus/', 1)[1].rstrip('/')}/{rel}".lstrip("/")
            for shares in json.loads(body).values()
            for _, folder, own in shares
            for rel, _ in own
        }
        for name, body in inputs.items()
    }


def test_ray_on_a_bucket_gives_the_local_store_through_a_killed_worker_and_a_fresh_driver(tmp_path, monkeypatch):
    pytest.importorskip("ray")
    corpus = make_corpus(tmp_path / "corpus")
    with s3_server("data") as server, counting_proxy(server.endpoint) as proxy:
        opts = server.storage_options
        upload_tree(corpus, "s3://data/corpus", opts)
        local = run_pipeline(config(opts), Home.resolve(tmp_path / "home-local"))

        scratch = tmp_path / "scratch"
        counted = {**opts, "client_kwargs": {**opts["client_kwargs"], "endpoint_url": proxy.endpoint}}
        monkeypatch.setenv("AWS_SDK_UA_APP_ID", DRIVER)  # each task names itself (`StagedTask`)
        on_bucket = config(
            counted,
            executor={
                "kind": "ray",
                "work_url": "s3://data/work",
                "work_storage_options": counted,
                "scratch": f"{scratch}",
            },
            output={"url": "s3://data/stores", "storage_options": counted},
        )
        killer = run_killed_then_fresh(on_bucket, scratch, tmp_path)
        reads = proxy.reads()
        inputs = download_tree(f"s3://data/work/local/{VERSION}/inputs", opts)
        store = download_tree(f"s3://data/stores/local/{VERSION}", opts)
        assert store == store_files(local)
        for driver in ("home-driver", "home-fresh-driver"):
            assert tokens_held(tmp_path / driver) == [], driver
        assert tokens_held(tmp_path / "home-local") != []  # the check sees what a local run keeps
        files = {p.relative_to(corpus).as_posix(): p.read_bytes() for p in corpus.rglob("*") if p.is_file()}
        assert_driver_reads_bounded(reads[DRIVER], files)
        dealt = dealt_files(inputs)
        assert sorted(f for own in dealt.values() for f in own) == sorted(files)  # each file dealt once
        assert_tasks_read_their_own(reads, dealt)
        assert {c.rsplit("-", 1)[0] for c in reads if c.startswith("millrace-") and c != DRIVER} >= {
            "millrace-filter",
            "millrace-sample",
            "millrace-tokenize",
            "millrace-split",
            "millrace-publish",
        }  # every task's requests carry its name

        work = download_tree(f"s3://data/work/local/{VERSION}", opts)
        workers = {json.loads(body)["worker"]["pid"] for name, body in work.items() if name.endswith("held-out.json")}
        assert len(workers) == 2 and os.getpid() not in workers and not set(killer.killed) & workers
        assert {f"logs/3-tokenize/completions/{rank:05d}" for rank in range(2)} <= set(work)
        # every task removed its scratch directory; the killed one's, a task that started after it
        assert [p.name for p in scratch.iterdir()] == []
