"""Held-out evaluation while training: loss and bits per byte per cell, domain, bucket, source and set.

The sequences are the loader's `ValidationSequences` (the same windows in the same order at
every evaluation). They are cut into forward passes of `batch_sequences` rows whatever the
world size, and rank r runs passes r, r + W, ...; every rank runs the same number of passes
(a rank without a pass of its own repeats one and discards it), as FSDP and the experts'
all-to-all need. Each row's sums land in its own slot of a zero tensor that is all-reduced,
so the totals are added in one fixed order on every world size. The MoE routes every token
(no capacity limit), so nothing is dropped; the routers' per-step counters are put back
afterwards so that evaluation never moves the balancing bias.

Bits per byte: nats / ln 2 over the UTF-8 bytes the label tokens decode to (a byte-level
BPE token is exactly its bytes; other tokens are decoded one by one). A store without a
tokenizer spreads each entry's recorded bytes evenly over its tokens.

`eval.jsonl`: one flushed line per evaluation, schema "millrace.eval/1":
    {"schema", "step", "tokens", "seconds",
     "loss": {"macro", "micro", "cell": {...}, "domain": {...}, "bucket": {...}, "source": {...}, "set": {...}},
     "bpb": {same keys}, "sequences": {"cell": {...}, "set": {...}}, "without_held_out": [...]}
macro is the unweighted mean over cells with held-out data (`len(loss.cell)` of them), micro the
token-weighted mean over all their evaluated tokens; external sets are in neither. The cells the
mixture trains on with no held-out data (all their candidates lost to decontamination, say) are in
neither too, and `without_held_out` names them so that no reader takes the average for all cells.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from loader.held_out import PAD_LABEL, ValidationSequences
from mixtures.cells import CELL_NAME
from pipeline.store.format import store_tokenizer
from trainer.distributed import Runtime
from trainer.metrics import open_resumed
from trainer.model import Transformer
from trainer.records import EVAL_FILE, EVAL_GROUPS, EVAL_SCHEMA, EvalFigures, EvalRecord


def token_byte_lengths(tokenizer_store: Path | None, vocab_size: int) -> np.ndarray | None:
    """UTF-8 bytes of each token id as decoded text (0 for special tokens); None without a tokenizer (the store
    directory whose tokenizer it is: `MixtureStream.tokenizer_store`)."""
    if tokenizer_store is None:
        return None
    from tokenizers import pre_tokenizers  # lazy: heavy (tokenizers' Rust extension)

    tokenizer = store_tokenizer(tokenizer_store)  # checked against store.json's fingerprint
    decoder = (json.loads(tokenizer.to_str()).get("decoder") or {}).get("type")
    alphabet = set(pre_tokenizers.ByteLevel.alphabet())
    special = {added.content for added in tokenizer.get_added_tokens_decoder().values() if added.special}
    lengths = np.zeros(vocab_size, dtype=np.int64)
    for token, index in tokenizer.get_vocab(with_added_tokens=True).items():
        if index >= vocab_size or token in special:
            continue
        if decoder == "ByteLevel" and set(token) <= alphabet:
            lengths[index] = len(token)
        else:
            lengths[index] = len(tokenizer.decode([index], skip_special_tokens=True).encode("utf-8"))
    return lengths


def cell_groups(cell: str) -> tuple[str | None, str | None]:
    """(`c03`, `q4`) for `c03q4`; None for names that are not domain x bucket cells."""
    match = CELL_NAME.match(cell)
    if not match:
        return None, None
    return f"c{match.group(1)}", f"q{int(match.group(2))}"


@dataclass
class RowSums:
    """Per evaluated row (and per row and source): summed loss in nats, label tokens, label bytes."""

    loss: torch.Tensor  # float64 [rows]
    tokens: torch.Tensor
    bytes: torch.Tensor
    source_loss: torch.Tensor  # float64 [rows, sources]
    source_tokens: torch.Tensor
    source_bytes: torch.Tensor


class Evaluator:
    """Evaluates a model on the manifest's held-out sequences; rank 0 appends to eval.jsonl."""

    def __init__(
        self,
        sequences: ValidationSequences,
        runtime: Runtime,
        batch_sequences: int,
        source_names: list[str],
        byte_lengths: np.ndarray | None,
        autocast: bool = False,
    ):
        self.sequences = sequences
        self.runtime = runtime
        self.batch_sequences = batch_sequences
        self.source_names = source_names
        self.byte_lengths = byte_lengths
        self.autocast = autocast
        self.n_sources = max(len(source_names), 1) if sequences.has_sources else 1
        pinned = sequences.manifest.validation
        self.bytes_per_token = np.asarray(
            [pinned[e.name].bytes / max(pinned[e.name].available_tokens, 1) for e in sequences.entries]
        )

    @property
    def passes(self) -> list[tuple[int, int]]:
        size, total = self.batch_sequences, self.sequences.total
        return [(start, min(start + size, total)) for start in range(0, total, size)]

    def _row_bytes(self, labels: np.ndarray, entry_ids: np.ndarray) -> np.ndarray:
        valid = labels != PAD_LABEL
        if self.byte_lengths is not None:
            return np.where(valid, self.byte_lengths[np.where(valid, labels, 0)], 0).astype(np.float64)
        per_row: np.ndarray = valid * self.bytes_per_token[entry_ids][:, None]
        return per_row

    @torch.no_grad()
    def _run(self, model: Transformer) -> RowSums:
        total, device = self.sequences.total, self.runtime.device

        def zeros(*shape: int) -> torch.Tensor:
            return torch.zeros(*shape, dtype=torch.float64, device=device)

        sums = RowSums(
            zeros(total),
            zeros(total),
            zeros(total),
            zeros(total, self.n_sources),
            zeros(total, self.n_sources),
            zeros(total, self.n_sources),
        )
        passes = self.passes
        world, rank = self.runtime.world, self.runtime.rank
        for round_start in range(0, len(passes), world):
            mine = round_start + rank
            start, stop = passes[mine] if mine < len(passes) else passes[0]
            rows = self.sequences.rows(start, stop)
            labels = torch.from_numpy(rows.labels).to(device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.autocast):
                losses, _ = model(
                    torch.from_numpy(rows.input_ids).to(device),
                    torch.from_numpy(rows.positions).to(device),
                    torch.from_numpy(rows.segment_ids).to(device),
                    labels.clamp_min(0),
                )
            if mine >= len(passes):
                continue  # a repeated pass, run only to keep the ranks in step
            valid = (labels != PAD_LABEL).double()
            losses = losses.double() * valid
            nbytes = torch.from_numpy(self._row_bytes(rows.labels, rows.entry_ids)).to(device)
            sums.loss[start:stop] = losses.sum(1)
            sums.tokens[start:stop] = valid.sum(1)
            sums.bytes[start:stop] = nbytes.sum(1)
            src = (
                torch.from_numpy(rows.label_sources).long().to(device)
                if rows.label_sources is not None
                else torch.zeros_like(labels)
            )
            for values, target in (
                (losses, sums.source_loss),
                (valid, sums.source_tokens),
                (nbytes, sums.source_bytes),
            ):
                target[start:stop].scatter_add_(1, src, values)
        for tensor in (sums.loss, sums.tokens, sums.bytes, sums.source_loss, sums.source_tokens, sums.source_bytes):
            self.runtime.all_reduce(tensor)
        return sums

    def evaluate(self, model: Transformer, step: int, tokens: int) -> EvalRecord:
        """One evaluation record (the same on every rank)."""
        began = time.perf_counter()
        with inference(model):
            sums = self._run(model)
        loss, bpb, sequences = self.aggregate(sums)
        return EvalRecord(
            schema=EVAL_SCHEMA,
            step=step,
            tokens=tokens,
            seconds=time.perf_counter() - began,
            loss=loss,
            bpb=bpb,
            sequences=sequences,
            without_held_out=self.sequences.without_held_out,
        )

    def aggregate(self, sums: RowSums) -> tuple[EvalFigures, EvalFigures, dict[str, dict[str, int]]]:
        """Loss and bits per byte (macro, micro and per name in each group), and the sequences evaluated."""
        entries = self.sequences.entries
        first = 0
        groups: dict[str, dict[str, list[float]]] = {
            group: {} for group in EVAL_GROUPS
        }  # name -> [loss, tokens, bytes]
        row_loss, row_tokens, row_bytes = (t.cpu().numpy() for t in (sums.loss, sums.tokens, sums.bytes))
        cells_of_source = np.zeros(self.sequences.total, dtype=bool)
        for entry in entries:
            rows = slice(first, first + entry.sequences)
            first += entry.sequences
            totals = [float(row_loss[rows].sum()), float(row_tokens[rows].sum()), float(row_bytes[rows].sum())]
            if entry.kind == "set":
                _add(groups["set"], entry.name, totals)
                continue
            cells_of_source[rows] = True
            _add(groups["cell"], entry.name, totals)
            domain, bucket = cell_groups(entry.name)
            if domain is not None and bucket is not None:
                _add(groups["domain"], domain, totals)
                _add(groups["bucket"], bucket, totals)
        if self.sequences.has_sources:
            per_source = [
                t.cpu().numpy()[cells_of_source].sum(0)
                for t in (sums.source_loss, sums.source_tokens, sums.source_bytes)
            ]
            for index, name in enumerate(self.source_names):
                if per_source[1][index] > 0:
                    _add(groups["source"], name, [float(per_source[k][index]) for k in range(3)])
        loss: dict[str, dict[str, float | None]] = {
            group: {k: v[0] / v[1] for k, v in sorted(values.items()) if v[1] > 0} for group, values in groups.items()
        }
        bpb: dict[str, dict[str, float | None]] = {
            group: {k: v[0] / math.log(2) / v[2] for k, v in sorted(values.items()) if v[2] > 0}
            for group, values in groups.items()
        }
        cells = groups["cell"].values()
        nats, count, nbytes = (sum(v[i] for v in cells) for i in range(3))
        loss_macro = float(np.mean(list(loss["cell"].values()))) if loss["cell"] else None
        bpb_macro = float(np.mean(list(bpb["cell"].values()))) if bpb["cell"] else None
        return (
            EvalFigures(macro=loss_macro, micro=nats / count if count else None, **loss),
            EvalFigures(macro=bpb_macro, micro=nats / math.log(2) / nbytes if nbytes else None, **bpb),
            {kind: {e.name: e.sequences for e in entries if e.kind == kind} for kind in ("cell", "set")},
        )


def _add(group: dict[str, list[float]], name: str, totals: list[float]) -> None:
    current = group.setdefault(name, [0.0, 0.0, 0.0])
    for i, value in enumerate(totals):
        current[i] += value


@contextlib.contextmanager
def inference(model: Transformer) -> Iterator[None]:
    """Eval mode, and the routers' per-step counters (balancing load, entropy, aux terms) put back after."""
    buffers = [buffer for layer in model.moe_layers() for buffer in layer.step_buffers()]
    saved = [buffer.clone() for buffer in buffers]
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)
        for buffer, value in zip(buffers, saved):
            buffer.copy_(value)


def eval_steps(every: int, start: int, stop: int, horizon: int) -> set[int]:
    """Steps (counted after the update) that end with an evaluation: every `every` (0: about ten per
    run over the horizon), and the last step of this invocation."""
    cadence = every or max(1, horizon // 10)
    return {step for step in range(start + 1, stop + 1) if step % cadence == 0} | ({stop} if stop > start else set())


class EvalWriter:
    """Appends flushed lines to runs/<run>/eval.jsonl; on resume drops the lines past the checkpoint."""

    def __init__(self, run_dir: Path, start_step: int):
        self.path = Path(run_dir) / EVAL_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.handle = open_resumed(self.path, start_step)

    def write(self, record: EvalRecord) -> None:
        """Append `record` (a non-finite figure is written as null)."""
        self.handle.write(json.dumps(record.dump(), separators=(",", ":")) + "\n")
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()
