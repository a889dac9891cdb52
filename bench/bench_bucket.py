"""The pipeline on a bucket (moto's S3 server behind a counting proxy) at 1x and 8x the documents: who moves what.

Sources, work directory and store are on S3; every request goes through `testkit.counting_proxy`, which ties it
to the process that sent it (the driver names itself; each staged task names itself by stage, run and rank).
The file and task counts stay the same, the documents per file grow 8x, so the driver's work (files, cells,
tasks) stays the same while every task's own inputs grow 8x. Reported per size:
- the driver's bytes read (the sources' fingerprint ranges and first-record blocks apart) and written, and with
  `--files` what it read of each object at each size;
- per task kind (filter, the dedup runs, sample, tokenize, decontaminate, split, publish), the largest task's
  bytes read against its own inputs: a filter task's dealt files and inputs file; a sample task's sketch and
  rows of each removal part; a tokenize task's staged files of its rank and its removal rows; a decontaminate
  or split task's token runs and shards of its rank; a publish task's none (its copies are on the server); a
  dedup task's part slices of the signing tasks' records (it also reads its candidate pairs' signature rows,
  which grow with its part, so its bytes are compared per byte of its slices).

Targets: the driver's bytes beyond the sources, each task's bytes beyond its own inputs (a dedup task's per
byte of its slices) grow at most 1.2x from 1x to 8x; the sources' reads stay within files x 2 x 64 KiB plus
two 64 KiB blocks.

    python -m bench bucket            # base 60 documents a file, 4 files, 4 tasks (about ten minutes)
    python -m bench.bench_bucket --base 200 --files
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import tempfile
from pathlib import Path

from bench.result import Result

FILES, TASKS, WORKERS, SCALES = 4, 4, 2, (1, 8)
DRIVER = "millrace-driver"


def _own_inputs(fs, root: str, listing: dict[str, int], sources: dict[str, int], kind: str, rank: int, known: dict):
    """The bytes of a task's own inputs; for a dedup task, its part's slices of the signing tasks' records (it
    also reads the signature rows of its own candidate pairs, which grow with its part: its bytes read are
    compared per byte of those slices)."""
    from pipeline.remote_work import TASK_INPUTS

    own_patterns = [p.format(rank=f"{rank:05d}") for p in TASK_INPUTS.get(kind, ()) if "{rank}" in p]
    staged = sum(size for rel, size in listing.items() if any(_matches(rel, p) for p in own_patterns))
    removals = known["removal_rows"].get(rank, 0)
    if kind == "filter":  # its inputs file and the source files dealt to it
        dealt = json.loads(fs.cat_file(f"{root}/inputs/{rank:05d}.json"))
        files = [
            f"{folder.rstrip('/')}/{rel}" for shares in dealt.values() for _, folder, own in shares for rel, _ in own
        ]
        return staged + sum(sources[f.split("://", 1)[-1]] for f in files)
    if kind.startswith("dedup."):  # its part's slices of every signing task's exact and band records
        return known["part_slices"].get(rank, 0)
    if kind == "sample":  # its sketch and its rows of each removal part
        return listing.get(f"samples/{rank:05d}.jsonl.zst", 0) + removals
    if kind == "tokenize":
        return staged + removals
    if kind in ("decontaminate", "split"):
        return staged
    if kind == "publish":  # nothing: its shards are copied on the server, it lists its own names only
        return 0
    return None


def _matches(relative: str, pattern: str) -> bool:
    """Whether a work file is what a `TASK_INPUTS` pattern names (a file, a folder or a glob)."""
    return fnmatch.fnmatch(relative, pattern) or relative.startswith(pattern.rstrip("/") + "/")


def _part_slices(fs, root: str) -> dict[int, int]:
    """Per dedup part, the bytes of its slices of every signing task's exact and band records."""
    import io

    import numpy as np

    from pipeline.steps.dedup.signing import RECORD_KINDS

    slices: dict[int, int] = {}
    for task in fs.ls(f"{root}/signatures", detail=False):
        offsets = np.load(io.BytesIO(fs.cat_file(f"{task}/parts.npy")))
        for row, kind in enumerate(RECORD_KINDS):
            head = fs.cat_file(f"{task}/{kind}.npy", start=0, end=4096)
            itemsize = _itemsize(head)
            for part in range(offsets.shape[1] - 1):
                rows = int(offsets[row][part + 1] - offsets[row][part])
                slices[part] = slices.get(part, 0) + rows * itemsize
    return slices


def _itemsize(head: bytes) -> int:
    """The record size of a `.npy` file from its first bytes."""
    import io

    import numpy as np

    handle = io.BytesIO(head)
    version = np.lib.format.read_magic(handle)
    reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, _, dtype = reader(handle)
    return int(dtype.itemsize * (int(np.prod(shape[1:])) if len(shape) > 1 else 1))


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

    from millrace.home import Home
    from pipeline.runner import run_pipeline

    name = f"c{documents_per_file}"
    opts = {**server.storage_options, "client_kwargs": {"endpoint_url": proxy.endpoint, "region_name": "us-east-1"}}
    config = _bucket_config(tmp, documents_per_file, name, opts)
    proxy.reset()
    run_pipeline(config, Home.resolve(tmp / f"home-{documents_per_file}"))
    counts, driver_paths = proxy.totals(), proxy.read_by_path(DRIVER)  # before this bench's own reads below
    fs, _ = fsspec.core.url_to_fs("s3://data", **opts)
    root = f"data/work/{name}/2026.01.01"
    listing = {p[len(root) + 1 :]: int(i["size"]) for p, i in fs.find(root, detail=True).items()}
    sources = {p: int(i["size"]) for p, i in fs.find(f"data/{name}", detail=True).items()}
    known = {"removal_rows": _removal_rows(fs, root), "part_slices": _part_slices(fs, root)}
    others = {client: entry for client, entry in counts.items() if not client.startswith("millrace-")}
    return {
        "driver": counts.get(DRIVER, {"read": 0, "written": 0}),
        "stages": _largest_tasks(
            counts, lambda kind, rank: _own_inputs(fs, root, listing, sources, kind, rank, known)
        ),
        "corpus": sum(sources.values()),
        "signatures": sum(size for rel, size in listing.items() if rel.startswith("signatures/")),
        "others": others,
        "driver_areas": _driver_areas(driver_paths),
        "driver_files": {path.replace(name, "<corpus>"): n for path, n in sorted(driver_paths.items())},
        "driver_sources": sum(n for path, n in driver_paths.items() if path.startswith(f"/data/{name}/")),
    }


def _bucket_config(tmp: Path, documents_per_file: int, name: str, opts: dict):
    """The corpus written and uploaded to s3://data/<name>, and a pipeline config with everything on the bucket
    (sources, work directory, store) through the counting proxy."""
    import bench.bench_pipeline_scale as scale
    from pipeline.config import parse_pipeline_config
    from testkit.s3 import upload_tree

    scale.DOCS_PER_FILE = documents_per_file
    corpus = tmp / f"corpus-{documents_per_file}"
    scale.write_corpus(corpus, documents_per_file * FILES)
    upload_tree(corpus, f"s3://data/{name}", opts)
    return parse_pipeline_config(
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


def _largest_tasks(counts: dict[str, dict], own_inputs) -> dict[str, dict]:
    """Per task kind (every round of the dedup's components as one kind), the task that read the most: its bytes
    read, its own inputs' bytes (`own_inputs(kind, rank)`) and its rank."""
    stages: dict[str, dict] = {}
    for client, entry in counts.items():
        if not client.startswith("millrace-") or client == DRIVER:
            continue
        kind, rank = client[len("millrace-") :].rsplit("-", 1)
        kind = kind.rsplit("-", 1)[0] if kind.startswith("dedup.components") else kind  # every round as one kind
        if entry["read"] > stages.get(kind, {}).get("read", -1):
            stages[kind] = {"read": entry["read"], "own": own_inputs(kind, int(rank)), "rank": int(rank)}
    return stages


def _driver_areas(driver_paths: dict[str, int]) -> dict[str, int]:
    """The driver's bytes read by area of the bucket (listings, each work folder, the sources), largest first."""
    areas: dict[str, int] = {}
    for path, n in driver_paths.items():
        parts = path.strip("/").split("/")
        area = "listings" if len(parts) == 1 else "work/" + parts[4] if parts[1] == "work" else parts[1]
        areas[area] = areas.get(area, 0) + n
    return dict(sorted(areas.items(), key=lambda kv: -kv[1]))


def measure(base: int) -> dict[int, dict]:
    from testkit.counting_proxy import counting_proxy
    from testkit.s3 import s3_server

    os.environ["AWS_SDK_UA_APP_ID"] = DRIVER  # the tasks name themselves (pipeline.remote_work.StagedTask)
    with tempfile.TemporaryDirectory() as name, s3_server("data") as server, counting_proxy(server.endpoint) as proxy:
        return {s: run_once(Path(name), base * s, server, proxy) for s in SCALES}


def results(runs: dict[int, dict]) -> list[Result]:
    """The largest size against the smallest: the driver's figures, then each task kind's."""
    small, large = runs[SCALES[0]], runs[SCALES[-1]]
    return _driver_results(small, large) + _task_results(small, large)


def _driver_results(small: dict, large: dict) -> list[Result]:
    """The driver's bytes read (beyond the sources' fingerprint ranges) and written must not grow with the
    documents; its reads of the sources stay within the fingerprint and first-record blocks."""
    from pipeline.steps.read.fields import FIRST_RECORD_BLOCK
    from pipeline.work import FINGERPRINT_BYTES

    grown = f"{SCALES[-1]}x vs {SCALES[0]}x"
    return [
        Result(
            f"driver bytes read beyond the sources' fingerprint ranges, {grown}",
            large["driver"]["read"] - large["driver_sources"],
            small["driver"]["read"] - small["driver_sources"],
            f"{SCALES[0]}x",
            "B",
            higher_is_better=False,
            target=1 / 1.2,
        ),
        Result(
            f"driver bytes read of the sources (fingerprints, first record), {SCALES[-1]}x",
            large["driver_sources"],
            FILES * 2 * FINGERPRINT_BYTES + 2 * FIRST_RECORD_BLOCK,
            "files x 2 x 64 KiB + 2 x 64 KiB",
            "B",
            higher_is_better=False,
            target=1.0,
        ),
        Result(
            f"driver bytes written, {grown}",
            large["driver"]["written"],
            small["driver"]["written"],
            f"{SCALES[0]}x",
            "B",
            higher_is_better=False,
            target=1 / 1.2,
        ),
    ]


def _task_results(small: dict, large: dict) -> list[Result]:
    """Per task kind, the largest task's bytes beyond its own inputs (a dedup task's per byte of its slices) must
    not grow with the documents; its bytes read, for scale."""
    grown = f"{SCALES[-1]}x vs {SCALES[0]}x"
    out = []
    for kind in sorted(large["stages"]):
        a, b = small["stages"].get(kind), large["stages"][kind]
        if a is None:
            continue
        if kind.startswith("dedup."):
            out.append(
                Result(
                    f"largest {kind} task's bytes read per byte of its part's signature slices, {grown}",
                    b["read"] / b["own"],
                    a["read"] / a["own"],
                    f"{SCALES[0]}x",
                    "B/B",
                    higher_is_better=False,
                    target=1 / 1.2,
                )
            )
        elif a["own"] is not None and b["own"] is not None:
            out.append(
                Result(
                    f"largest {kind} task's bytes beyond its own inputs, {grown}",
                    b["read"] - b["own"],
                    a["read"] - a["own"],
                    f"{SCALES[0]}x",
                    "B",
                    higher_is_better=False,
                    target=1 / 1.2,
                )
            )
        out.append(
            Result(f"largest {kind} task's bytes read, {grown}", b["read"], a["read"], f"{SCALES[0]}x", "B", False)
        )
    return out


def main(base: int = 60, files: bool = False) -> list[Result]:
    runs = measure(base)
    for s, run in runs.items():
        print(f"  {s}x: corpus {run['corpus']:,} B, signatures {run['signatures']:,} B, driver {run['driver']}")
        print(f"    the driver's reads by area: {run['driver_areas']}")
        if run["others"]:
            print(f"    requests naming no millrace process: {run['others']}")
        for kind, entry in sorted(run["stages"].items()):
            own = "not known exactly" if entry["own"] is None else f"{entry['own']:,} B"
            print(f"    {kind}: largest task (rank {entry['rank']}) read {entry['read']:,} B, its own inputs {own}")
    if files:  # every object the driver read, at each size, the most grown first
        small, large = (runs[s]["driver_files"] for s in (SCALES[0], SCALES[-1]))
        rows = [(path, small.get(path, 0), large.get(path, 0)) for path in sorted({*small, *large})]
        for path, a, b in sorted(rows, key=lambda row: row[1] - row[2]):
            print(f"    driver read {path}: {a:,} B at {SCALES[0]}x, {b:,} B at {SCALES[-1]}x")
    return results(runs)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=int, default=60, help="documents per input file at 1x (4 files)")
    parser.add_argument("--files", action="store_true", help="print the driver's bytes read per object at each size")
    args = parser.parse_args()
    for result in main(args.base, args.files):
        print(result.line())
