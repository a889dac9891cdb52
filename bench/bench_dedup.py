"""Fuzzy dedup: millrace's MinHash steps against datatrove's four MinHash stages.

Same input (a generated corpus with injected near-duplicates, 1–5% of words edited), same
LSH parameters (5-gram shingles, 40 bands × 3 rows), one core each, both reading the input
twice (signatures, then the filter) through datatrove executors. Reports documents/s over
the whole dedup (ratio target ≥ 3) and recall/precision of both against the truth.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from bench.near_duplicates import near_duplicate_corpus, removal_quality
from bench.result import Result

BANDS, ROWS, NGRAM = 40, 3, 5  # millrace's defaults, given to both


def _write_input(path: Path, documents: list[tuple[str, str]]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    with open(path / "input.jsonl", "w") as handle:
        handle.writelines(json.dumps({"id": doc_id, "text": text, "metadata": {"source": "bench"}}) + "\n" for doc_id, text in documents)


def _kept_ids(folder: Path) -> set[str]:
    import gzip

    kept = set()
    for file in folder.glob("*.jsonl.gz"):
        with gzip.open(file, "rt") as handle:
            kept |= {json.loads(line)["id"] for line in handle}
    return kept


def _run(stages: list[tuple[list, int]], logs: Path) -> float:
    from datatrove.executor import LocalPipelineExecutor

    start = time.perf_counter()
    for index, (pipeline, tasks) in enumerate(stages):
        LocalPipelineExecutor(pipeline, tasks=tasks, workers=1, logging_dir=str(logs / str(index))).run()
    return time.perf_counter() - start


def run_datatrove(work: Path) -> tuple[float, set[str]]:
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter

    config = MinhashConfig(n_grams=NGRAM, num_buckets=BANDS, hashes_per_bucket=ROWS)
    reader = lambda: JsonlReader(str(work / "input"))
    seconds = _run(
        [
            ([reader(), MinhashDedupSignature(str(work / "dt/sigs"), config=config)], 1),
            ([MinhashDedupBuckets(str(work / "dt/sigs"), str(work / "dt/buckets"), config=config)], BANDS),
            ([MinhashDedupCluster(str(work / "dt/buckets"), str(work / "dt/remove"), config=config)], 1),
            ([reader(), MinhashDedupFilter(str(work / "dt/remove")), JsonlWriter(str(work / "dt/out"))], 1),
        ],
        work / "dt/logs",
    )
    return seconds, _kept_ids(work / "dt/out")


def run_millrace(work: Path) -> tuple[float, set[str]]:
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter

    from pipeline.stages.dedup import DedupSignatures, DropDuplicates, FindDuplicates

    reader = lambda: JsonlReader(str(work / "input"))
    params = dict(ngram=NGRAM, bands=BANDS, rows=ROWS, seed=1)
    seconds = _run(
        [
            ([reader(), DedupSignatures(str(work / "mr/sigs"), **params)], 1),
            ([FindDuplicates(work / "mr/sigs", work / "mr/dups.npz", threshold=0.5, exact=True, fuzzy=True, **params)], 1),
            ([reader(), DropDuplicates("fuzzy_dedup", ("exact", "fuzzy"), work / "mr/dups.npz", work / "mr/funnel",
                                       work / "mr/removed"), JsonlWriter(str(work / "mr/out"))], 1),
        ],
        work / "mr/logs",
    )
    return seconds, _kept_ids(work / "mr/out")


def main() -> list[Result]:
    documents, cluster = near_duplicate_corpus(originals=1500, with_copies=600)
    all_ids = {doc_id for doc_id, _ in documents}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        _write_input(work / "input", documents)
        ours_s, ours_kept = run_millrace(work)
        theirs_s, theirs_kept = run_datatrove(work)
    ours_recall, ours_precision = removal_quality(all_ids - ours_kept, cluster)
    theirs_recall, theirs_precision = removal_quality(all_ids - theirs_kept, cluster)
    n = len(documents)
    return [
        Result("fuzzy dedup throughput", n / ours_s, n / theirs_s, "datatrove 4 MinHash stages", "docs/s", target=3.0),
        Result("fuzzy dedup recall", ours_recall, theirs_recall, "datatrove", "recall", target=1.0),
        Result("fuzzy dedup precision", ours_precision, theirs_precision, "datatrove", "precision", target=1.0),
    ]


if __name__ == "__main__":
    for result in main():
        print(result.line())
