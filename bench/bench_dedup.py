r"""Fuzzy dedup: millrace's MinHash steps against datatrove's four MinHash stages.

Same input (a generated corpus with injected near-duplicates, 1–5% of words edited), same
LSH parameters (5-gram shingles, 40 bands × 3 rows), one core each, both reading the input
twice (signatures, then the filter) through datatrove executors. datatrove runs twice: as
shipped (spaCy word splitting) and with the same `\w+` regex word splitter as ours, so the
second ratio shows the design's advantage rather than spaCy's cost. Reports documents/s over
the whole dedup (ratio target ≥ 3 against datatrove as shipped) and recall/precision of all.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from datatrove.utils.word_tokenizers import WordTokenizer

from bench.result import Result
from pipeline.steps.dedup.signing import WORD
from testkit.near_duplicates import near_duplicate_corpus, removal_quality

BANDS, ROWS, NGRAM = 40, 3, 5  # millrace's defaults, given to both


def _write_input(path: Path, documents: list[tuple[str, str]]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    with open(path / "input.jsonl", "w") as handle:
        handle.writelines(
            json.dumps({"id": doc_id, "text": text, "metadata": {"source": "bench"}}) + "\n"
            for doc_id, text in documents
        )


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


class RegexWordTokenizer(WordTokenizer):
    """datatrove's word-tokenizer interface over millrace's word regex (lower-casing is datatrove's own)."""

    def word_tokenize(self, text: str) -> list[str]:
        return WORD.findall(text)

    def sent_tokenize(self, text: str) -> list[str]:
        return [text]

    def span_tokenize(self, text: str) -> list[tuple[int, int]]:
        return [match.span() for match in WORD.finditer(text)]


def run_datatrove(work: Path, regex_words: bool = False) -> tuple[float, set[str]]:
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

    def reader() -> JsonlReader:
        return JsonlReader(str(work / "input"))

    out = work / ("dt-regex" if regex_words else "dt")
    signature = MinhashDedupSignature(str(out / "sigs"), config=config)
    if regex_words:
        signature.word_tokenizer = RegexWordTokenizer()
    seconds = _run(
        [
            ([reader(), signature], 1),
            ([MinhashDedupBuckets(str(out / "sigs"), str(out / "buckets"), config=config)], BANDS),
            ([MinhashDedupCluster(str(out / "buckets"), str(out / "remove"), config=config)], 1),
            ([reader(), MinhashDedupFilter(str(out / "remove")), JsonlWriter(str(out / "out"))], 1),
        ],
        out / "logs",
    )
    return seconds, _kept_ids(out / "out")


def run_millrace(work: Path) -> tuple[float, set[str]]:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.writers import JsonlWriter

    from pipeline.config import DedupConfig, SourceConfig
    from pipeline.steps.dedup.duplicates import DropDuplicates, find_duplicates
    from pipeline.steps.dedup.signing import DedupSignatures
    from pipeline.steps.read.readers import ReadStep

    source = SourceConfig(name="bench", paths=[str(work / "input")], format="jsonl")

    def reader() -> ReadStep:  # keys documents for dedup
        return ReadStep(source, 0, work / "mr/read", work / "mr/malformed")

    options = DedupConfig(ngram=NGRAM, bands=BANDS, rows=ROWS, seed=1, threshold=0.5, verify_threshold=0.4)
    signing = DedupSignatures(str(work / "mr/sigs"), options)

    def run(name, pipeline, tasks):  # one core, as datatrove gets
        LocalPipelineExecutor(pipeline, tasks=tasks, workers=1, logging_dir=str(work / "mr/logs" / name)).run()

    start = time.perf_counter()
    _run([([reader(), signing], 1)], work / "mr/logs/sign")
    find_duplicates(options, work / "mr/sigs", work / "mr/components", work / "mr/dups", run)
    _run(
        [
            (
                [
                    reader(),
                    DropDuplicates(
                        "fuzzy_dedup", ("exact", "fuzzy"), work / "mr/dups", work / "mr/funnel", work / "mr/removed"
                    ),
                    JsonlWriter(str(work / "mr/out")),
                ],
                1,
            )
        ],
        work / "mr/logs/drop",
    )
    seconds = time.perf_counter() - start
    return seconds, {doc_id.removeprefix("bench/") for doc_id in _kept_ids(work / "mr/out")}


def main() -> list[Result]:
    documents, cluster = near_duplicate_corpus(originals=1500, with_copies=600)
    all_ids = {doc_id for doc_id, _ in documents}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        _write_input(work / "input", documents)
        ours_s, ours_kept = run_millrace(work)
        theirs_s, theirs_kept = run_datatrove(work)
        regex_s, regex_kept = run_datatrove(work, regex_words=True)
    ours_recall, ours_precision = removal_quality(all_ids - ours_kept, cluster)
    theirs_recall, theirs_precision = removal_quality(all_ids - theirs_kept, cluster)
    regex_recall, regex_precision = removal_quality(all_ids - regex_kept, cluster)
    n = len(documents)
    return [
        Result("fuzzy dedup throughput", n / ours_s, n / theirs_s, "datatrove 4 MinHash stages", "docs/s", target=3.0),
        Result(
            "fuzzy dedup throughput, same word splitter",
            n / ours_s,
            n / regex_s,
            "datatrove 4 MinHash stages, regex words",
            "docs/s",
        ),
        Result(
            "fuzzy dedup recall, same word splitter", ours_recall, regex_recall, "datatrove, regex words", "recall"
        ),
        Result(
            "fuzzy dedup precision, same word splitter",
            ours_precision,
            regex_precision,
            "datatrove, regex words",
            "precision",
        ),
        Result("fuzzy dedup recall", ours_recall, theirs_recall, "datatrove", "recall", target=1.0),
        Result("fuzzy dedup precision", ours_precision, theirs_precision, "datatrove", "precision", target=1.0),
    ]


if __name__ == "__main__":
    for result in main():
        print(result.line())
