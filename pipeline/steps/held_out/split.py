"""Split tasks: each places its tokenize task's held-out candidates once the driver has merged every
task's into one cutoff per cell (`pipeline.steps.tokenize.cell_shards.held_out_cutoffs`).

Task r reads, per cell, its tokenize task's table and waiting candidates (at most
`max_documents_per_cell` per cell), writes those at or below the cutoff to the held-out shards, but
for those the decontamination gave back to training (`pipeline.steps.held_out.contamination`), and the
others to its next training shards, then the trace part and `parts/<r>.json`, which is all
assembly reads.
"""

from __future__ import annotations

import json
from pathlib import Path

from datatrove.data import DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

from pipeline.config import HeldOutConfig
from pipeline.steps.held_out.eval_sets import SetOverlap
from pipeline.steps.tokenize.cell_shards import CellShardsConfig, write_held_out, write_part, written_file
from pipeline.steps.tokenize.tokenization import eos_id, load_tokenizer, worker
from pipeline.store.format import dtype_for_vocab


class WriteHeldOut(PipelineStep):
    """Per task: its tokenize task's held-out candidates into held-out or training shards; `parts/<rank>.json`."""

    name = "🧪 held-out split"
    type = "🔢 - TOKENIZER"

    def __init__(
        self,
        shards: CellShardsConfig,
        parts_dir: Path | str,
        cutoffs: dict[str, list[int] | None],
        validation: HeldOutConfig = HeldOutConfig(),
        contaminated: dict[str, list[list[int]]] | None = None,
    ):
        """`cutoffs`: each cell's merged held-out cutoff; `validation`: its evaluation sets and n-gram size;
        `contaminated`: per cell, the (hash, key) pairs the decontamination gave back to training."""
        super().__init__()
        self.shards, self.parts_dir = shards, Path(parts_dir)
        self.tokenizer_path, self.eos, self.runs_dir = shards.tokenizer_path, shards.eos, shards.runs_dir
        self.cutoffs, self.sets = dict(cutoffs), list(validation.sets)
        self.contaminated, self.ngram = dict(contaminated or {}), validation.contamination_ngram

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        if data:
            yield from data
        tokenizer = load_tokenizer(self.tokenizer_path)
        dtype = dtype_for_vocab(tokenizer.get_vocab_size(with_added_tokens=True))
        written = json.loads(written_file(self.runs_dir, rank).read_text())
        overlap = (
            SetOverlap(
                self.sets,
                tokenizer,
                eos_id(tokenizer, self.eos),
                written["overlap"],
                self.ngram,
                written.get("set_ngrams"),
            )
            if self.sets
            else None
        )
        cells = {}
        for cell in sorted(written["cells"]):
            with self.track_time("cell"):
                cells[cell] = write_held_out(
                    self.shards.task(rank, cell, dtype),
                    self.cutoffs.get(cell),
                    written["cells"][cell],
                    overlap,
                    self.contaminated.get(cell, []),
                )
            self.stat_update("documents", value=sum(c["documents"] for c in cells[cell]["sources"].values()))
        write_part(
            self.parts_dir,
            rank,
            cells,
            overlap.hits if overlap else {},
            worker(),
            overlap.ngrams_found() if overlap else {},
        )
