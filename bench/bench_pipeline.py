"""The whole pipeline (filters + dedup + tokenize) against a plain datatrove pipeline.

Same input (the embedded default corpus, about 2 MB), same filters on every source (FTFY,
Gopher repetition and quality, py3langid language id), same tokenizer (a byte-level BPE
trained once beforehand), same tasks and workers. The baseline is the FineWeb-style
datatrove recipe: filter → write; datatrove's four MinHash stages; filter duplicates →
`DocumentTokenizer`. millrace also runs exact dedup and assembles the store (manifests,
checksums, funnel). Reports documents/s of input; target ratio ≥ 1.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.result import Result

CORPUS_BYTES = 2_000_000
TASKS, WORKERS = 4, 2
FILTERS = '["gopher_repetition", "gopher_quality"]'
GOPHER_OPTIONS = {"max_non_alpha_words_ratio": 0.5}


_IDENTIFIER: Any = None  # py3langid's identifier, loaded once per process


def _tag_language(doc) -> bool:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    global _IDENTIFIER
    if _IDENTIFIER is None:
        _IDENTIFIER = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    doc.metadata["language"], doc.metadata["language_score"] = _IDENTIFIER.classify(doc.text[:2000])
    return True


def run_datatrove(corpus: Path, tokenizer: Path, work: Path) -> float:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.filters import GopherQualityFilter, GopherRepetitionFilter, LambdaFilter
    from datatrove.pipeline.formatters import FTFYFormatter
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.tokens import DocumentTokenizer
    from datatrove.pipeline.writers import JsonlWriter

    config = MinhashConfig(n_grams=5, num_buckets=40, hashes_per_bucket=3)
    stages = [
        (
            [
                JsonlReader(str(corpus), glob_pattern="**/*.jsonl.zst"),
                FTFYFormatter(),
                GopherRepetitionFilter(),
                GopherQualityFilter(**GOPHER_OPTIONS),
                LambdaFilter(_tag_language),
                JsonlWriter(str(work / "filtered")),
            ],
            TASKS,
        ),
        ([JsonlReader(str(work / "filtered")), MinhashDedupSignature(str(work / "sigs"), config=config)], TASKS),
        ([MinhashDedupBuckets(str(work / "sigs"), str(work / "buckets"), config=config)], 40),
        ([MinhashDedupCluster(str(work / "buckets"), str(work / "remove"), config=config)], 1),
        (
            [
                JsonlReader(str(work / "filtered")),
                MinhashDedupFilter(str(work / "remove")),
                DocumentTokenizer(
                    str(work / "tokens"), tokenizer_name_or_path=str(tokenizer), eos_token="<|endoftext|>", seed=0
                ),
            ],
            TASKS,
        ),
    ]
    start = time.perf_counter()
    for index, (pipeline, tasks) in enumerate(stages):
        LocalPipelineExecutor(pipeline, tasks=tasks, workers=WORKERS, logging_dir=str(work / f"logs/{index}")).run()
    return time.perf_counter() - start


def run_millrace(corpus: Path, tokenizer: Path, work: Path) -> float:
    from millrace.home import Home
    from pipeline.config import load_pipeline_config
    from pipeline.runner import run_pipeline
    from pipeline.starter import discover_sources

    sources = "".join(
        f'[[sources]]\nname = "{name}"\npaths = {json.dumps([str(p) for p in paths])}\nfilters = {FILTERS}\n\n'
        for name, paths, _ in discover_sources(corpus)
    )
    text = (
        sources + "[filters.gopher_quality]\nmax_non_alpha_words_ratio = 0.5\n"
        f'[tokenizer]\npath = "{tokenizer}"\n[output]\nversion = "2026.01.01"\n'
        f"[executor]\ntasks = {TASKS}\nworkers = {WORKERS}\n"
    )
    (work / "bench.toml").write_text(text)
    config = load_pipeline_config(work / "bench.toml")
    start = time.perf_counter()
    run_pipeline(config, Home.resolve(work / "home"))
    return time.perf_counter() - start


def main() -> list[Result]:
    from pipeline.corpus.builder import build_local_corpus
    from pipeline.steps.intermediate import read_jsonl_zst
    from pipeline.steps.tokenize.tokenization import train_byte_level_bpe

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        summary = build_local_corpus(tmp / "corpus", CORPUS_BYTES)
        texts = (r["text"] for p in sorted((tmp / "corpus").rglob("*.jsonl.zst")) for r in read_jsonl_zst(p))
        tokenizer = train_byte_level_bpe(texts, 8192, "<|endoftext|>", tmp / "tokenizer.json")
        (tmp / "ours").mkdir()
        (tmp / "theirs").mkdir()
        ours_s = run_millrace(tmp / "corpus", tokenizer, tmp / "ours")
        theirs_s = run_datatrove(tmp / "corpus", tokenizer, tmp / "theirs")
    n = summary.documents
    return [Result("whole pipeline", n / ours_s, n / theirs_s, "plain datatrove pipeline", "docs/s", target=1.0)]


if __name__ == "__main__":
    for result in main():
        print(result.line())
