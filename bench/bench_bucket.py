"""The pipeline on a bucket (moto's S3 server behind a counting proxy) at 1x and 8x the documents: who moves what.

Sources, work directory and store are on S3; every request goes through `testkit.counting_proxy`, which ties it
to the process that sent it (the driver names itself; each staged task names itself by stage and rank). The
file and task counts stay the same, the documents per file grow 8x, so the driver's work (files, cells, tasks)
stays the same while every task's own inputs grow 8x. Reported per size:
- the driver's bytes read and written;
- per stage, the largest task's bytes read, and beyond its own inputs where they are known exactly (a filter
  task: its input files; a tokenize task: the files it stages, `TASK_INPUTS`, and its rows of each removal part).

Targets: the driver's bytes, and each task's bytes beyond its own inputs, grow at most 1.2x from 1x to 8x.

    python -m bench bucket            # base 60 documents a file, 4 files, 4 tasks (a few minutes)
    python -m bench.bench_bucket --base 200
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import tempfile
from pathlib import Path

from bench.result import Result

FILES, TASKS, WORKERS, SCALES = 4, 4, 2, (1, 8)
DRIVER = "millrace-driver"


def _own_inputs(listing: dict[str, int], stage: str, rank: int, duplicates: dict[int, int]) -> int | None:
    """The bytes of a task's own inputs on the work URL, where they are known exactly; None where not."""
    from pipeline.remote_work import TASK_INPUTS

    if stage != "tokenize":
        return None
    patterns = [p.format(rank=f"{rank:05d}") for p in TASK_INPUTS[stage]]
    staged = sum(size for rel, size in listing.items() if any(fnmatch.fnmatch(rel, p) or rel == p for p in patterns))
    return staged + duplicates.get(rank, 0)


def _removal_rows(fs, root: str) -> dict[int, int]:
    """Per filter task, the bytes of its rows in every removal part (what its tokenize task reads in place)."""
    import io

    import numpy as np

    rows: dict[int, int] = {}
    for path in fs.glob(f"{root}/duplicates/*.npy"):
        records = np.load(io.BytesIO(fs.cat_file(path)))
        for rank, count in zip(*np.unique(records["rank"], return_counts=True)):
            rows[int(rank)] = rows.get(int(rank), 0) + int(count) * records.dtype.itemsize
    return rows


def run_once(tmp: Path, documents_per_file: int, server, proxy) -> dict:
    """One pipeline run on the bucket; the bytes per client and each stage's largest task."""
    import fsspec

    import bench.bench_pipeline_scale as scale
    from millrace.home import Home
    from pipeline.config import parse_pipeline_config
    from pipeline.runner import run_pipeline
    from testkit.s3 import upload_tree

    scale.DOCS_PER_FILE = documents_per_file
    corpus = tmp / f"corpus-{documents_per_file}"
    scale.write_corpus(corpus, documents_per_file * FILES)
    opts = {**server.storage_options, "client_kwargs": {"endpoint_url": proxy.endpoint, "region_name": "us-east-1"}}
    name = f"c{documents_per_file}"
    upload_tree(corpus, f"s3://data/{name}", opts)
    config = parse_pipeline_config(
        {
            "sources": [
                {"name": "web", "paths": [f"s3://data/{name}"], "language_id": False, "storage_options": opts}
            ],
            # bounds the driver's reads that do not grow with the corpus, reached at 1x: the sample, the held out
            "tokenizer": {"vocab_size": 1000, "sample_bytes": 20_000},
            "validation": {"max_documents_per_cell": 10},
            "dedup": {"parts": 2},
            "output": {"name": name, "version": "2026.01.01", "url": "s3://data/stores", "storage_options": opts},
            "executor": {
                "tasks": TASKS,
                "workers": WORKERS,
                "work_url": "s3://data/work",
                "work_storage_options": opts,
            },
        },
        "bench",
        tmp,
    )
    proxy.reset()
    run_pipeline(config, Home.resolve(tmp / f"home-{documents_per_file}"))
    counts, driver_paths = proxy.totals(), proxy.read_by_path(DRIVER)  # before this bench's own reads below
    fs, _ = fsspec.core.url_to_fs("s3://data", **opts)
    root = f"data/work/{name}/2026.01.01"
    listing = {p[len(root) + 1 :]: int(i["size"]) for p, i in fs.find(root, detail=True).items()}
    inputs = {p.rsplit("/", 1)[-1]: int(i["size"]) for p, i in fs.find(f"data/{name}", detail=True).items()}
    duplicates = _removal_rows(fs, root)
    stages: dict[str, dict] = {}
    for client, entry in counts.items():
        if not client.startswith("millrace-") or client == DRIVER:
            continue
        stage, rank = client[len("millrace-") :].rsplit("-", 1)
        own = _own_inputs(listing, stage, int(rank), duplicates)
        if stage == "filter":  # its input files, dealt round-robin
            own = sum(size for i, (_, size) in enumerate(sorted(inputs.items())) if i % TASKS == int(rank))
        if entry["read"] > stages.get(stage, {}).get("read", -1):
            stages[stage] = {"read": entry["read"], "own": own, "rank": int(rank)}
    driver = counts.get(DRIVER, {"read": 0, "written": 0})
    signatures = sum(size for rel, size in listing.items() if rel.startswith("signatures/"))
    areas: dict[str, int] = {}
    for path, n in driver_paths.items():
        parts = path.strip("/").split("/")
        area = "listings" if len(parts) == 1 else "work/" + parts[4] if parts[1] == "work" else parts[1]
        areas[area] = areas.get(area, 0) + n
    others = {client: entry for client, entry in counts.items() if not client.startswith("millrace-")}
    return {
        "driver": driver,
        "stages": stages,
        "corpus": sum(inputs.values()),
        "signatures": signatures,
        "others": others,
        "driver_areas": dict(sorted(areas.items(), key=lambda kv: -kv[1])),
    }


def measure(base: int) -> dict[int, dict]:
    from testkit.counting_proxy import counting_proxy
    from testkit.s3 import s3_server

    os.environ["AWS_SDK_UA_APP_ID"] = DRIVER  # the tasks name themselves (pipeline.remote_work.StagedTask)
    with tempfile.TemporaryDirectory() as name, s3_server("data") as server, counting_proxy(server.endpoint) as proxy:
        return {s: run_once(Path(name), base * s, server, proxy) for s in SCALES}


def results(runs: dict[int, dict]) -> list[Result]:
    small, large = runs[SCALES[0]], runs[SCALES[-1]]
    out = []
    for what in ("read", "written"):
        out.append(
            Result(
                f"driver bytes {what}, {SCALES[0]}x vs {SCALES[-1]}x",
                large["driver"][what],
                small["driver"][what],
                f"{SCALES[0]}x",
                "B",
                higher_is_better=False,
                target=1 / 1.2,
            )
        )
    for stage in sorted(large["stages"]):
        a, b = small["stages"].get(stage), large["stages"][stage]
        if a is None:
            continue
        if a["own"] is not None and b["own"] is not None:
            out.append(
                Result(
                    f"largest {stage} task's bytes beyond its own inputs",
                    b["read"] - b["own"],
                    a["read"] - a["own"],
                    f"{SCALES[0]}x",
                    "B",
                    higher_is_better=False,
                    target=1 / 1.2,
                )
            )
        out.append(
            Result(
                f"largest {stage} task's bytes read",
                b["read"],
                a["read"],
                f"{SCALES[0]}x",
                "B",
                higher_is_better=False,
            )
        )
    return out


def main(base: int = 60) -> list[Result]:
    runs = measure(base)
    for s, run in runs.items():
        print(f"  {s}x: corpus {run['corpus']:,} B, signatures {run['signatures']:,} B, driver {run['driver']}")
        print(f"    the driver's reads by area: {run['driver_areas']}")
        if run["others"]:
            print(f"    requests naming no millrace process: {run['others']}")
        for stage, entry in sorted(run["stages"].items()):
            print(f"    {stage}: largest task (rank {entry['rank']}) read {entry['read']:,} B, own {entry['own']}")
    return results(runs)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=int, default=60, help="documents per input file at 1x (4 files)")
    for result in main(parser.parse_args().base):
        print(result.line())
