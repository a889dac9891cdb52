"""The embedded default corpus: text that is already on this machine, as `jsonl.zst` shards.

Sources, each skipped with a one-line notice when the machine lacks it:

    python-code   the running interpreter's standard-library `.py` files
    python-docs   standard-library docstrings (one document per module) and `pydoc_data` topics
    man-<lang>    man pages in every language present, rendered to plain text by groff
                  (`groff -k -man -Tutf8 -P-cbou -rLL=78n`); without groff, a pure-Python
                  roff strip (requests and escapes removed) stands in
    debian-docs   /usr/share/doc/*/README*, changelog*, NEWS* (gzip read transparently)
    licenses      /usr/share/doc/*/copyright and /usr/share/common-licenses/*: heavily duplicated

Each record is `{"id", "text", "metadata": {"source", "path", "language"}}`. Output is
deterministic: files are visited in an order that is a pure function of their paths
(a hash, so a byte budget takes a spread rather than the alphabet's first letters), and
shards are compressed whole with a fixed zstd level. `max_bytes` caps the total text,
shared between sources by water-filling (a small source's unused share goes to the others).
"""

from __future__ import annotations

import ast
import gzip
import logging
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import xxhash
import zstandard

from millrace.artifacts import atomic_write_bytes, write_artifact
from millrace.config import StrictModel

log = logging.getLogger(__name__)

SHARD_BYTES = 1 << 20  # uncompressed text per shard: small enough to spread a source over tasks
ZSTD_LEVEL = 3
MAN_ROOT = Path("/usr/share/man")
DOC_ROOT = Path("/usr/share/doc")
COMMON_LICENSES = Path("/usr/share/common-licenses")
SUMMARY_KIND = "millrace.corpus"
MIN_DOC_CHARS = 1
MAX_MISSES = 8  # documents too big for a source's remaining budget before it stops looking


@dataclass
class CorpusRecord:
    """One document of the embedded corpus, as its `.jsonl` line records it: id, text, the file it came from
    and its language (None where its source does not say)."""

    id: str
    text: str
    path: str
    language: str | None


@dataclass
class SourceSpec:
    """A source of the embedded corpus: its name, its candidate files and how to turn one into records."""

    name: str
    language: str | None
    files: list[Path]
    to_records: Callable[[Path], list[CorpusRecord]]
    render_parallel: bool = False

    @property
    def estimated_bytes(self) -> int:
        return sum(_size(path) for path in self.files)


@dataclass
class SourceSummary:
    name: str
    documents: int = 0
    bytes: int = 0
    files: list[str] = field(default_factory=list)


class SourceCounts(StrictModel):
    documents: int
    bytes: int
    files: list[str]


class CorpusManifest(StrictModel):
    """corpus.json's payload: what was built, and from which budget (a rebuild is needed when it changes)."""

    out_dir: str
    documents: int
    bytes: int
    sources: dict[str, SourceCounts]
    notices: list[str]
    max_bytes: int | None
    python: str


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _spread_order(paths: list[Path]) -> list[Path]:
    """A deterministic order that is not alphabetical, so a budget samples across the source."""
    return sorted(paths, key=lambda p: (xxhash.xxh64_intdigest(str(p)), str(p)))


def _read_text(path: Path) -> str | None:
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    if b"\x00" in raw[:4096]:
        return None
    return raw.decode("utf-8", errors="replace")


# ---------------------------------------------------------------- python


def _stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _stdlib_files() -> list[Path]:
    root = _stdlib_dir()
    files: list[Path] = []
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d not in ("site-packages", "dist-packages", "__pycache__"))
        files += [Path(directory) / name for name in names if name.endswith(".py")]
    return files


def _python_code(path: Path) -> list[CorpusRecord]:
    text = _read_text(path)
    rel = path.relative_to(_stdlib_dir()).as_posix()
    return [CorpusRecord(f"python-code/{rel}", text, str(path), "python")] if text else []


def _python_docs(path: Path) -> list[CorpusRecord]:
    """One document per module: its docstrings under headings, in source order."""
    text = _read_text(path)
    if not text:
        return []
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    rel = path.relative_to(_stdlib_dir()).as_posix()
    module = rel[:-3].replace("/", ".").removesuffix(".__init__")
    parts: list[str] = []
    if doc := ast.get_docstring(tree):
        parts.append(f"{module}\n\n{doc}")
    for node in ast.walk(tree):
        if not isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) or node.name[0] == "_":
            continue
        if doc := ast.get_docstring(node):
            parts.append(f"{module}.{node.name}\n\n{doc}")
    if not parts:
        return []
    return [CorpusRecord(f"python-docs/{rel}", "\n\n".join(parts), str(path), "en")]


def _pydoc_topics(_: Path) -> list[CorpusRecord]:
    try:
        from pydoc_data.topics import topics  # lazy: large (pydoc's topic texts): only for the local corpus
    except ImportError:
        return []
    return [
        CorpusRecord(f"python-docs/pydoc_data/{name}", body, f"pydoc_data.topics:{name}", "en")
        for name, body in sorted(topics.items())
        if body.strip()
    ]


# ---------------------------------------------------------------- man pages

_ROFF_REQUEST = re.compile(r"^[.'][ \t]*(\S+)[ \t]*(.*)$")
_ROFF_ESCAPE = re.compile(r"\\(?:f[BIRP1-4]|f\(..|f\[[^]]*\]|s[-+]?\d|\(..|\[[^]]*\]|\*.|\*\(..|[&|^%e\-\\ ])")


def _strip_roff(source: str) -> str:
    """A plain-text approximation of a man page, used only when no groff is installed."""
    lines: list[str] = []
    for line in source.splitlines():
        match = _ROFF_REQUEST.match(line)
        if match:
            request, rest = match.groups()
            if request.startswith('\\"') or request in ('\\"', "ig", "de", "ds", "nr", "so"):
                continue
            if request in ("SH", "SS"):
                lines += ["", rest.strip('"').upper() if request == "SH" else rest.strip('"')]
            elif request in ("B", "I", "BR", "IR", "RB", "BI", "IB", "RI", "TP", "IP", "TH"):
                if rest:
                    lines.append(rest.replace('"', ""))
            elif request in ("PP", "LP", "P", "sp", "br"):
                lines.append("")
            continue
        lines.append(line)
    return _ROFF_ESCAPE.sub(lambda m: "-" if m.group(0) == "\\-" else "", "\n".join(lines))


def _man_renderer() -> str | None:
    return shutil.which("groff")


def _render_man(path: Path) -> str | None:
    raw = _read_text(path)
    if raw is None or raw.lstrip().startswith(".so "):
        return None  # an alias page: its target is rendered on its own
    groff = _man_renderer()
    if groff is None:
        return _strip_roff(raw)
    try:
        done = subprocess.run(
            [groff, "-k", "-man", "-Tutf8", "-P-cbou", "-rLL=78n", "-rcR=1"],
            input=raw.encode(),
            capture_output=True,
            check=False,  # a page groff complains about still renders; an empty one is skipped
            timeout=30,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        )
    except (subprocess.TimeoutExpired, OSError):
        return None
    text = done.stdout.decode("utf-8", errors="replace")
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n" if text.strip() else None


def _man_sources() -> list[SourceSpec]:
    if not MAN_ROOT.is_dir():
        return []
    languages: dict[str, list[Path]] = {}
    for section in sorted(MAN_ROOT.glob("man*")):
        languages.setdefault("en", []).extend(p for p in section.iterdir() if p.is_file() and not p.is_symlink())
    for lang_dir in sorted(p for p in MAN_ROOT.iterdir() if p.is_dir() and not p.name.startswith("man")):
        files = [p for p in lang_dir.glob("man*/*") if p.is_file() and not p.is_symlink()]
        if files:
            languages[lang_dir.name] = files
    specs = []
    for lang, files in sorted(languages.items()):
        source = "man-" + lang.lower().replace("_", "-").split(".")[0].split("@")[0]
        language = lang.split(".")[0]

        def to_records(path: Path, source: str = source, language: str = language) -> list[CorpusRecord]:
            text = _render_man(path)
            if not text:
                return []
            rel = path.relative_to(MAN_ROOT).as_posix()
            return [CorpusRecord(f"{source}/{rel}", text, str(path), language)]

        specs.append(SourceSpec(source, language, files, to_records, render_parallel=True))
    return specs


# ---------------------------------------------------------------- debian docs and licences

_DOC_NAME = re.compile(r"^(README|changelog|NEWS)([._-].*)?$", re.IGNORECASE)


def _plain_file_records(source: str, language: str | None, root: Path) -> Callable[[Path], list[CorpusRecord]]:
    def to_records(path: Path) -> list[CorpusRecord]:
        text = _read_text(path)
        if not text or not text.strip():
            return []
        return [CorpusRecord(f"{source}/{path.relative_to(root).as_posix()}", text, str(path), language)]

    return to_records


def _debian_docs() -> list[Path]:
    if not DOC_ROOT.is_dir():
        return []
    return [
        p for p in DOC_ROOT.glob("*/*") if p.is_file() and _DOC_NAME.match(p.name) and not p.name.endswith(".html")
    ]


def _licence_files() -> list[Path]:
    files = [p for p in DOC_ROOT.glob("*/copyright") if p.is_file()] if DOC_ROOT.is_dir() else []
    if COMMON_LICENSES.is_dir():
        files += [p for p in COMMON_LICENSES.iterdir() if p.is_file() and not p.is_symlink()]
    return files


def default_sources() -> tuple[list[SourceSpec], list[str]]:
    """The sources this machine has, and a notice for each it lacks."""
    notices: list[str] = []
    specs: list[SourceSpec] = []
    stdlib = _stdlib_files()
    if stdlib:
        specs.append(SourceSpec("python-code", "python", stdlib, _python_code))
        docs = SourceSpec("python-docs", "en", stdlib, _python_docs)
        specs.append(docs)
    else:
        notices.append(f"python-code, python-docs: no standard library found under {_stdlib_dir()}; skipped")
    man = _man_sources()
    if man:
        if _man_renderer() is None:
            notices.append("man pages: groff not found; rendering with millrace's plain roff strip")
        specs += man
    else:
        notices.append(f"man-*: no man pages under {MAN_ROOT}; skipped")
    debian = _debian_docs()
    if debian:
        specs.append(SourceSpec("debian-docs", None, debian, _plain_file_records("debian-docs", None, DOC_ROOT)))
    else:
        notices.append(f"debian-docs: no package documentation under {DOC_ROOT}; skipped")
    licences = _licence_files()
    if licences:

        def licence_records(path: Path) -> list[CorpusRecord]:
            root = COMMON_LICENSES if path.is_relative_to(COMMON_LICENSES) else DOC_ROOT
            prefix = "licenses/common-licenses/" if root == COMMON_LICENSES else "licenses/"
            text = _read_text(path)
            if not text or not text.strip():
                return []
            return [CorpusRecord(prefix + path.relative_to(root).as_posix(), text, str(path), "en")]

        specs.append(SourceSpec("licenses", "en", licences, licence_records))
    else:
        notices.append("licenses: no copyright or common-licenses files found; skipped")
    return specs, notices


class _ShardSink:
    """Collects records of one source and writes `<source>/<source>-NNNNN.jsonl.zst` shards atomically."""

    def __init__(self, out_dir: Path, source: str):
        self.dir = out_dir / source
        self.source = source
        self.buffer: list[bytes] = []
        self.buffered = 0
        self.shards: list[str] = []
        self.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)

    def add(self, record: CorpusRecord) -> None:
        line = orjson.dumps(
            {
                "id": record.id,
                "text": record.text,
                "metadata": {"source": self.source, "path": record.path, "language": record.language},
            }
        )
        self.buffer.append(line + b"\n")
        self.buffered += len(record.text.encode())
        if self.buffered >= SHARD_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self.buffer:
            return
        name = f"{self.source}-{len(self.shards):05d}.jsonl.zst"
        atomic_write_bytes(self.dir / name, self.compressor.compress(b"".join(self.buffer)))
        self.shards.append(f"{self.source}/{name}")
        self.buffer, self.buffered = [], 0


def _records(spec: SourceSpec) -> Iterator[CorpusRecord]:
    files = _spread_order(spec.files)
    if spec.name == "python-docs":
        yield from _pydoc_topics(Path("pydoc_data"))
    if spec.render_parallel:
        with ThreadPoolExecutor(max_workers=4) as pool:
            # map keeps the input order, so output stays deterministic; growing chunks bound the work
            # rendered past a small budget
            start, chunk = 0, 2
            while start < len(files):
                for records in pool.map(spec.to_records, files[start : start + chunk]):
                    yield from records
                yield None  # type: ignore[misc]  # a checkpoint: lets the caller stop between chunks
                start, chunk = start + chunk, min(chunk * 2, 32)
    else:
        for path in files:
            yield from spec.to_records(path)


def _write_source(spec: SourceSpec, out_dir: Path, budget: int | None) -> SourceSummary:
    summary = SourceSummary(spec.name)
    sink = _ShardSink(out_dir, spec.name)
    seen: set[str] = set()
    misses = 0
    for record in _records(spec):
        if budget is not None and (summary.bytes >= budget or misses >= MAX_MISSES):
            break
        if record is None or len(record.text.strip()) < MIN_DOC_CHARS or record.id in seen:
            continue
        size = len(record.text.encode())
        if budget is not None and summary.bytes + size > budget:
            misses += 1
            continue  # too big for what is left; a smaller document further on may still fit
        seen.add(record.id)
        sink.add(record)
        summary.documents += 1
        summary.bytes += size
    sink.flush()
    summary.files = sink.shards
    return summary


@dataclass
class CorpusSummary:
    out_dir: Path
    sources: list[SourceSummary]
    notices: list[str]

    @property
    def documents(self) -> int:
        return sum(s.documents for s in self.sources)

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.sources)

    def record(self, max_bytes: int | None) -> CorpusManifest:
        """corpus.json's payload: this summary, and the budget it was built under."""
        return CorpusManifest(
            out_dir=str(self.out_dir),
            documents=self.documents,
            bytes=self.bytes,
            sources={s.name: SourceCounts(documents=s.documents, bytes=s.bytes, files=s.files) for s in self.sources},
            notices=self.notices,
            max_bytes=max_bytes,
            python=sys.version.split()[0],
        )

    def to_json(self) -> dict[str, object]:
        """What `pipeline corpus --json` prints: the record less the build's budget and Python version."""
        return self.record(None).model_dump(mode="json", exclude={"max_bytes", "python"})


def build_local_corpus(
    out_dir: Path | str, max_bytes: int | None = None, progress: Callable[[str], None] | None = None
) -> CorpusSummary:
    """Build the embedded default corpus under `out_dir` (one sub-directory per source)."""
    out_dir = Path(out_dir)
    specs, notices = default_sources()
    for notice in notices:
        log.warning(notice)
    if out_dir.exists():
        for spec in specs:
            if (out_dir / spec.name).is_dir():
                shutil.rmtree(out_dir / spec.name)  # a rebuild replaces its own sources, nothing else
    out_dir.mkdir(parents=True, exist_ok=True)
    # water-filling: smallest sources first, each gets an equal share of what is left
    order = sorted(specs, key=lambda s: (s.estimated_bytes, s.name))
    remaining = max_bytes
    summaries: dict[str, SourceSummary] = {}
    for index, spec in enumerate(order):
        budget = None if remaining is None else remaining // (len(order) - index)
        if progress:
            progress(spec.name)
        log.info("corpus: %s (%d candidate files, budget %s bytes)", spec.name, len(spec.files), budget or "all")
        summary = _write_source(spec, out_dir, budget)
        summaries[spec.name] = summary
        if remaining is not None:
            remaining -= summary.bytes
    result = CorpusSummary(out_dir, [summaries[s.name] for s in specs if summaries[s.name].documents], notices)
    write_artifact(out_dir / "corpus.json", SUMMARY_KIND, 1, result.record(max_bytes).model_dump(mode="json"))
    return result
