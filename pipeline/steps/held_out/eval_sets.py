"""External evaluation sets (`[[validation.sets]]`): tokenized into the store, checked against the corpus.

Like the reference run's zero-weight "uncheatable" sets: documents that are evaluated and never
trained on. Each set is read with datatrove's readers (jsonl, parquet) or as plain text files
(one document per file), tokenized with the store's tokenizer (EOS after each document) and
written to `sets/<name>/set-NNNNN` shards of the cells' format, with `sets/<name>/set.json`
(kind "millrace.eval-set"). A set document that also occurs in the store (training or
held-out shards) is reported: exactly (the same token ids) or as a near duplicate (MinHash over
token 5-grams, 20 bands x 5 rows, confirmed at an estimated Jaccard >= 0.8), with the cell it
was found in (exact before near, then the first cell by name). A set document whose token n-grams
are mostly found in training (`[validation] contamination_ngram`, `contamination_threshold`, as for
held-out documents) is contaminated even when no single stored document resembles it: it is listed
(kind "contained") and left out of the set's shards, so it is never scored. The tokenize and split
tasks index the sets' documents (their signatures and n-gram hashes: the index grows with the sets,
never with the corpus), sign each stored document and look up its n-grams as they write it; assembly
merges their findings. It only runs when sets are configured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np

from millrace.errors import ConfigError
from pipeline.config import EvalSetConfig
from pipeline.steps.dedup.ngrams import found_in, minhash, ngram_hashes, shingle_hashes
from pipeline.store.format import EvalSetManifest, HeldOut, ShardSequence, write_eval_set_manifest
from pipeline.store.manifest_records import ContainedDocument, Overlap, OverlapDocument

if TYPE_CHECKING:  # tokenizers loads when a set is tokenized
    from tokenizers import Tokenizer

if TYPE_CHECKING:
    from tokenizers import Tokenizer

SET_PREFIX = "set"
SHINGLE, BANDS, ROWS, NEAR_JACCARD = 5, 20, 5, 0.8
SHOWN = 20  # overlapping documents listed by index in set.json
COMPACT_EVERY = 4096  # stored documents' n-gram findings kept apart before they are merged


def read_texts(config: EvalSetConfig) -> list[str]:
    """Every document's text, in path order (files inside a directory sorted)."""
    from datatrove.pipeline.readers import JsonlReader, ParquetReader  # lazy: heavy (datatrove)

    texts: list[str] = []
    for raw in config.paths:
        path = Path(raw)
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            if config.format == "text":
                texts.append(file.read_text(encoding="utf-8", errors="replace"))
                continue
            reader_class = JsonlReader if config.format == "jsonl" else ParquetReader
            reader = reader_class(str(file.parent), glob_pattern=file.name, text_key=config.text_key, recursive=False)
            texts.extend(doc.text for doc in reader.run())
    texts = [text for text in texts if text.strip()]
    if not texts:
        raise ConfigError(f"field 'validation.sets' set {config.name!r}: no document with text in {config.paths}")
    return texts


def set_documents(config: EvalSetConfig, tokenizer: Tokenizer, eos_id: int) -> list[tuple[str, np.ndarray]]:
    """(text, token ids with EOS) of every document of a set, in set order: what its shards hold."""
    texts = read_texts(config)
    encoded = tokenizer.encode_batch(texts, add_special_tokens=False)
    return [(text, np.asarray(encoding.ids + [eos_id], dtype=np.int64)) for text, encoding in zip(texts, encoded)]


class NearDuplicateIndex:
    """MinHash LSH over token 5-grams of an evaluation set's documents (`add`), queried with each stored
    document (`matches`) as the tasks write it: the index grows with the set, never with the corpus."""

    def __init__(self, seed: int = 0):
        rng = np.random.default_rng(seed)
        perms = BANDS * ROWS
        self.weights = rng.integers(1, 2**63, size=SHINGLE, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        self.a = (rng.integers(1, 2**63, size=perms, dtype=np.uint64) * np.uint64(2) + np.uint64(1))[:, None]
        self.b = rng.integers(0, 2**63, size=perms, dtype=np.uint64)[:, None]
        self.bands: list[dict[bytes, list[int]]] = [{} for _ in range(BANDS)]
        self.signatures: list[np.ndarray] = []
        self.exact: dict[bytes, list[int]] = {}

    def signature(self, tokens: np.ndarray) -> np.ndarray:
        return minhash(shingle_hashes(np.asarray(tokens, dtype=np.uint64), self.weights), self.a, self.b)

    def add(self, tokens: np.ndarray) -> None:
        """Index the next set document (numbered from 0 in the order added)."""
        index = len(self.signatures)
        self.exact.setdefault(np.asarray(tokens, dtype="<u4").tobytes(), []).append(index)
        signature = self.signature(tokens)
        self.signatures.append(signature)
        for band, key in enumerate(signature.reshape(BANDS, ROWS)):
            self.bands[band].setdefault(key.tobytes(), []).append(index)

    def matches(self, tokens: np.ndarray) -> list[tuple[int, str]]:
        """(set document, "exact" | "near") for each set document this stored document repeats: token for
        token, or sharing a band with an estimated Jaccard >= NEAR_JACCARD."""
        exact = self.exact.get(np.asarray(tokens, dtype="<u4").tobytes(), [])
        found = [(index, "exact") for index in exact]
        signature = self.signature(tokens)
        near = {
            hit
            for band, key in enumerate(signature.reshape(BANDS, ROWS))
            for hit in self.bands[band].get(key.tobytes(), ())
        }
        found += [
            (hit, "near")
            for hit in sorted(near - set(exact))
            if (self.signatures[hit] == signature).mean() >= NEAR_JACCARD
        ]
        return found


KIND_ORDER = {"exact": 0, "near": 1}
Hit = list[str]  # [kind, cell] of a set document's finding (JSON in the tasks' parts)
CONTAINED: Final = "contained"


def better_hit(old: Hit | None, new: Hit) -> Hit:
    """Of two [kind, cell] findings for one set document, the one reported: exact before near, then the
    first cell by name (so the report does not depend on which task found it)."""
    return new if old is None or (KIND_ORDER[new[0]], new[1]) < (KIND_ORDER[old[0]], old[1]) else old


class SetOverlap:
    """Inside a shard task: which documents of each evaluation set the task's stored documents repeat."""

    def __init__(
        self,
        sets: list[EvalSetConfig],
        tokenizer: Tokenizer,
        eos_id: int,
        found: dict[str, dict[str, Hit]] | None = None,
        ngram: int = 13,
        found_ngrams: dict[str, list[int]] | None = None,
    ):
        """`found`, `found_ngrams`: findings to continue from (the tokenize task's, for the split task of the
        same rank)."""
        self.indexes: dict[str, NearDuplicateIndex] = {}
        self.ngram_index: dict[str, np.ndarray] = {}
        self.ngram = ngram
        for config in sets:
            self.indexes[config.name] = index = NearDuplicateIndex()
            grams = []
            for _, ids in set_documents(config, tokenizer, eos_id):
                index.add(ids)
                grams.append(ngram_hashes(ids, ngram))
            self.ngram_index[config.name] = np.unique(np.concatenate(grams))
        self.hits: dict[str, dict[str, Hit]] = {name: dict((found or {}).get(name, {})) for name in self.indexes}
        self.found_ngrams: dict[str, list[np.ndarray]] = {
            name: [np.asarray((found_ngrams or {}).get(name, []), dtype=np.uint64)] for name in self.indexes
        }

    def add(self, tokens: np.ndarray, cell: str, training: bool = True) -> None:
        """A stored document: its resemblance to each set's documents and, when it trains, its n-grams."""
        grams = ngram_hashes(tokens, self.ngram) if training else None
        for name, index in self.indexes.items():
            for number, kind in index.matches(tokens):
                self.hits[name][str(number)] = better_hit(self.hits[name].get(str(number)), [kind, cell])
            if grams is not None:
                found = self.found_ngrams[name]
                found.append(grams[found_in(grams, self.ngram_index[name])])
                if len(found) >= COMPACT_EVERY:  # a subset of the set's n-grams, whatever the documents
                    self.found_ngrams[name] = [np.unique(np.concatenate(found))]

    def ngrams_found(self) -> dict[str, list[int]]:
        """Per set, the n-gram hashes of its documents that training documents hold (a subset of the set's)."""
        return {name: np.unique(np.concatenate(found)).tolist() for name, found in self.found_ngrams.items()}


@dataclass
class WrittenSet:
    name: str
    held: HeldOut
    manifest_hash: str
    overlap: Overlap = field(default_factory=Overlap)


@dataclass(frozen=True)
class StoreTokens:
    """The store's tokenizer as its writers use it: parsed, its vocabulary's dtype, fingerprint and EOS id."""

    tokenizer: Tokenizer
    dtype: np.dtype
    fingerprint: str
    eos_id: int

    @property
    def vocab_size(self) -> int:
        return int(self.tokenizer.get_vocab_size(with_added_tokens=True))


@dataclass(frozen=True)
class Containment:
    """The n-gram hashes training documents hold (sorted), and the share of a document's `ngram`-grams found
    there (`threshold`) that leaves it out of an evaluation set."""

    trained_ngrams: np.ndarray
    ngram: int = 13
    threshold: float = 0.5


def write_eval_set(
    config: EvalSetConfig,
    set_dir: Path,
    tokens: StoreTokens,
    shard_tokens: int,
    hits: dict[int, Hit],
    containment: Containment | None = None,
) -> WrittenSet:
    """The set's shards and `set.json`, with `hits` (set document -> [kind, cell], merged from the
    tasks' `SetOverlap`) as its overlap with the store; a document mostly found in training (`containment`;
    None: not checked) is listed and left out."""
    found = [
        OverlapDocument.model_validate({"index": number, "kind": hits[number][0], "cell": hits[number][1]})
        for number in sorted(hits)
    ]
    contained: list[ContainedDocument] = []
    sequence = ShardSequence(set_dir, SET_PREFIX, tokens.dtype, shard_tokens)
    for number, (text, ids) in enumerate(set_documents(config, tokens.tokenizer, tokens.eos_id)):
        if containment is not None:
            share = float(found_in(ngram_hashes(ids, containment.ngram), containment.trained_ngrams).mean())
            if share >= containment.threshold:
                contained.append(ContainedDocument(index=number, kind=CONTAINED, share=round(share, 4)))
                continue
        sequence.add(ids, 0, config.name, len(text.encode("utf-8")))
    shards = sequence.close()
    documents, token_count, nbytes = sequence.totals()
    held = HeldOut(documents=documents, tokens=token_count, bytes=nbytes, shards=shards, sources=sequence.sources)
    overlap = Overlap(
        exact=sum(1 for f in found if f.kind == "exact"),
        near=sum(1 for f in found if f.kind == "near"),
        contained=len(contained),
        documents=found[:SHOWN],
        contained_documents=contained[:SHOWN],
    )
    manifest = EvalSetManifest(
        name=config.name, dtype=str(tokens.dtype), tokenizer_fingerprint=tokens.fingerprint, held=held, overlap=overlap
    )
    digest = write_eval_set_manifest(set_dir, manifest)
    return WrittenSet(config.name, held, digest, overlap)
