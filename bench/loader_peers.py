"""The loader's peers for `bench_loader`, on the bench store's own tokens and mixture.

MosaicML streaming (MDS, `Stream(proportion=...)`, py1e shuffle, its `StreamingDataLoader`) and litdata
(`optimize` with `TokensLoader`, `CombinedStreamingDataset` with weights, its `StreamingDataLoader`) read
copies of the cells' tokens that `convert` writes in their formats; megatron-core's `GPTDataset` blend reads
the store's `.bin/.idx` as they are. Each system, and millrace itself, runs in its own process (`run`): open,
first batch, tokens/s, peak resident memory, the rows it drew per cell over the steps before RESUME_STEP (its
mixing error), and the digest of batch RESUME_STEP; then `resume` opens it afresh from the state it saved
there and times the first batch (exact when that batch's digest is the straight run's). Every system hands out
int64 input ids and labels of SEQ_LEN tokens; millrace also its segments, positions and sources (per segment).
"""

from __future__ import annotations

import hashlib
import json
import pickle
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench.bench_loader import CELLS, GLOBAL_BATCH, MEASURE_STEPS, RESUME_STEP, SCHEDULE_STEPS, SEED, SEQ_LEN, cell_of
from bench.result import memory_mb

SYSTEMS = ("millrace", "millrace-lean", "mosaicml", "litdata", "megatron")
MODULES = {
    "millrace": ["loader", "loader.torch_dataset"],
    "millrace-lean": ["loader", "loader.torch_dataset"],
    "mosaicml": ["streaming"],
    "litdata": ["litdata"],
    "megatron": ["megatron.core.datasets.blended_megatron_dataset_builder", "megatron.core.datasets.gpt_dataset"],
}


def import_system(system: str) -> None:
    """Each system's modules, imported before its clock starts (opening is what is timed, not Python imports)."""
    import importlib

    import torch  # noqa: F401

    sys.modules.setdefault("streaming.vision", types.ModuleType("streaming.vision"))  # needs torchvision; unused
    for module in MODULES[system]:
        importlib.import_module(module)


def convert(store: str, out: str) -> dict:
    """The cells' tokens in MDS (windows of SEQ_LEN + 1 tokens, as MosaicML's text recipes pre-cut them) and in
    litdata's format (the token stream, cut into blocks by its `TokensLoader` when read)."""
    import torch
    from litdata import TokensLoader, optimize

    sys.modules.setdefault("streaming.vision", types.ModuleType("streaming.vision"))  # needs torchvision; unused
    from streaming import MDSWriter

    from pipeline.store.format import ShardReader

    start = time.perf_counter()
    width = SEQ_LEN + 1
    for cell in CELLS:
        tokens = np.asarray(ShardReader(Path(store) / "cells" / cell / "shard_00000").tokens_view)
        with MDSWriter(
            out=str(Path(out) / "mds" / cell), columns={"tokens": f"ndarray:uint16:{width}"}, size_limit=1 << 26
        ) as writer:
            for window in tokens[: tokens.size // width * width].reshape(-1, width):
                writer.write({"tokens": window})
    mds = time.perf_counter()
    for cell in CELLS:
        optimize(
            fn=documents,
            inputs=[str(Path(store) / "cells" / cell / "shard_00000")],
            output_dir=str(Path(out) / "litdata" / cell),
            chunk_bytes="64MB",
            item_loader=TokensLoader(),
            num_workers=1,
            verbose=False,
        )
    del torch
    return {"mds_s": mds - start, "litdata_s": time.perf_counter() - mds}


def documents(prefix: str):
    """litdata's `optimize` function: a shard's tokens as uint16 tensors of up to 2^20 tokens (its `TokensLoader`
    concatenates the items and cuts blocks, so grouping documents changes nothing it reads and writes faster)."""
    import torch

    from pipeline.store.format import ShardReader

    tokens = np.asarray(ShardReader(Path(prefix)).tokens_view)
    for start in range(0, tokens.size, 1 << 20):
        yield torch.from_numpy(np.array(tokens[start : start + (1 << 20)], dtype=np.uint16))


def ids_and_labels(windows) -> tuple:
    """[b, SEQ_LEN + 1] tokens -> int64 input ids and labels: the peers' collate step."""
    import torch

    return windows[:, :-1].to(torch.int64), windows[:, 1:].to(torch.int64)


def collate_litdata(samples: list) -> tuple:
    import torch

    return ids_and_labels(torch.stack(samples))


def collate_mds(samples: list[dict]) -> tuple:
    import torch

    return ids_and_labels(torch.from_numpy(np.stack([sample["tokens"] for sample in samples])))


def collate_megatron(samples: list[dict]) -> tuple:
    import torch

    return torch.stack([s["tokens"] for s in samples]), torch.stack([s["labels"] for s in samples])


class Loader:
    """One system behind one face: `batches()` yields (input ids, labels, ...) from the current state on."""

    def __init__(self, system: str, workers: int, root: Path, manifest: str):
        self.system, self.workers, self.root, self.manifest = system, workers, root, manifest
        getattr(self, f"_open_{system.replace('-', '_')}")()

    # millrace: the stream itself at 0 workers (the trainer's path), its DataLoader face with workers
    def _open_millrace(self, sources: bool = True) -> None:
        from loader import MixtureDataLoader, MixtureStream, TorchMixtureDataset

        if self.workers:
            self.dataset = TorchMixtureDataset(self.manifest, prefetch=0, sources=sources)
            self.batches = lambda: (
                (item["input_ids"], item["labels"])
                for item in MixtureDataLoader(self.dataset, num_workers=self.workers)
            )
            self.state, self.load = self.dataset.state_dict, self.dataset.load_state_dict
        else:
            self.stream = MixtureStream(self.manifest, prefetch=0, sources=sources)
            self.batches = lambda: ((b.input_ids, b.labels) for b in self.stream.iterate())
            self.state, self.load = self.stream.state_dict, self.stream.load_state_dict

    def _open_millrace_lean(self) -> None:
        self._open_millrace(sources=False)

    def _open_mosaicml(self) -> None:
        sys.modules.setdefault("streaming.vision", types.ModuleType("streaming.vision"))  # needs torchvision; unused
        from streaming import Stream, StreamingDataLoader, StreamingDataset
        from streaming.base.util import clean_stale_shared_memory

        clean_stale_shared_memory()
        streams = [Stream(local=str(self.root / "mds" / cell), proportion=share) for cell, (_, share) in CELLS.items()]
        dataset = StreamingDataset(
            streams=streams,
            shuffle=True,
            shuffle_algo="py1e",
            shuffle_seed=SEED,
            batch_size=GLOBAL_BATCH,
            num_canonical_nodes=1,
        )
        self.loader = StreamingDataLoader(
            dataset, batch_size=GLOBAL_BATCH, num_workers=self.workers, collate_fn=collate_mds
        )
        self.batches = lambda: iter(self.loader)
        self.state, self.load = self.loader.state_dict, self.loader.load_state_dict

    def _open_litdata(self) -> None:
        from litdata import CombinedStreamingDataset, StreamingDataLoader, StreamingDataset, TokensLoader

        datasets = [
            StreamingDataset(
                str(self.root / "litdata" / cell),
                shuffle=True,
                seed=SEED,
                item_loader=TokensLoader(block_size=SEQ_LEN + 1),
            )
            for cell in CELLS
        ]
        combined = CombinedStreamingDataset(
            datasets, seed=SEED, weights=[share for _, share in CELLS.values()], iterate_over_all=False
        )
        self.loader = StreamingDataLoader(
            combined, batch_size=GLOBAL_BATCH, num_workers=self.workers, collate_fn=collate_litdata
        )
        self.batches = lambda: iter(self.loader)
        self.state, self.load = self.loader.state_dict, self.loader.load_state_dict

    def _open_megatron(self) -> None:
        import torch

        from bench.bench_loader import megatron_dataset

        self.dataset = megatron_dataset(self.manifest, str(self.root / "megatron"))
        self.step = 0

        def batches():
            sampler = range(self.step * GLOBAL_BATCH, SCHEDULE_STEPS * GLOBAL_BATCH)
            return iter(
                torch.utils.data.DataLoader(
                    self.dataset,
                    batch_size=GLOBAL_BATCH,
                    sampler=sampler,
                    num_workers=self.workers,
                    collate_fn=collate_megatron,
                )
            )

        self.batches = batches
        self.state = lambda: {"step": self.step}
        self.load = lambda state: setattr(self, "step", state["step"])


def digest(ids) -> tuple[str, str]:
    """(digest of the batch's input ids, digest of its rows in sorted order)."""
    rows = np.asarray(ids, dtype=np.int64)
    whole = hashlib.sha256(rows.tobytes()).hexdigest()
    return whole, hashlib.sha256(
        "".join(sorted(hashlib.sha256(r.tobytes()).hexdigest() for r in rows)).encode()
    ).hexdigest()


def run(system: str, workers: str, root: str, manifest: str) -> dict:
    """Open, first batch, the best tokens/s over windows of MEASURE_STEPS batches, rows per cell over steps
    [0, RESUME_STEP), the state there (saved for `resume`) and the digest of batch RESUME_STEP."""
    import_system(system)
    base = memory_mb("VmRSS")
    start = time.perf_counter()
    loader = Loader(system, int(workers), Path(root), manifest)
    opened = time.perf_counter()
    batches = loader.batches()
    first = next(batches)
    first_s = time.perf_counter() - start
    counts = np.bincount(cell_of(first[0]), minlength=len(CELLS))
    best, mark = float("inf"), time.perf_counter()
    for step in range(1, RESUME_STEP):
        ids = next(batches)[0]
        counts += np.bincount(cell_of(ids), minlength=len(CELLS))
        if step % MEASURE_STEPS == 0:
            now = time.perf_counter()
            best, mark = min(best, now - mark), now
    state = loader.state()
    if system == "megatron":
        state = {"step": RESUME_STEP}
    later = next(batches)[0]
    del batches
    with open(Path(root) / f"state-{system}-{workers}.pkl", "wb") as handle:
        pickle.dump(state, handle)
    shares = np.asarray([share for _, share in CELLS.values()])
    drawn = RESUME_STEP * GLOBAL_BATCH
    return {
        "open_s": opened - start,
        "first_batch_s": first_s,
        "tokens_per_s": MEASURE_STEPS * GLOBAL_BATCH * SEQ_LEN / best,
        "peak_mb": memory_mb("VmHWM") - base,
        "mix_error": float(np.abs(counts - shares * drawn).max()),
        "digest": digest(later),
    }


def resume(system: str, workers: str, root: str, manifest: str) -> dict:
    """A fresh process: open, load the state saved at RESUME_STEP, first batch."""
    with open(Path(root) / f"state-{system}-{workers}.pkl", "rb") as handle:
        state = pickle.load(handle)
    import_system(system)
    start = time.perf_counter()
    loader = Loader(system, int(workers), Path(root), manifest)
    loader.load(state)
    ids = next(loader.batches())[0]
    return {"resume_s": time.perf_counter() - start, "digest": digest(ids)}


if __name__ == "__main__":
    kind, rest = sys.argv[1], sys.argv[2:]
    commands: dict[str, Callable[..., dict]] = {"convert": convert, "run": run, "resume": resume}
    print(json.dumps(commands[kind](*rest)))
