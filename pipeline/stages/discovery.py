"""Which files each source reads, and every file under a source's folders that no source reads.

A source's directory is listed with datatrove's `DataFolder.list_files` (recursively); without a
`glob` a source reads the files with one of its format's extensions (`FORMAT_SUFFIXES`), hidden
files and folders left out. Two kinds of entry are never read and are reported instead: a dangling
symbolic link, and (unless the source sets `symlinks_outside = "read"`) a link that leads outside
the source's folder, since a corpus folder that quietly pulls in files from elsewhere is rarely
what its owner meant. `unread_files` lists, per folder, the files no source reads and why, for the
run's log and the funnel's `not_read`.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pipeline.config import FORMAT_SUFFIXES, PipelineConfig, SourceConfig

EXAMPLES = 3  # file names shown per folder in `not_read`
NO_READER = "no source reads its extension"
DANGLING = "dangling symbolic link"
OUTSIDE = "symbolic link leading outside the folder"


def _hidden(relative: str) -> bool:
    return any(part.startswith(".") for part in Path(relative).parts)


def link_problem(folder: Path, relative: str) -> str | None:
    """Why a listed file must not be read (a dangling link, a link leaving `folder`), or None."""
    path = folder / relative
    if not path.exists():
        return DANGLING if path.is_symlink() else None
    return None if path.resolve().is_relative_to(folder.resolve()) else OUTSIDE


def listed_files(path: str) -> list[str]:
    """Every file under directory `path` (relative to it, sorted), hidden ones left out."""
    from datatrove.io import get_datafolder

    return [f for f in get_datafolder(path).list_files(recursive=True) if not _hidden(f)]


def source_files(source: SourceConfig, path: str) -> list[str]:
    """The files of one configured path that `source` reads, relative to it (for a file path: its name)."""
    if Path(path).is_file():
        return [Path(path).name]
    if source.glob is not None:
        from datatrove.io import get_datafolder

        files = get_datafolder(path).list_files(recursive=True, glob_pattern=source.glob)
    else:
        suffixes = FORMAT_SUFFIXES.get(source.format, ())
        files = [f for f in listed_files(path) if f.lower().endswith(suffixes)]
    folder = Path(path)
    allowed = (None,) if source.symlinks_outside == "skip" else (None, OUTSIDE)
    return [f for f in files if link_problem(folder, f) in allowed]


def unread_files(config: PipelineConfig) -> list[dict]:
    """Per source folder, the files no source reads: {source, path, files, reasons: {why: n}, examples}."""
    read: set[Path] = set()
    for source in config.sources:
        if source.format == "hf-datasets":
            read.update(Path(path) / f for path in source.paths for f in listed_files(path))
            continue
        read.update(
            Path(path) / f if Path(path).is_dir() else Path(path)
            for path in source.paths
            for f in source_files(source, path)
        )
    found, seen = [], set()
    for source in config.sources:
        for path in source.paths:
            if not Path(path).is_dir() or path in seen:
                continue
            seen.add(path)
            folder = Path(path)
            missed = [f for f in listed_files(path) if folder / f not in read]
            if missed:
                reasons = Counter(link_problem(folder, f) or NO_READER for f in missed)
                found.append(
                    {
                        "source": source.name,
                        "path": path,
                        "files": len(missed),
                        "reasons": dict(sorted(reasons.items())),
                        "examples": missed[:EXAMPLES],
                    }
                )
    return found


def describe_unread(entry: dict) -> str:
    """One log line: 'not read: 3 files under /corpus/web (source web), e.g. a.txt, b.csv (no source reads ...)'."""
    why = "; ".join(f"{n} {reason}" for reason, n in entry["reasons"].items())
    return (
        f"not read: {entry['files']:,} file{'s' if entry['files'] != 1 else ''} under {entry['path']} "
        f"(source {entry['source']}), e.g. {', '.join(entry['examples'])} ({why})"
    )
