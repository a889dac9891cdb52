"""The whole pipeline at 1x, 4x and 16x of a synthetic web-like corpus: memory per process and throughput.

Input: `base` documents per 1x (16,000 by default, so 16,000 -> 256,000 documents), 1,000
per `jsonl.zst` file and one task per file: zipf-distributed words, 80-400 per document, with
injected near-duplicates (1-5% of words edited), exact copies under other URLs and re-crawled
URLs with new text. For each size it reports wall time, documents/s and the peak resident
memory of the largest single process of the run (driver or worker, polled with psutil every
50 ms), with which process and stage that was, and the largest of the dedup stage's. The same
inputs then go through datatrove's four MinHash stages (signature, buckets,
its single-task cluster, filter; word splitting with the same `\\w+` regex as ours, so that
spaCy's cost does not dominate): time and peak memory of its largest process.

Targets (no process may hold state that grows with the corpus): the largest process's marginal memory from 1x to 16x
is at most 256
bytes per added document (reported for the whole run and for the dedup stage alone), and
throughput at 16x is at least 0.8 of throughput at 1x.

    python -m bench bench_pipeline_scale                  # base 16,000
    python -m bench.bench_pipeline_scale --base 2000      # smaller, on a loaded machine
    python -m bench.bench_pipeline_scale --dedup-only     # the dedup stages alone, 16,000 -> 256,000 docs
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

from bench.result import Result
from testkit.near_duplicates import edit_words, zipf_words

DOCS_PER_FILE = 1000
SCALES = (1, 4, 16)
WORKERS = 2
POLL_SECONDS = 0.05


def write_corpus(directory: Path, documents: int, seed: int = 3) -> None:
    """`documents` web-like records in files of DOCS_PER_FILE, with near, exact and URL duplicates."""
    import zstandard

    rng, np_rng = random.Random(seed), np.random.default_rng(seed)
    vocabulary = sorted(
        {"".join(rng.choice("etaoinshrdlucmfwyp") for _ in range(rng.randint(2, 9))) for _ in range(20000)}
    )
    directory.mkdir(parents=True, exist_ok=True)
    recent: list[list[str]] = []
    for file_index in range(0, documents, DOCS_PER_FILE):
        lines = []
        for i in range(file_index, min(file_index + DOCS_PER_FILE, documents)):
            roll = rng.random()
            if recent and roll < 0.08:
                words = edit_words(rng, rng.choice(recent), rng.uniform(0.01, 0.05), vocabulary)
            elif recent and roll < 0.11:
                words = rng.choice(recent)
            else:
                words = zipf_words(np_rng, vocabulary, rng.randint(80, 400))
                recent = (recent + [words])[-500:]
            url = f"https://site{i % 997}.example/page{i // 3 if roll > 0.97 else i}"  # some URLs re-crawled
            lines.append(json.dumps({"id": url, "text": " ".join(words)}))
        data = zstandard.ZstdCompressor(level=3).compress(("\n".join(lines) + "\n").encode())
        (directory / f"part-{file_index // DOCS_PER_FILE:05d}.jsonl.zst").write_bytes(data)


def _peak_rss_of_tree(command: list[str], phase_log: Path | None = None) -> tuple[float, dict[str, int]]:
    """(seconds, {where: largest resident set of any single process there}) for a subprocess's tree.

    Where: "driver" (the root process) or "worker", and the stage the run was in, from the last
    line of `phase_log` (which the run appends a line to as each stage starts) if given.
    """
    import psutil

    start = time.perf_counter()
    process = subprocess.Popen(command)
    root = psutil.Process(process.pid)
    peaks: dict[str, int] = {}
    while process.poll() is None:
        try:
            tree = [root] + root.children(recursive=True)
        except psutil.NoSuchProcess:
            break
        for member in tree:
            try:
                rss = member.memory_info().rss
            except psutil.Error:
                continue
            stage = phase_log.read_text().split()[-1:] if phase_log and phase_log.exists() else []
            where = " ".join(["driver" if member is root else "worker", *stage])
            peaks[where] = max(peaks.get(where, 0), rss)
        time.sleep(POLL_SECONDS)
    if process.wait():
        raise RuntimeError(f"{command[:3]} failed with exit code {process.returncode}")
    return time.perf_counter() - start, peaks


def run_millrace(corpus: Path, work: Path, tasks: int) -> tuple[float, dict[str, int]]:
    work.mkdir(parents=True, exist_ok=True)
    config = work / "p.toml"
    config.write_text(
        f'[[sources]]\nname = "web"\npaths = ["{corpus}"]\nlanguage_id = false\n'
        f'[tokenizer]\nvocab_size = 1000\nsample_bytes = 1000000\n[output]\nversion = "2026.01.01"\n'
        f"[executor]\ntasks = {tasks}\nworkers = {WORKERS}\n"
    )
    script = textwrap.dedent(f"""
        from millrace.home import Home
        from pipeline.config import load_pipeline_config
        from pipeline.runner import run_pipeline
        def on_phase(label):
            with open({str(work / "stages.log")!r}, "a") as log:
                log.write(label + "\\n")
        run_pipeline(load_pipeline_config({str(config)!r}), Home.resolve({str(work / "home")!r}), on_phase=on_phase)
    """)
    return _peak_rss_of_tree([sys.executable, "-c", script], work / "stages.log")


def run_dedup_only(corpus: Path, work: Path, tasks: int) -> tuple[float, dict[str, int]]:
    """Read and sign in `tasks` filter tasks, then find the duplicates: millrace's dedup stages alone."""
    work.mkdir(parents=True, exist_ok=True)
    script = textwrap.dedent(f"""
        from pathlib import Path
        from datatrove.executor import LocalPipelineExecutor
        from pipeline.config import DedupConfig, SourceConfig
        from pipeline.steps.dedup.signing import DedupSignatures
        from pipeline.steps.dedup.duplicates import find_duplicates
        from pipeline.steps.read.readers import ReadStep
        work, options = Path({str(work)!r}), DedupConfig()
        def stage(label):
            with open(work / "stages.log", "a") as log:
                log.write(label + "\\n")
        def run(name, pipeline, tasks):
            LocalPipelineExecutor(pipeline, tasks=tasks, workers={WORKERS},
                                  logging_dir=str(work / "logs" / name)).run()
        source = SourceConfig(name="web", paths=[{str(corpus)!r}], language_id=False)
        stage("sign")
        run("sign", [ReadStep(source, 0, work / "read", work / "malformed"),
                     DedupSignatures(work / "sigs", options)], {tasks})
        stage("dedup")
        find_duplicates(options, work / "sigs", work / "components", work / "dups", run)
    """)
    return _peak_rss_of_tree([sys.executable, "-c", script], work / "stages.log")


def scaled_corpora(tmp: Path, base: int):
    """(scale, documents, corpus directory, tasks: one per file) for each of SCALES, written under `tmp`."""
    for scale in SCALES:
        documents = base * scale
        corpus = tmp / f"corpus-{scale}"
        write_corpus(corpus, documents)
        yield scale, documents, corpus, -(-documents // DOCS_PER_FILE)


def dedup_only(base: int) -> list[Result]:
    """The dedup stages alone at 1x, 4x, 16x: the largest dedup-stage process's memory and the stage's time."""
    rows = []
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        for scale, documents, corpus, tasks in scaled_corpora(Path(tmp), base):
            seconds, peaks = run_dedup_only(corpus, Path(tmp) / f"dd-{scale}", tasks)
            rows.append((documents, seconds, max(rss for where, rss in peaks.items() if where.endswith("dedup"))))
            print(
                f"  {scale:>2}x {documents:>8,} docs: sign + find {seconds:7.1f} s; peak by process and stage: "
                + ", ".join(f"{where} {rss / 2**20:.1f} MiB" for where, rss in sorted(peaks.items())),
                flush=True,
            )
    (n1, _, m1), (n16, _, m16) = rows[0], rows[-1]
    marginal = (m16 - m1) / (n16 - n1)
    print(f"  marginal memory of the largest dedup-stage process, 1x to 16x: {marginal:,.1f} B/doc", flush=True)
    return [
        Result(
            "dedup stages alone: largest process marginal memory (floor 1)",
            max(marginal, 1.0),
            256.0,
            "the 256 B/doc budget",
            "B/doc",
            higher_is_better=False,
            target=1.0,
        )
    ]


def run_datatrove(corpus: Path, work: Path, tasks: int) -> tuple[float, int]:
    script = textwrap.dedent(f"""
        from datatrove.executor import LocalPipelineExecutor
        from datatrove.pipeline.dedup.minhash import (MinhashConfig, MinhashDedupBuckets, MinhashDedupCluster,
                                                      MinhashDedupFilter, MinhashDedupSignature)
        from datatrove.pipeline.readers import JsonlReader
        from datatrove.pipeline.writers import JsonlWriter
        from bench.bench_dedup import RegexWordTokenizer
        config = MinhashConfig(n_grams=5, num_buckets=40, hashes_per_bucket=3)
        work, corpus = {str(work)!r}, {str(corpus)!r}
        signature = MinhashDedupSignature(work + "/sigs", config=config)
        signature.word_tokenizer = RegexWordTokenizer()
        stages = [([JsonlReader(corpus), signature], {tasks}),
                  ([MinhashDedupBuckets(work + "/sigs", work + "/buckets", config=config)], 40),
                  ([MinhashDedupCluster(work + "/buckets", work + "/remove", config=config)], 1),
                  ([JsonlReader(corpus), MinhashDedupFilter(work + "/remove"), JsonlWriter(work + "/out")], {tasks})]
        for index, (pipeline, tasks) in enumerate(stages):
            LocalPipelineExecutor(pipeline, tasks=tasks, workers={WORKERS},
                                  logging_dir=work + f"/logs/{{index}}").run()
    """)
    seconds, peaks = _peak_rss_of_tree([sys.executable, "-c", script])
    return seconds, max(peaks.values(), default=0)


def main(base: int = 16_000) -> list[Result]:
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        rows = [
            _run_scale(Path(tmp), scale, documents, corpus, tasks)
            for scale, documents, corpus, tasks in scaled_corpora(Path(tmp), base)
        ]
    (_, n1, s1, m1, _, dm1, dd1), (_, n16, s16, m16, d16, dm16, dd16) = rows[0], rows[-1]
    marginal = (m16 - m1) / (n16 - n1)
    marginal_dt = (dm16 - dm1) / (n16 - n1)
    marginal_dedup = (dd16 - dd1) / (n16 - n1)
    print(
        f"  marginal memory from 1x to 16x: largest process {marginal:,.0f} B/doc, largest dedup-stage process "
        f"{marginal_dedup:,.0f} B/doc, datatrove's largest {marginal_dt:,.0f} B/doc",
        flush=True,
    )
    return _results(n1 / s1, n16 / s16, n16 / d16, marginal, marginal_dedup, marginal_dt)


def _run_scale(tmp: Path, scale: int, documents: int, corpus: Path, tasks: int) -> tuple:
    """millrace's pipeline and datatrove's MinHash stages on one size's corpus: (scale, documents, our seconds,
    our largest process's peak, datatrove's seconds and peak, our largest dedup-stage process's peak)."""
    ours_s, peaks = run_millrace(corpus, tmp / f"mr-{scale}", tasks)
    ours_rss, where = max((rss, where) for where, rss in peaks.items())
    dedup_rss = max(rss for where, rss in peaks.items() if where.endswith("dedup"))
    theirs_s, theirs_rss = run_datatrove(corpus, tmp / f"dt-{scale}", tasks)
    print(
        f"  {scale:>2}x {documents:>8,} docs: millrace {ours_s:7.1f} s {documents / ours_s:8,.0f} docs/s "
        f"peak {ours_rss / 2**20:7.1f} MiB ({where}) | datatrove MinHash {theirs_s:7.1f} s "
        f"{documents / theirs_s:8,.0f} docs/s peak {theirs_rss / 2**20:7.1f} MiB",
        flush=True,
    )
    print(
        "      peak by process and stage: "
        + ", ".join(f"{where} {rss / 2**20:.1f} MiB" for where, rss in sorted(peaks.items())),
        flush=True,
    )
    return scale, documents, ours_s, ours_rss, theirs_s, theirs_rss, dedup_rss


def _results(
    rate_1x: float,
    rate_16x: float,
    datatrove_rate_16x: float,
    marginal: float,
    marginal_dedup: float,
    marginal_dt: float,
) -> list[Result]:
    """Throughput at 16x against 1x, the marginal memory per added document against the 256 B budget (whole run
    and dedup stage) and against datatrove's, and 16x throughput against datatrove's MinHash alone."""
    budget = "the 256 B/doc budget"
    return [
        Result(
            "pipeline scale: throughput 16x vs 1x", rate_16x, rate_1x, "the same pipeline at 1x", "docs/s", target=0.8
        ),
        Result(
            "pipeline scale: largest process marginal memory",
            max(marginal, 1e-9),
            256.0,
            budget,
            "B/doc",
            higher_is_better=False,
            target=1.0,
        ),
        Result(
            "pipeline scale: largest dedup-stage process marginal memory (floor 1)",
            max(marginal_dedup, 1.0),
            256.0,
            budget,
            "B/doc",
            higher_is_better=False,
            target=1.0,
        ),
        Result(
            "pipeline scale: largest process marginal memory vs datatrove MinHash",
            max(marginal, 1e-9),
            max(marginal_dt, 1e-9),
            "datatrove 4 MinHash stages",
            "B/doc",
            higher_is_better=False,
        ),
        Result(
            "pipeline scale: 16x docs/s vs datatrove MinHash (dedup only)",
            rate_16x,
            datatrove_rate_16x,
            "datatrove 4 MinHash stages",
            "docs/s",
        ),
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=int, default=16_000, help="documents at 1x (default 16,000)")
    parser.add_argument("--dedup-only", action="store_true", help="only millrace's dedup stages (sign, find)")
    args = parser.parse_args()
    for result in dedup_only(args.base) if args.dedup_only else main(args.base):
        print(result.line())
