"""One way to write a small real token store for a test or a bench: documents in, shards and manifests out.

`write_store` writes documents with the store's own `ShardWriter` and manifests, as the pipeline's assembly does.
`make_store` draws the documents by one of three shapes, each what one room's tests need:
`LEARNABLE` (Zipf unigrams with a per-cell bigram rule, so a tiny model's loss falls: trainer, ladder, drills),
`RANDOM` (uniform ids, lengths 1-120, a real word-level tokenizer beside it: loader) and `EVEN` (documents of one
length dealt round-robin over shards: mixtures).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from millrace.artifacts import sha256_file
from millrace.home import Home
from pipeline.store.format import (
    CellManifest,
    CellSummary,
    EvalSetManifest,
    EvalSetSummary,
    HeldOut,
    ShardInfo,
    ShardTable,
    ShardWriter,
    StoreManifest,
    TokenizerInfo,
    write_cell_manifest,
    write_eval_set_manifest,
    write_store_manifest,
)
from pipeline.store.manifest_records import CellStats, Counts, Funnel, Overlap, StoreStats

REPO = Path(__file__).resolve().parents[1]
REFERENCE_STATS = REPO / "mixtures" / "examples" / "reference" / "available_tokens.json"
Document = tuple[np.ndarray, int]  # token ids (EOS included), source index


@dataclass(frozen=True)
class StoreContents:
    """The documents of a store `write_store` writes: `cells[cell]` a list of shards, each a list of documents;
    `sources` the names a document's source index points into; `validation[cell]` the cell's held-out documents
    (one validation shard); `eval_sets[name]` an external evaluation set's documents (one shard under
    sets/<name>/, as the pipeline's held-out split writes it)."""

    cells: Mapping[str, Sequence[Sequence[Document]]]
    sources: list[str]
    validation: Mapping[str, Sequence[Document]] = field(default_factory=dict)
    eval_sets: Mapping[str, Sequence[Document]] = field(default_factory=dict)


@dataclass(frozen=True)
class StoreTokenizer:
    """The tokenizer a written store names: its vocabulary, EOS id, fingerprint and, when a tokenizer.json is
    put in the store, its path there."""

    vocab_size: int
    eos_id: int
    fingerprint: str = "sha256:test"
    path: str | None = None

    def info(self) -> TokenizerInfo:
        return TokenizerInfo(
            fingerprint=self.fingerprint, vocab_size=self.vocab_size, eos_id=self.eos_id, path=self.path
        )


@dataclass(frozen=True)
class StoreFacts:
    """What a written store's manifests say beyond its counts: each cell's `stats` (cell.json), the store's
    `stats` and its pipeline `funnel` (store.json)."""

    cell_stats: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    store_stats: StoreStats | None = None
    funnel: Funnel | None = None


def write_store(
    home: Home,
    name: str,
    version: str,
    contents: StoreContents,
    tokenizer: StoreTokenizer,
    bytes_per_token: int = 4,
    facts: StoreFacts | None = None,
) -> Path:
    """Store `name`/`version` holding `contents`, written by the store's own writers as the pipeline's assembly
    writes it; returns the store directory."""
    facts = facts or StoreFacts()
    sources, fingerprint, cell_stats = contents.sources, tokenizer.fingerprint, facts.cell_stats
    validation, eval_sets = contents.validation, contents.eval_sets
    root = home.store(name, version)
    summaries = {
        cell: _write_cell(
            root / "cells" / cell,
            shards,
            validation.get(cell, ()),
            sources,
            bytes_per_token,
            fingerprint,
            CellStats.model_validate(cell_stats.get(cell, {})),
        )
        for cell, shards in sorted(contents.cells.items())
    }
    sets = {
        set_name: _write_eval_set(root / "sets" / set_name, set_name, documents, sources, bytes_per_token, fingerprint)
        for set_name, documents in sorted(eval_sets.items())
    }
    write_store_manifest(
        root,
        StoreManifest(
            name=name,
            version=version,
            dtype="uint16",
            cells=summaries,
            sets=sets,
            sources=sources,
            tokenizer=tokenizer.info(),
            funnel=facts.funnel or Funnel(),
            stats=facts.store_stats or StoreStats(),
        ),
    )
    return root


def _write_cell(
    cell_dir: Path,
    shards: Sequence[Sequence[Document]],
    held_out: Sequence[Document],
    sources: list[str],
    bytes_per_token: int,
    fingerprint: str,
    stats: CellStats,
) -> CellSummary:
    """One cell as the pipeline's assembly writes it: its training shards, a validation shard when it has
    held-out documents, and its cell.json; returns the store manifest's summary of it."""
    counts: dict[str, Counts] = {}
    infos = [
        _write_shard(cell_dir / f"shard_{index:05d}", shard, sources, bytes_per_token, counts)
        for index, shard in enumerate(shards)
    ]
    documents, tokens = sum(i.documents for i in infos), sum(i.tokens for i in infos)
    held = (
        _write_held_out(cell_dir / "validation-00000", held_out, sources, bytes_per_token) if held_out else HeldOut()
    )
    manifest = CellManifest(
        cell=cell_dir.name,
        dtype="uint16",
        tokenizer_fingerprint=fingerprint,
        documents=documents,
        tokens=tokens,
        bytes=tokens * bytes_per_token,
        shards=ShardTable.of(infos),
        sources=counts,
        stats=stats,
        validation=held,
    )
    return CellSummary(
        documents=documents,
        tokens=tokens,
        bytes=tokens * bytes_per_token,
        validation_documents=held.documents,
        validation_tokens=held.tokens,
        manifest_hash=write_cell_manifest(cell_dir, manifest),
    )


def _write_held_out(path: Path, documents: Sequence[Document], sources: list[str], bytes_per_token: int) -> HeldOut:
    """Held-out documents (a cell's validation split or an external set) in one durable shard, with their counts."""
    counts: dict[str, Counts] = {}
    info = _write_shard(path, documents, sources, bytes_per_token, counts, durable=True)
    return HeldOut(
        documents=info.documents,
        tokens=info.tokens,
        bytes=info.tokens * bytes_per_token,
        shards=[info],
        sources=counts,
    )


def _write_eval_set(
    set_dir: Path, name: str, documents: Sequence[Document], sources: list[str], bytes_per_token: int, fingerprint: str
) -> EvalSetSummary:
    """An external evaluation set under sets/<name>/: its shard and set.json; returns the store's summary of it."""
    held = _write_held_out(set_dir / "set-00000", documents, sources, bytes_per_token)
    manifest = EvalSetManifest(
        name=name, dtype="uint16", tokenizer_fingerprint=fingerprint, held=held, overlap=Overlap()
    )
    digest = write_eval_set_manifest(set_dir, manifest)
    return EvalSetSummary(documents=held.documents, tokens=held.tokens, bytes=held.bytes, manifest_hash=digest)


def _write_shard(
    path: Path,
    documents: Sequence[Document],
    sources: list[str],
    bytes_per_token: int,
    counts: dict[str, Counts],
    durable: bool = False,
) -> ShardInfo:
    """One uint16 shard of `documents`, counted into `counts` per source name."""
    writer = ShardWriter(path, np.dtype(np.uint16), durable=durable)
    for doc, source in documents:
        writer.add_document(doc, source_id=source)
        count = counts.setdefault(sources[source], Counts())
        count.documents += 1
        count.tokens += len(doc)
        count.bytes += len(doc) * bytes_per_token
    return writer.close()


def zipf_probabilities(vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """Token ids 2..vocab-1 (0 and 1 are left to EOS/padding) and a Zipf law over them, exponent 1.1."""
    ranks = np.arange(2, vocab)
    weights = 1.0 / (ranks - 1.0) ** 1.1
    return ranks, weights / weights.sum()


def learnable_document(rng: np.random.Generator, length: int, pattern: int, vocab: int, eos: int) -> np.ndarray:
    """Zipf unigrams where every odd token follows from the one before by a rule set by `pattern` (one per cell):
    a tiny model can learn it, so its loss must fall from ln(vocab)."""
    ranks, probabilities = zipf_probabilities(vocab)
    tokens = rng.choice(ranks, size=length, p=probabilities).astype(np.uint16)
    tokens[1::2] = (tokens[0::2][: tokens[1::2].size] + 7 * pattern) % (vocab - 2) + 2
    tokens[-1] = eos
    return tokens


DISTINCT_BLOCK = 16  # token ids of each cell's own in a `DISTINCT` store
Draw = Callable[[np.random.Generator, int, int, int, "StoreShape"], list[list[Document]]]


def _learnable(
    rng: np.random.Generator, index: int, tokens: int, shards: int, shape: StoreShape
) -> list[list[Document]]:
    docs, written = [], 0
    while written < tokens:
        length = min(int(rng.integers(8, 96)), tokens - written)
        docs.append(
            (
                learnable_document(rng, length, index + 1, shape.vocab, shape.eos),
                int(rng.integers(0, len(shape.sources))),
            )
        )
        written += length
    return [docs]


def _distinct(
    rng: np.random.Generator, index: int, tokens: int, shards: int, shape: StoreShape
) -> list[list[Document]]:
    """Half the tokens Zipf over a block of `DISTINCT_BLOCK` ids of the cell's own (cell i: ids 2 + 16 i ...),
    half Zipf over the whole vocabulary (what all cells share): what a model trains on shows at once in each
    cell's held-out loss, and no mixture leaves a cell's tokens unseen (a mixture search's known optimum)."""
    ranks = np.arange(DISTINCT_BLOCK)
    weights = 1.0 / (ranks + 1.0) ** 1.1
    block = 2 + (index * DISTINCT_BLOCK + ranks) % (shape.vocab - 2)
    common, probabilities = zipf_probabilities(shape.vocab)
    docs, written = [], 0
    while written < tokens:
        length = min(int(rng.integers(16, 96)), tokens - written)
        own = block[rng.choice(DISTINCT_BLOCK, size=length, p=weights / weights.sum())]
        shared = rng.choice(common, size=length, p=probabilities)
        doc = np.where(rng.random(length) < 0.5, own, shared).astype(np.uint16)
        doc[-1] = shape.eos
        docs.append((doc, int(rng.integers(0, len(shape.sources)))))
        written += length
    return [docs]


def _random(rng: np.random.Generator, index: int, tokens: int, shards: int, shape: StoreShape) -> list[list[Document]]:
    result, written = [], 0
    for shard in range(shards):
        target, docs = tokens * (shard + 1) // shards, []
        while written < target:
            length = min(int(rng.integers(1, 120)), target - written)
            doc = rng.integers(2, shape.vocab, size=length).astype(np.uint16)
            doc[-1] = shape.eos
            docs.append((doc, int(rng.integers(0, len(shape.sources)))))
            written += length
        result.append(docs)
    return result


def _even(rng: np.random.Generator, index: int, tokens: int, shards: int, shape: StoreShape) -> list[list[Document]]:
    size = shape.doc_tokens
    lengths = [size] * (tokens // size) + ([tokens % size] if tokens % size else [])
    result = []
    for shard in range(shards):
        documents = []
        for length in lengths[shard::shards]:
            doc = rng.integers(0, shape.vocab, size=length, dtype=np.uint16)
            doc[-1] = shape.eos
            documents.append((doc, 0))
        result.append(documents)
    return result


@dataclass(frozen=True)
class StoreShape:
    """How `make_store` draws a store: its documents, default name and version, vocabulary and sources."""

    draw: Draw
    name: str
    version: str
    vocab: int
    eos: int
    sources: tuple[str, ...]
    shards: int
    bytes_per_token: int = 4
    doc_tokens: int = 97
    fingerprint: str = "test"
    tokenizer_path: str | None = None
    tokenizer: bool = False  # write a real word-level tokenizer.json into the store and pin its fingerprint


LEARNABLE = StoreShape(
    _learnable, "t", "2026.01.01", vocab=256, eos=1, sources=("docs", "code", "man"), shards=1, bytes_per_token=2
)
DISTINCT = StoreShape(
    _distinct, "t", "2026.01.01", vocab=128, eos=1, sources=("docs", "code", "man"), shards=1, bytes_per_token=2
)
RANDOM = StoreShape(
    _random, "t", "2026.01.01", vocab=500, eos=1, sources=("alpha", "beta", "gamma"), shards=2, tokenizer=True
)
EVEN = StoreShape(
    _even,
    "local",
    "2026.11.30",
    vocab=1000,
    eos=0,
    sources=("test",),
    shards=2,
    fingerprint="sha256:test",
    tokenizer_path="tokenizer/tokenizer.json",
)


def make_store(
    home: Home,
    cells: Mapping[str, int],
    shape: StoreShape = LEARNABLE,
    *,
    seed: int = 0,
    held_out: int | Mapping[str, int] = 0,
    store_stats: StoreStats | None = None,
    eval_sets: Mapping[str, Mapping[str, int]] = {},
) -> Path:
    """A store whose cell c holds about `cells[c]` tokens drawn by `shape`; returns its directory. Another
    name, version, shard count, vocabulary or document length is another shape: `replace(RANDOM, shards=3)`.

    `held_out`: the first documents of each cell's first shard go to its validation shard instead (per
    cell when a mapping: a cell it leaves out has no held-out data).
    `store_stats`: the manifest's `stats` (e.g. domain labels).
    `eval_sets`: external sets, each drawn as a known mix of cells (set -> cell -> tokens, drawn like the cell)."""
    name, version = shape.name, shape.version
    rng = np.random.default_rng(seed)
    documents, validation = {}, {}
    for index, (cell, tokens) in enumerate(sorted(cells.items())):
        drawn = shape.draw(rng, index, tokens, shape.shards, shape)
        held = held_out if isinstance(held_out, int) else held_out.get(cell, 0)
        validation[cell], drawn[0] = drawn[0][:held], drawn[0][held:]
        documents[cell] = drawn
    index_of = {cell: index for index, cell in enumerate(sorted(cells))}
    sets = {
        set_name: [
            doc for cell, tokens in sorted(mix.items()) for doc in shape.draw(rng, index_of[cell], tokens, 1, shape)[0]
        ]
        for set_name, mix in eval_sets.items()
    }
    fingerprint, tokenizer_path = shape.fingerprint, shape.tokenizer_path
    if shape.tokenizer:
        tokenizer = home.store(name, version) / "tokenizer" / "tokenizer.json"
        write_tokenizer(tokenizer, shape.vocab, shape.eos)  # first: store.json pins its fingerprint
        fingerprint, tokenizer_path = sha256_file(tokenizer), "tokenizer/tokenizer.json"
    return write_store(
        home,
        name,
        version,
        StoreContents(documents, list(shape.sources), validation, sets),
        StoreTokenizer(shape.vocab, shape.eos, fingerprint, tokenizer_path),
        shape.bytes_per_token,
        StoreFacts(store_stats=store_stats),
    )


def write_tokenizer(path: Path, vocab: int = RANDOM.vocab, eos: int = RANDOM.eos) -> None:
    """A word-level tokenizer whose id i decodes to `w<i>` (EOS is `<eos>`)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    words = {f"w{i}": i for i in range(vocab)}
    words["<eos>"] = eos
    del words[f"w{eos}"]
    tokenizer = Tokenizer(models.WordLevel(vocab=words, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece()
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(path))


def grid(domains: int = 3, buckets: int = 5, base: int = 20000) -> dict[str, int]:
    """Cells cNNqQ with varied sizes."""
    return {f"c{d:02d}q{q}": base * (1 + d) + 701 * q for d in range(domains) for q in range(buckets)}


def build_mixture(
    home: Home,
    store: str = "t",
    mixture: str = "default",
    revision: str = "uniform-sampling",
    tokens: int = 0,
    seq_len: int = 32,
    global_batch: int = 8,
) -> Path:
    """The mixtures room's own `mix new` + `mix build` on the store: a real built manifest."""
    from mixtures.build import build
    from mixtures.new import NewRevision, new_revision

    phases = [f"main:{tokens}:uniform"] if tokens else []
    new_revision(
        home,
        NewRevision(
            mixture=mixture,
            revision=revision,
            store=store,
            strategy="uniform",
            phases=phases,
            seq_len=seq_len,
            global_batch=global_batch,
        ),
    )
    return build(home, mixture, revision)


def many_shard_store(home: Home, cells: int, shards: int, documents: int = 40) -> Path:
    """Store `many`: `cells` cells of `shards` shards each, every shard `documents` short random documents, with
    a real tokenizer.json: for the limits on open files and on a manifest's size."""
    rng = np.random.default_rng(3)
    layout: dict[str, list[list[Document]]] = {}
    for c in range(cells):
        layout[f"c{c:02d}"] = [
            [
                (np.append(rng.integers(2, 400, size=int(n)), RANDOM.eos).astype(np.uint16), 0)
                for n in rng.integers(1, 12, size=documents)
            ]
            for _ in range(shards)
        ]
    tokenizer = StoreTokenizer(500, RANDOM.eos, path="tokenizer/tokenizer.json")
    root = write_store(home, "many", "2026.01.01", StoreContents(layout, ["only"]), tokenizer)
    write_tokenizer(root / "tokenizer" / "tokenizer.json")
    return root


def tagged_store(home: Home, documents: int, sources: int, shards: int = 2) -> Path:
    """Store `tagged`: one cell `x` of `documents` documents in source order (runs of one source, as crawls
    come); document j's tokens are all j + 2 (then EOS), so a window names the documents it holds."""
    rng = np.random.default_rng(11)
    source_of = np.sort(rng.integers(0, sources, size=documents))
    docs = [
        (np.append(np.full(int(rng.integers(3, 30)), j + 2), RANDOM.eos).astype(np.uint16), int(source_of[j]))
        for j in range(documents)
    ]
    per = -(-documents // shards)
    contents = StoreContents(
        {"x": [docs[i : i + per] for i in range(0, documents, per)]}, [f"s{i}" for i in range(sources)]
    )
    return write_store(home, "tagged", "2026.01.01", contents, StoreTokenizer(documents + 2, RANDOM.eos))
