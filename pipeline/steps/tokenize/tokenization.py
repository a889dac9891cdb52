"""Tokenizing into cell runs with HF `tokenizers`; the byte-level BPE trained when none is given.

`TokenizeCells` batch-encodes documents (`encode_batch`, Rust threads), appends EOS, groups
them by cell (`metadata["cell"]` when a domains step set it, else the source name) and streams
each cell's tokens, as they come, to one run per cell per task: `tokens/<rank>/<cell>.tokens`
(the token ids, in the store's dtype) and `tokens/<rank>/<cell>.npz` (per document: key, id,
origin, input position, length, source index, bytes, content hash for the held-out split; a
few sample texts). Memory per task is that table, not its tokens. When its stream ends, the task
writes each run into the store's final shards (`pipeline.steps.tokenize.cell_shards`), but for its few
held-out candidates per cell, offered in `tokens/<rank>/held-out.json` to the split.

`RemovedTokens` counts, for the funnel, the tokens that removed documents would have had.
"""

from __future__ import annotations

import array
import functools
import hashlib
import itertools
import json
import os
import shutil
import socket
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

from millrace.artifacts import atomic_output, atomic_write_text, temporary_sibling
from pipeline.cells.held_out_split import document_hash, split_candidates
from pipeline.config import EvalSetConfig, HeldOutConfig
from pipeline.steps.filter.sample import sample_rank
from pipeline.steps.funnel import StepCounts
from pipeline.steps.held_out.eval_sets import SetOverlap
from pipeline.steps.intermediate import read_jsonl_zst, task_file
from pipeline.steps.tokenize.cell_shards import (
    CellShardsConfig,
    candidates_file,
    remove_task_files,
    run_file,
    tokens_file,
    write_training_shards,
    written_file,
)
from pipeline.store.format import dtype_for_vocab

if TYPE_CHECKING:  # tokenizers loads with the first tokenizer a task reads (`_tokenizer_of`)
    from tokenizers import Encoding, Tokenizer

SAMPLES_PER_CELL = 3
SAMPLE_CHARS = 400


def load_tokenizer(path: Path | str) -> Tokenizer:
    """One `Tokenizer` per file (and version of it) per process, shared by the tasks a worker runs: each
    tokenizer dropped after encoding keeps about 3 MiB per 256 documents encoded (tokenizers 0.23), so
    one loaded per task grew a worker by 1 GiB over 128 tasks. Encoding never changes its output."""
    stat = Path(path).stat()
    return _tokenizer_of(str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _tokenizer_of(path: str, size: int, mtime_ns: int) -> Tokenizer:
    from tokenizers import Tokenizer  # lazy: heavy (tokenizers' Rust extension)

    return Tokenizer.from_file(path)


def tokenizer_fingerprint(path: Path | str) -> str:
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()


def train_byte_level_bpe(texts: Iterable[str], vocab_size: int, eos: str, output: Path) -> Path:
    """Train a byte-level BPE (GPT-2 style) on `texts` and save it atomically to `output`."""
    # lazy: heavy (tokenizers' Rust extension)
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[eos],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    atomic_write_text(output, tokenizer.to_str())
    return output


def eos_id(tokenizer: Tokenizer, eos: str) -> int:
    token: int | None = tokenizer.token_to_id(eos)
    if token is None:
        raise ValueError(f"the tokenizer has no EOS token {eos!r}")
    return token


def cell_of(doc: Document) -> str:
    cell: str = doc.metadata.get("cell") or doc.metadata["source"]
    return cell


def worker() -> dict[str, str | int]:
    """Which process ran a task (recorded in the work directory, never in the store)."""
    return {"host": socket.gethostname(), "pid": os.getpid()}


def _batches(data: Iterable[Document], size: int) -> Iterator[list[Document]]:
    batch: list[Document] = []
    for doc in data:
        batch.append(doc)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


class _CellRun:
    """One cell's documents in one task: tokens streamed to a temporary `.tokens` file as they come,
    a few numbers and strings per document kept (the task's own, never the cell's or the corpus's)."""

    def __init__(self, path: Path, dtype: np.dtype, seed: int) -> None:
        self.path, self.dtype, self.seed = path, dtype, seed
        fd, self._tmp = temporary_sibling(tokens_file(path))
        self._tokens = os.fdopen(fd, "wb")
        self.keys, self.positions, self.bytes = array.array("q"), array.array("q"), array.array("q")
        self.lengths, self.sources, self.hashes = array.array("q"), array.array("H"), array.array("Q")
        self.ids: list[str] = []
        self.origins: list[str] = []
        self.samples: list[tuple[int, str, str, str]] = []  # (id hash, id, source, trimmed text)

    def add(self, doc: Document, tokens: np.ndarray, source_id: int, nbytes: int) -> None:
        key = doc.metadata["key"]
        stored = tokens.astype(self.dtype)
        self._tokens.write(stored.tobytes())
        self.keys.append(key)
        self.ids.append(doc.id)
        self.origins.append(str(doc.metadata.get("origin") or ""))
        self.positions.append(int(doc.metadata.get("position", -1)))
        self.lengths.append(tokens.size)
        self.sources.append(source_id)
        self.bytes.append(nbytes)
        self.hashes.append(document_hash(stored, self.seed))
        rank = sample_rank(key)
        if len(self.samples) < SAMPLES_PER_CELL or rank <= self.samples[-1][0]:  # else it sorts past the kept few
            self.samples.append((rank, doc.id, doc.metadata["source"], doc.text[:SAMPLE_CHARS]))
            self.samples = sorted(self.samples)[:SAMPLES_PER_CELL]

    def save(self) -> None:
        """The tokens file, then the table (in arrival order: `write_training_shards` puts them in store order)."""
        self._tokens.flush()
        os.fsync(self._tokens.fileno())
        self._tokens.close()
        os.replace(self._tmp, tokens_file(self.path))
        samples = [{"hash": h, "id": i, "source": s, "text": t} for h, i, s, t in self.samples]
        with atomic_output(self.path) as handle:
            np.savez(
                handle,
                keys=np.frombuffer(self.keys, dtype=np.int64),
                ids=np.asarray(self.ids, dtype=np.str_),
                origins=np.asarray(self.origins, dtype=np.str_),
                positions=np.frombuffer(self.positions, dtype=np.int64),
                lengths=np.frombuffer(self.lengths, dtype=np.int64),
                sources=np.frombuffer(self.sources, dtype=np.uint16),
                bytes=np.frombuffer(self.bytes, dtype=np.int64),
                hashes=np.frombuffer(self.hashes, dtype=np.uint64),
                samples=np.asarray(json.dumps(samples)),
            )

    def abort(self) -> None:
        self._tokens.close()
        Path(self._tmp).unlink(missing_ok=True)


class TokenizeCells(PipelineStep):
    """Batch-encode, append EOS, stream each cell's tokens to its run, then write the runs into the final
    cell shards under `cells_dir`; counts the `tokenize` stage. `validation` chooses the held-out candidates
    and names the evaluation sets whose n-grams are looked for in training."""

    name = "🔢 tokenize cells"
    type = "🔢 - TOKENIZER"

    def __init__(
        self,
        shards: CellShardsConfig,
        funnel_dir: Path | str,
        batch_size: int = 256,
        validation: HeldOutConfig = HeldOutConfig(),
    ):
        super().__init__()
        self.shards = shards
        self.tokenizer_path, self.eos = shards.tokenizer_path, shards.eos
        self.sources = {name: index for index, name in enumerate(shards.sources)}
        self.runs_dir, self.cells_dir = shards.runs_dir, shards.cells_dir
        self.sets: list[EvalSetConfig] = list(validation.sets)
        self.funnel_dir = Path(funnel_dir)
        self.batch_size = batch_size
        self.validation = validation

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        tokenizer = load_tokenizer(self.tokenizer_path)
        eos = eos_id(tokenizer, self.eos)
        dtype = dtype_for_vocab(tokenizer.get_vocab_size(with_added_tokens=True))
        self._clear_task_files(rank)
        runs: dict[str, _CellRun] = {}
        counts = StepCounts()

        def run_of(cell: str) -> _CellRun:
            if cell not in runs:
                runs[cell] = _CellRun(run_file(self.runs_dir, rank, cell), dtype, self.validation.seed)
            return runs[cell]

        try:
            yield from self._store_documents(data, tokenizer, np.asarray([eos], dtype=np.int64), run_of, counts)
        except BaseException:
            for run in runs.values():
                run.abort()
            raise
        self._write_cells(runs, rank, tokenizer, eos, dtype)
        counts.save(self.funnel_dir / f"{rank:05d}.json")

    def _clear_task_files(self, rank: int) -> None:
        rank_dir = self.runs_dir / f"{rank:05d}"
        shutil.rmtree(rank_dir, ignore_errors=True)  # an earlier run of this task (it may have had other cells)
        rank_dir.mkdir(parents=True)
        remove_task_files(self.cells_dir, rank)
        self.cells_dir.mkdir(parents=True, exist_ok=True)

    def _store_documents(
        self,
        data: DocumentsPipeline,
        tokenizer: Tokenizer,
        eos_array: np.ndarray,
        run_of: Callable[[str], _CellRun],
        counts: StepCounts,
    ) -> DocumentsPipeline:
        """Encode each document, append EOS and add it to its cell's run, passing the documents on."""

        def encode(batch: list[Document]) -> list[Encoding]:
            return tokenizer.encode_batch_fast([doc.text for doc in batch], add_special_tokens=False)

        # The Rust encoder releases the GIL: batch i+1 encodes in the background while batch i is
        # stored here and the steps upstream produce the next documents. Order is unchanged.
        with ThreadPoolExecutor(max_workers=1) as encoder:
            pending: tuple[list[Document], Future[list[Encoding]]] | None = None
            for batch in itertools.chain(_batches(data or (), self.batch_size), [None]):
                submitted = (batch, encoder.submit(encode, batch)) if batch is not None else None
                if pending is not None:
                    done, future = pending
                    with self.track_time("batch"):
                        encoded = future.result()
                    for doc, encoding in zip(done, encoded):
                        tokens = np.concatenate([np.asarray(encoding.ids, dtype=np.int64), eos_array])
                        source = doc.metadata["source"]
                        nbytes = len(doc.text.encode("utf-8", errors="surrogatepass"))
                        run_of(cell_of(doc)).add(doc, tokens, self.sources[source], nbytes)
                        counts.received(source, nbytes)
                        counts.kept(source, nbytes, tokens=int(tokens.size))
                        self.stat_update("tokens", value=int(tokens.size))
                        yield doc
                pending = submitted

    def _write_cells(
        self, runs: dict[str, _CellRun], rank: int, tokenizer: Tokenizer, eos: int, dtype: np.dtype
    ) -> None:
        """Each cell's run into its training shards, less its held-out candidates, offered to the split."""
        overlap = (
            SetOverlap(self.sets, tokenizer, eos, ngram=self.validation.contamination_ngram) if self.sets else None
        )
        candidates, written = {}, {}
        for cell, run in sorted(runs.items()):
            run.save()
            lengths = np.frombuffer(run.lengths, dtype=np.int64)
            pairs = split_candidates(
                np.frombuffer(run.hashes, dtype=np.uint64),
                np.frombuffer(run.keys, dtype=np.int64),
                lengths,
                self.validation,
            )
            candidates[cell] = {"documents": len(run.keys), "tokens": int(lengths.sum()), "pairs": pairs.tolist()}
            with self.track_time("shards"):
                written[cell] = write_training_shards(self.shards.task(rank, cell, dtype), pairs, overlap)
        atomic_write_text(
            written_file(self.runs_dir, rank),
            json.dumps(
                {
                    "cells": written,
                    "overlap": overlap.hits if overlap else {},
                    "set_ngrams": overlap.ngrams_found() if overlap else {},
                }
            ),
        )
        atomic_write_text(candidates_file(self.runs_dir, rank), json.dumps({"cells": candidates, "worker": worker()}))


class RemovedTokens(PipelineStep):
    """After its task's stream ends: tokens of every document this task's stages removed, for the funnel."""

    name = "🧮 removed tokens"
    type = "🔢 - TOKENIZER"

    def __init__(
        self, tokenizer_path: Path | str, removed_dir: Path | str, output_dir: Path | str, batch_size: int = 256
    ):
        super().__init__()
        self.tokenizer_path = Path(tokenizer_path)
        self.removed_dir = Path(removed_dir)
        self.output_dir = Path(output_dir)
        self.batch_size = batch_size

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        if data:
            yield from data
        tokenizer = load_tokenizer(self.tokenizer_path)
        totals: dict[str, dict[str, dict[str, int]]] = {}
        for step_dir in sorted(p for p in self.removed_dir.iterdir() if p.is_dir()):
            path = task_file(step_dir, rank)
            if not path.exists():
                continue
            records = read_jsonl_zst(path)
            while batch := [r for _, r in zip(range(self.batch_size), records)]:
                encoded = tokenizer.encode_batch_fast([r["text"] for r in batch], add_special_tokens=False)
                for record, encoding in zip(batch, encoded):
                    per_source = totals.setdefault(step_dir.name, {}).setdefault(record["source"], {})
                    per_source[record["reason"]] = per_source.get(record["reason"], 0) + len(encoding.ids) + 1
        atomic_write_text(self.output_dir / f"{rank:05d}.json", json.dumps(totals, sort_keys=True))
