"""Tokenize stage throughput against raw HF `tokenizers` batch encoding of the same documents.

Documents: the standard library's sources and pydoc topics (about 4 MB). Both sides use the
same trained byte-level BPE, the one `load_tokenizer` keeps per process (as every task in a
worker gets it: its word cache warm on both sides), the same batch size and the same cores, and
both take the ids out of the encodings (the least a caller does with them); ours also appends
EOS, streams each cell's tokens to its run and writes the runs into the final cell shards (store
order, chunk digests). Target ratio ≥ 0.9.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench.result import Result

BATCH = 256
MAX_BYTES = 4_000_000
SHARD_TOKENS = 1 << 28


def bench_documents() -> list:
    from datatrove.data import Document

    from pipeline.corpus.builder import _pydoc_topics, _python_code, _spread_order, _stdlib_files

    docs, total = [], 0
    records = _pydoc_topics(Path("pydoc_data"))
    for path in _spread_order(_stdlib_files()):
        if total >= MAX_BYTES:
            break
        records += _python_code(path)
        total += len(records[-1].text) if records else 0
    for key, record in enumerate(records):
        source = "python-docs" if record.id.startswith("python-docs") else "python-code"
        docs.append(Document(text=record.text, id=record.id, metadata={"source": source, "key": key}))
    return docs


def _timed(func) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process's threads)."""
    wall, cpu = time.perf_counter(), time.process_time()
    func()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> list[Result]:
    from pipeline.steps.tokenize.cell_shards import CellShardsConfig
    from pipeline.steps.tokenize.tokenization import TokenizeCells, load_tokenizer, train_byte_level_bpe

    docs = bench_documents()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        path = train_byte_level_bpe((d.text for d in docs[::4]), 8192, "<|endoftext|>", tmp / "tokenizer.json")
        texts = [d.text for d in docs]

        def raw() -> None:
            tokenizer = load_tokenizer(path)  # the one a task gets: this process's, warm on both sides
            for start in range(0, len(texts), BATCH):
                [e.ids for e in tokenizer.encode_batch_fast(texts[start : start + BATCH], add_special_tokens=False)]

        def ours() -> None:
            shards = CellShardsConfig(
                path,
                "<|endoftext|>",
                ("python-code", "python-docs"),
                tmp / "runs",
                tmp / "store" / "cells",
                SHARD_TOKENS,
            )
            step = TokenizeCells(shards, tmp / "funnel", batch_size=BATCH)
            for _ in step.run(iter(docs), 0, 1):
                pass

        raw()  # warm the tokenizer's caches and threads once for both
        raw_runs, our_runs = [], []
        for _ in range(7):  # interleaved, so a busy machine slows both alike; best of each
            raw_runs.append(_timed(raw))
            our_runs.append(_timed(ours))
    n = len(docs)
    (raw_wall, raw_cpu), (our_wall, our_cpu) = (tuple(map(min, zip(*runs))) for runs in (raw_runs, our_runs))
    return [
        Result("tokenize stage", n / our_wall, n / raw_wall, "raw tokenizers encode_batch", "docs/s", target=0.9),
        Result(
            "tokenize stage, per CPU second",
            n / our_cpu,
            n / raw_cpu,
            "raw tokenizers encode_batch",
            "docs/CPU-s",
            target=0.9,
        ),
    ]


if __name__ == "__main__":
    for result in main():
        print(result.line())
