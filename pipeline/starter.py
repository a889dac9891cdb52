"""`pipeline init`: a commented starter config for a corpus directory, every option present.

One `[[sources]]` table per source found: each sub-directory of the corpus directory that
holds data files (or the directory itself). The format is taken from the files' extension,
the kind from the first record's `metadata.language` (`python` → code, skipping prose
filters and language id), and English prose gets datatrove's Gopher filters while other
languages get only the language-independent repetition filter.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import zstandard

from millrace.errors import ConfigError
from pipeline.config import DEFAULT_GLOBS, DedupConfig, ExecutorConfig, OutputConfig, TokenizerConfig, ValidationConfig

FORMATS = (("jsonl.zst", "*.jsonl.zst"), ("jsonl", "*.jsonl"), ("parquet", "*.parquet"), ("warc", "*.warc.gz"),
           ("html", "*.html"))
CODE_LANGUAGES = {"python", "c", "cpp", "java", "javascript", "rust", "go", "shell", "code"}


def _format_of(directory: Path) -> str | None:
    if (directory / "dataset_info.json").exists() or (directory / "dataset_dict.json").exists():
        return "hf-datasets"
    for name, pattern in FORMATS:
        if any(directory.rglob(pattern)):
            return name
    return None


def _first_metadata(directory: Path, fmt: str) -> dict:
    files = sorted(directory.rglob("*.jsonl.zst" if fmt == "jsonl.zst" else "*.jsonl"))
    if not files or fmt not in ("jsonl", "jsonl.zst"):
        return {}
    with open(files[0], "rb") as raw:
        stream = zstandard.ZstdDecompressor().stream_reader(raw) if fmt == "jsonl.zst" else raw
        line = io.TextIOWrapper(stream, encoding="utf-8").readline()
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return {}
    return record.get("metadata", {}) if isinstance(record, dict) else {}


def discover_sources(corpus_dir: Path) -> list[tuple[str, Path, str, dict]]:
    """(name, path, format, first record's metadata) for each source under `corpus_dir`."""
    corpus_dir = Path(corpus_dir)
    if not corpus_dir.is_dir():
        raise ConfigError(f"{corpus_dir}: corpus directory not found")
    found = []
    for child in sorted(p for p in corpus_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
        fmt = _format_of(child)
        if fmt:
            found.append((child.name.lower(), child, fmt, _first_metadata(child, fmt)))
    if not found:
        fmt = _format_of(corpus_dir)
        if fmt:
            found.append((corpus_dir.name.lower(), corpus_dir, fmt, _first_metadata(corpus_dir, fmt)))
    if not found:
        raise ConfigError(f"{corpus_dir}: no jsonl, jsonl.zst, parquet, warc, html or datasets directory found")
    return found


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def _source_table(name: str, path: Path, fmt: str, metadata: dict) -> str:
    language = str(metadata.get("language") or "")
    code = language in CODE_LANGUAGES or name.endswith("-code")
    if code:
        filters, language_id = [], False
    elif language in ("", "en"):
        filters, language_id = ["gopher_repetition", "gopher_quality"], True
    else:
        filters, language_id = ["gopher_repetition"], True
    return f"""
[[sources]]
name = {json.dumps(name)}              # becomes the cell name when no domains stage runs
paths = [{json.dumps(str(path))}]  # files or directories (relative to this file or absolute)
format = "{fmt}"                 # jsonl | jsonl.zst | parquet | warc | html | hf-datasets (warc, html: trafilatura)
glob = {json.dumps(DEFAULT_GLOBS.get(fmt, ""))}   # files to read inside directories
kind = "{"code" if code else "prose"}"                  # prose | code (code never goes through prose filters)
normalise = true                 # unicode repair (ftfy) before anything else
filters = {_toml_list(filters)}  # any of gopher_quality, gopher_repetition, c4_quality, fineweb_quality
language_id = {"true" if language_id else "false"}              # py3langid: record metadata.language (+ score)
# languages = ["en"]             # keep only these languages (needs language_id); absent keeps all
text_key = "text"
id_key = "id"
on_bad_file = "error"            # error | skip: a truncated or corrupt file stops the run, or is skipped and listed
max_document_bytes = 1000000     # longer documents are dropped (too_long) or cut, as long_documents says
long_documents = "drop"          # drop | cut
"""


def init_config(corpus_dir: Path | str) -> str:
    """The text of a starter config for `corpus_dir`."""
    corpus_dir = Path(corpus_dir).resolve()
    sources = discover_sources(corpus_dir)
    d, t, o, e, v = DedupConfig(), TokenizerConfig(), OutputConfig(), ExecutorConfig(), ValidationConfig()
    head = f"""# millrace pipeline config for {corpus_dir}
# Run it with:  millrace pipeline run THIS_FILE.toml [--executor local|ray] [--workers N]
# Every option is present; delete a line to take its default. Unknown options are errors.
"""
    tail = f"""
# Options for datatrove's filters, passed as keyword arguments (see datatrove's docs).
[filters.gopher_quality]
max_non_alpha_words_ratio = 0.5  # share of words with a letter; datatrove's web default 0.8 drops most technical text
# min_doc_words = 50
# max_symbol_word_ratio = 0.1
[filters.gopher_repetition]
# dup_line_frac = 0.3
[filters.c4_quality]
# filter_no_terminal_punct = true
[filters.fineweb_quality]
# line_punct_thr = 0.12

[dedup]
exact = {str(d.exact).lower()}                     # drop documents with identical text (keeps the smallest key)
fuzzy = {str(d.fuzzy).lower()}                     # MinHash + LSH near-duplicate removal
ngram = {d.ngram}                        # word n-gram shingles
bands = {d.bands}                       # LSH bands x rows = signature length; 40 x 3 makes pairs from
rows = {d.rows}                         #   Jaccard ~0.5 up candidates with probability > 0.995
threshold = {d.threshold}                  # estimated Jaccard a candidate pair must reach
verify_threshold = {d.verify_threshold}           # ... and a removed document with its cluster's kept one (no chains)
seed = {d.seed}
parts = {d.parts}                        # duplicate finding runs as this many parallel tasks (results unchanged)

[tokenizer]
# path = "tokenizer.json"        # any HF tokenizer.json; absent: train a byte-level BPE on a sample
vocab_size = {t.vocab_size}              # for the trained BPE (<= 65536 gives uint16 shards)
sample_bytes = {t.sample_bytes}        # text sampled from the deduplicated corpus to train it
eos = "{t.eos}"            # appended after every document
batch_size = {t.batch_size}

[output]
name = "{o.name}"                 # $MILLRACE_HOME/stores/<name>/<version>
# version = "2026.01.31"         # CalVer; absent: today's date
shard_tokens = {o.shard_tokens}         # a cell's shard rolls over after this many tokens
# url = "s3://bucket/stores"     # also copy the finished store there (any fsspec URL; store.json last)

[validation]
tokens_per_cell = {v.tokens_per_cell}          # held out per cell (lowest keyed hash first) into validation shards
fraction = {v.fraction}                # and every document whose hash falls below this share of the range
max_documents_per_cell = {v.max_documents_per_cell}       # at most this many per cell; at least one when a cell has two or more
max_token_share = {v.max_token_share}           # past the first, at most this share of a cell's tokens
seed = {v.seed}                         # the hash key: another seed holds out other documents
# [[validation.sets]]             # an external evaluation set, tokenized into the store, never trained on
# name = "wiki-2026"
# paths = ["eval/wiki.jsonl"]     # files or directories
# format = "jsonl"                # jsonl | parquet | text (one document per file)
# text_key = "text"

[executor]
kind = "{e.kind}"                 # local | ray (RAY_ADDRESS=... for a running cluster)
tasks = {e.tasks}                        # input split; keep it when resuming a run
workers = {e.workers}                      # tasks run at once

# [quality] and [domains]: quality buckets and topic domains (pipeline.cells.quality, pipeline.cells.domains);
# cells become cNNqQ. Delete both tables (or set enabled = false) to keep one cell per source.
"""
    from pipeline.stages.cell_stages import starter_sections

    cells = starter_sections([source[0] for source in sources])
    return head + "".join(_source_table(*source) for source in sources) + tail + cells
