"""`pipeline init`: a commented starter config for a corpus directory, every option present.

One `[[sources]]` table per source found: each sub-directory of the corpus directory that holds
data files, and the data files lying directly in it. A folder holding several formats (say
`.jsonl.zst` and `.parquet`) gives one source per format. Formats are found by extension, every
one a reader takes (`FORMAT_SUFFIXES`: `.jsonl`, `.json`, compressed `.gz` `.zst` `.bz2` `.xz`
variants, `.parquet`, `.warc`, `.warc.gz`, `.html`), and a `datasets` `save_to_disk` directory
by its `dataset_info.json` or `dataset_dict.json`. The kind comes from the first record's
`metadata.language` (`python` → code, skipping prose filters and language id); prose sources get
datatrove's Gopher filters, applied with each document's language's rules after language id.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from millrace.errors import ConfigError
from pipeline.config import FORMAT_SUFFIXES, DedupConfig, ExecutorConfig, OutputConfig, TokenizerConfig, ValidationConfig
from pipeline.stages.compressed import compression_of, decompressed_chunks

FORMATS = ("jsonl", "parquet", "warc", "html")  # in the order a folder's sources are named
CODE_LANGUAGES = {"python", "c", "cpp", "java", "javascript", "rust", "go", "shell", "code"}


def _is_datasets_dir(directory: Path) -> bool:
    return (directory / "dataset_info.json").exists() or (directory / "dataset_dict.json").exists()


def _data_files(paths: list[Path]) -> dict[str, list[Path]]:
    """The given files by format (sorted), hidden files, dangling links and other files left out."""
    by_format: dict[str, list[Path]] = {}
    for path in sorted(paths):
        fmt = next((f for f in FORMATS if path.name.lower().endswith(FORMAT_SUFFIXES[f])), None)
        if fmt and path.is_file() and not path.name.startswith("."):
            by_format.setdefault(fmt, []).append(path)
    return by_format


def is_json_document(path: Path) -> bool:
    """A plain `.json` file whose first line is not a whole JSON object is one JSON document (a pretty-printed
    object or array, such as the corpus builder's own `corpus.json`), not JSON Lines: read as JSON Lines, every
    line of it would be a malformed record."""
    if not path.name.lower().endswith(".json"):
        return False
    try:
        with open(path, "rb") as file:
            first = file.readline(1 << 20).decode("utf-8-sig", errors="replace")
        return not isinstance(json.loads(first), dict)
    except (OSError, json.JSONDecodeError):
        return True


def _first_metadata(files: list[Path], fmt: str) -> dict:
    if fmt != "jsonl" or not files:
        return {}
    try:
        with open(files[0], "rb") as raw:
            head = next(decompressed_chunks(raw, compression_of(files[0].name)), b"")
    except (OSError, EOFError, ValueError):
        return {}
    line = io.BytesIO(head).readline().decode("utf-8-sig", errors="replace")
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return {}
    metadata = record.get("metadata", {}) if isinstance(record, dict) else {}
    return metadata if isinstance(metadata, dict) else {}


def _folder_sources(name: str, directory: Path) -> list[tuple[str, list[Path], str, dict]]:
    """A folder's sources: one per format found anywhere under it (named `name`, then `name-<format>`)."""
    if _is_datasets_dir(directory):
        return [(name, [directory], "hf-datasets", {})]
    visible = [p for p in directory.rglob("*") if not any(part.startswith(".") for part in p.relative_to(directory).parts)]
    found = sorted(_data_files(visible).items(), key=lambda item: FORMATS.index(item[0]))
    return [(name if index == 0 else f"{name}-{fmt}", [directory], fmt, _first_metadata(files, fmt))
            for index, (fmt, files) in enumerate(found)]


def discover_sources(corpus_dir: Path) -> list[tuple[str, list[Path], str, dict]]:
    """(name, paths, format, first record's metadata) for each source under `corpus_dir`: its folders,
    then the data files lying directly in it (listed by name, so that no folder is read twice)."""
    corpus_dir = Path(corpus_dir)
    if not corpus_dir.is_dir():
        raise ConfigError(f"{corpus_dir}: corpus directory not found")
    root = corpus_dir.name.lower()
    if _is_datasets_dir(corpus_dir):
        return [(root, [corpus_dir], "hf-datasets", {})]
    children = sorted(p for p in corpus_dir.iterdir() if not p.name.startswith("."))
    found = [source for child in children if child.is_dir() for source in _folder_sources(child.name.lower(), child)]
    taken = {source[0] for source in found}
    loose = _data_files([p for p in children if not p.is_dir() and not is_json_document(p)])
    for fmt, files in sorted(loose.items(), key=lambda item: FORMATS.index(item[0])):
        name = root if root not in taken else f"{root}-{fmt}"
        taken.add(name)
        found.append((name, files, fmt, _first_metadata(files, fmt)))
    if not found:
        raise ConfigError(f"{corpus_dir}: no jsonl, json, parquet, warc, html (or compressed) files"
                          " or datasets directory found")
    return found


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def _source_table(name: str, paths: list[Path], fmt: str, metadata: dict) -> str:
    language = str(metadata.get("language") or "")
    code = language in CODE_LANGUAGES or name.endswith("-code")
    filters, language_id = ([], False) if code else (["gopher_repetition", "gopher_quality"], True)
    return f"""
[[sources]]
name = {json.dumps(name)}              # becomes the cell name when no domains stage runs
paths = {_toml_list([str(p) for p in paths])}  # files or directories (relative to this file or absolute)
format = "{fmt}"                 # jsonl | parquet | warc | html | hf-datasets (warc, html: trafilatura)
# glob = "**/*.jsonl"            # only these files inside directories; absent: every file with one of the
                                 #   format's extensions ({", ".join(FORMAT_SUFFIXES.get(fmt, ())[:4])}...)
kind = "{"code" if code else "prose"}"                  # prose | code (code never goes through prose filters)
normalise = true                 # unicode repair (ftfy) before anything else
filters = {_toml_list(filters)}  # any of gopher_quality, gopher_repetition, c4_quality, fineweb_quality
language_id = {"true" if language_id else "false"}  # py3langid, before the filters: each applies its language's rules
# languages = ["en"]             # keep only these languages (needs language_id); absent keeps all
text_key = "text"
id_key = "id"
on_bad_file = "error"            # error | skip: a truncated or corrupt file stops the run, or is skipped and listed
max_document_bytes = 1000000     # longer documents are dropped (too_long) or cut, as long_documents says
long_documents = "drop"          # drop | cut
symlinks_outside = "skip"        # skip | read: links leading out of the source's folders are reported, or read
"""


def init_config(corpus_dir: Path | str) -> str:
    """The text of a starter config for `corpus_dir`."""
    corpus_dir = Path(corpus_dir).resolve()
    sources = discover_sources(corpus_dir)
    d, t, o, e, v = DedupConfig(), TokenizerConfig(), OutputConfig(), ExecutorConfig(), ValidationConfig()
    head = f"""# millrace pipeline config for {corpus_dir}
# Run it with:  millrace pipeline run THIS_FILE.toml [--executor local|ray|slurm] [--workers N]
# Every option is present; delete a line to take its default. Unknown options are errors.
"""
    for path in sorted(p for p in corpus_dir.iterdir() if p.is_file() and is_json_document(p)):
        head += f"# Not a source: {path.name} is one JSON document, not JSON Lines (one record per line).\n"
    tail = f"""
# Options for datatrove's filters, passed as keyword arguments (see datatrove's docs). They apply to every
# language, over each language's own rules (pipeline/stages/language_rules.py: FineWeb-2's thresholds and stop words).
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
max_documents_per_cell = {v.max_documents_per_cell}  # at most this many per cell; at least one if it has two or more
max_token_share = {v.max_token_share}           # past the first, at most this share of a cell's tokens
seed = {v.seed}                         # the hash key: another seed holds out other documents
# [[validation.sets]]             # an external evaluation set, tokenized into the store, never trained on
# name = "wiki-2026"
# paths = ["eval/wiki.jsonl"]     # files or directories
# format = "jsonl"                # jsonl | parquet | text (one document per file)
# text_key = "text"

[executor]
kind = "{e.kind}"                 # local | ray (RAY_ADDRESS=... for a running cluster) | slurm
tasks = {e.tasks}                        # input split; keep it when resuming a run
workers = {e.workers}                      # tasks run at once (local, ray)
# [executor.slurm]                # kind = "slurm": one sbatch job per stage, each after the one before;
# partition = "cpu"               # required           `--dry-run` writes the scripts without submitting
# time = "04:00:00"               # per task: D-HH:MM:SS, HH:MM:SS or minutes
# cpus_per_task = 1
# mem_per_cpu_gb = 2
# driver_cpus = 4                 # the one-task jobs: dedup rounds, tokenizer, assembly
# max_running = 0                 # array tasks at once; 0: no limit
# qos = ""
# env_command = "source /shared/.venv/bin/activate"
# sbatch_args = {{account = "lab"}}  # any other #SBATCH option
# logs = ""                       # raw Slurm output; default: the run's work logs

# [quality] and [domains]: quality buckets and topic domains (pipeline.cells.quality, pipeline.cells.domains);
# cells become cNNqQ. Delete both tables (or set enabled = false) to keep one cell per source.
"""
    from pipeline.stages.cell_stages import starter_sections

    cells = starter_sections([source[0] for source in sources])
    return head + "".join(_source_table(*source) for source in sources) + tail + cells
