"""`millrace store`: inspect, verify and create token stores."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import click

from millrace.errors import ArtifactError, ConfigError
from millrace.home import Home
from millrace.names import PLAIN_NAME, known
from millrace.options import home_option, json_option, print_json
from millrace.remote_calls import WRITE_LIMITS, CallLimits
from pipeline.cells.held_out_split import HELD_OUT_REASON
from pipeline.config import CALVER
from pipeline.steps.funnel import SourceKept, per_source
from pipeline.store.format import Store, StoreManifest, write_stats_only_store
from pipeline.store.labels import labelled
from pipeline.store.manifest_records import Decontamination, FunnelStep, NotRead, QualityStats


def resolve_store(spec: str, home: Home) -> Path:
    """A store directory, or `name/version`, or `name` (its newest version) under $MILLRACE_HOME."""
    path = Path(spec)
    if (path / "store.json").exists():
        return path
    candidate = home.stores / spec
    if (candidate / "store.json").exists():
        return candidate
    if candidate.is_dir():
        versions = sorted(p for p in candidate.iterdir() if (p / "store.json").exists())
        if versions:
            return versions[-1]
    stores = (f"{p.parent.name}/{p.name}" for p in home.store_versions())
    raise ArtifactError(f"{spec}: no store.json there, nor under {home.stores}" + known("stores", stores))


def _given_back(step: FunnelStep) -> dict[str, int]:
    """Documents a funnel step gave back to training, per reason (the validation step's decontaminated ones)."""
    total: dict[str, int] = {}
    for counts in step.sources.values():
        for reason, numbers in counts.given_back.items():
            total[reason] = total.get(reason, 0) + numbers.documents
    return total


def _funnel_summary(step: FunnelStep) -> dict[str, Any]:
    """One funnel step as `store info` shows it: documents received and kept (per language, when counted)."""
    row: dict[str, Any] = {
        "stage": step.name,
        "received": sum(s.received.documents for s in step.sources.values()),
        "kept": sum(s.kept.documents for s in step.sources.values()),
    }
    if step.languages:
        row["languages"] = {
            lang: {"received": c.received.documents, "kept": c.kept.documents} for lang, c in step.languages.items()
        }
    if given_back := _given_back(step):
        row["given_back"] = given_back
    return row


def store_summary(path: Path) -> dict[str, Any]:
    store = Store(path)
    m = store.manifest
    cells = {
        name: {
            **c.model_dump(),
            "validation_documents": c.validation_documents,
            "validation_tokens": c.validation_tokens,
        }
        for name, c in sorted(m.cells.items())
    }
    summary = {
        "path": str(store.path),
        "labels": m.stats.domain_labels(),
        "name": m.name,
        "version": m.version,
        "stats_only": m.stats_only,
        "dtype": m.dtype,
        "tokenizer": m.tokenizer.model_dump() if m.tokenizer else None,
        "documents": sum(c.documents for c in m.cells.values()),
        "tokens": sum(c.tokens for c in m.cells.values()),
        "bytes": sum(c.bytes for c in m.cells.values()),
        "validation_documents": sum(c.validation_documents for c in m.cells.values()),
        "validation_tokens": sum(c.validation_tokens for c in m.cells.values()),
        "cells": cells,
        "sets": {name: summary.model_dump() for name, summary in sorted(m.sets.items())},
        "sources": m.sources,
        "manifest_hash": store.manifest_hash,
        "decontamination": m.stats.decontamination.model_dump() if m.stats.decontamination else None,
    }
    if m.funnel.stages:
        summary["funnel"] = [_funnel_summary(step) for step in m.funnel.stages]
        summary["not_read"] = [entry.model_dump() for entry in m.funnel.not_read]
        summary["per_source"] = [e.model_dump() for e in per_source(m.funnel, frozenset({HELD_OUT_REASON}))]
    if m.stats.domains or m.stats.quality:
        summary["grid"] = domain_grid(m)
    if m.stats.quality:
        summary["quality"] = quality_summary(store, m.stats.quality)
    return summary


def quality_summary(store: Store, quality: QualityStats) -> dict[str, object]:
    """What the quality score means, and each bucket's language mix against the corpus's."""
    from pipeline.store.language_mix import bucket_language_mix, share_ratios  # lazy: heavy (pyarrow)

    mix = bucket_language_mix(store)
    shown = quality.model_dump(include={"good", "other", "calibrated_by", "meaning"})
    return {**shown, "language_mix": mix, "share_ratios": share_ratios(mix)}


def domain_grid(manifest: StoreManifest) -> dict[str, object]:
    """Tokens per (domain, bucket) from `cNNqQ` cell names, with domain labels where recorded."""
    labels = manifest.stats.domain_labels()
    grid: dict[str, dict[str, int]] = {}
    for name, cell in manifest.cells.items():
        match = re.fullmatch(r"(c\d+)(q\d+)", name)
        if match:
            grid.setdefault(match.group(1), {})[match.group(2)] = cell.tokens
    return {"labels": labels, "tokens": {d: dict(sorted(b.items())) for d, b in sorted(grid.items())}}


def print_summary(summary: dict[str, Any]) -> None:
    click.echo(
        f"store {summary['name']}/{summary['version']} at {summary['path']}"
        + (" (stats only)" if summary["stats_only"] else f" ({summary['dtype']})")
    )
    labels = summary.get("labels", {})
    width = max([20, *(len(labelled(name, labels)) for name in summary["cells"])])
    click.echo(
        f"{'cell':<{width}} {'documents':>10} {'tokens':>14} {'bytes':>14} "
        f"{'held-out docs':>14} {'held-out tokens':>16}"
    )
    for name, cell in summary["cells"].items():
        click.echo(
            f"{labelled(name, labels):<{width}} {cell['documents']:>10,} {cell['tokens']:>14,} {cell['bytes']:>14,} "
            f"{cell['validation_documents']:>14,} {cell['validation_tokens']:>16,}"
        )
    click.echo(
        f"{'total':<{width}} {summary['documents']:>10,} {summary['tokens']:>14,} {summary['bytes']:>14,} "
        f"{summary['validation_documents']:>14,} {summary['validation_tokens']:>16,}"
    )
    click.echo("(documents, tokens and bytes are training's; held-out documents are in each cell's validation shards)")
    for name, eval_set in summary["sets"].items():
        click.echo(
            f"evaluation set {name}: {eval_set['documents']:,} documents, {eval_set['tokens']:,} tokens; "
            f"in the corpus: {eval_set['overlap_exact']:,} exactly, {eval_set['overlap_near']:,} near-duplicate; "
            f"{eval_set.get('contained', 0):,} mostly found in training, left out"
        )
    for stage in summary.get("funnel", []):
        click.echo(
            f"  funnel {stage['stage']:<18} received {stage['received']:>8,}  kept {stage['kept']:>8,}"
            + "".join(
                f"  (of which given back to training, {reason}: {n:,})"
                for reason, n in stage.get("given_back", {}).items()
            )
        )
        removed = {lang: c["received"] - c["kept"] for lang, c in stage.get("languages", {}).items()}
        if any(removed.values()):
            click.echo(
                "    removed per language: "
                + ", ".join(
                    f"{lang} {n:,}/{stage['languages'][lang]['received']:,}" for lang, n in removed.items() if n
                )
            )
    _print_sources(summary)
    grid = summary.get("grid")
    if grid and grid["tokens"]:
        buckets = sorted({b for row in grid["tokens"].values() for b in row})
        click.echo(f"{'domain':<28}" + "".join(f"{b:>12}" for b in buckets))
        for domain, row in grid["tokens"].items():
            label = f"{domain} {grid['labels'].get(domain, '')}"[:27]
            click.echo(f"{label:<28}" + "".join(f"{row.get(b, 0):>12,}" for b in buckets))
    if summary.get("quality"):
        print_quality(summary["quality"])


def _print_sources(summary: dict[str, Any]) -> None:
    """Per source, what the funnel kept; the files no source read; what the decontamination gave back."""
    for entry in summary.get("per_source", []):
        click.echo(f"  {SourceKept.model_validate(entry).describe()}")
    for entry in summary.get("not_read", []):
        click.echo(f"  {NotRead.model_validate(entry).describe()}")
    if summary.get("decontamination"):
        found = Decontamination.model_validate(summary["decontamination"])
        click.echo(
            f"  held-out decontamination ({found.ngram}-grams, threshold {found.threshold:g}): "
            f"{found.documents:,} of {found.checked:,} held-out documents ({found.tokens:,} tokens) "
            "found in training, given back to training"
            + (f" ({found.later_rounds:,} inside others given back)" if found.later_rounds else "")
        )


def print_quality(quality: dict[str, Any], languages: int = 6) -> None:
    """The score's meaning, then per bucket the share of its documents in each of the corpus's main languages."""
    if quality.get("meaning"):
        click.echo(f"quality score: {quality['meaning']}")
    mix = quality["language_mix"]
    if not mix["buckets"]:
        return
    top = list(mix["corpus"])[:languages]
    click.echo("language mix per bucket (share of the bucket's documents):")
    click.echo(f"{'':<8}" + "".join(f"{lang:>8}" for lang in top) + f"{'other':>8}")
    rows = {"corpus": mix["corpus"], **mix["buckets"]}
    for name, row in rows.items():
        size = sum(row.values()) or 1
        shares = [row.get(lang, 0) / size for lang in top]
        cells = "".join(f"{share:>8.0%}" for share in shares) + f"{1 - sum(shares):>8.0%}"
        click.echo(f"{name:<8}{cells}")
    worst = max((r for row in quality["share_ratios"].values() for r in row.values()), default=None)
    if worst is not None:
        click.echo(f"largest bucket share / corpus share of a language with >= 50 documents: {worst:.2f}")


@click.group()
def store() -> None:
    """Inspect, verify and create token stores."""


def list_stores(home: Home) -> list[dict[str, object]]:
    """Every store version under $MILLRACE_HOME/stores, oldest first per name; a damaged one says so."""
    rows: list[dict[str, object]] = []
    for store_dir in home.store_versions():
        row: dict[str, object] = {"name": store_dir.parent.name, "version": store_dir.name, "path": str(store_dir)}
        try:
            manifest = Store(store_dir).manifest
        except ArtifactError as exc:
            rows.append({**row, "damaged": str(exc)})
            continue
        rows.append(
            {
                **row,
                "stats_only": manifest.stats_only,
                "cells": len(manifest.cells),
                "documents": sum(c.documents for c in manifest.cells.values()),
                "tokens": sum(c.tokens for c in manifest.cells.values()),
            }
        )
    return rows


@store.command("list")
@home_option
@json_option
def list_command(home: Home, as_json: bool) -> None:
    """List the store versions under $MILLRACE_HOME/stores: cells, documents, tokens."""
    rows = list_stores(home)
    if as_json:
        print_json({"stores": rows})
        return
    if not rows:
        click.echo(f"no stores under {home.stores} (make one with `millrace pipeline run CONFIG`)")
        return
    click.echo(f"{'store':<36} {'cells':>6} {'documents':>12} {'tokens':>16}")
    for row in rows:
        label = f"{row['name']}/{row['version']}"
        if "damaged" in row:
            click.echo(f"{label:<36} damaged: {row['damaged']}")
            continue
        suffix = "  (stats only)" if row["stats_only"] else ""
        click.echo(f"{label:<36} {row['cells']:>6} {row['documents']:>12,} {row['tokens']:>16,}{suffix}")
    click.echo(f"stores under {home.stores}")


@store.command("info")
@click.argument("store_spec", metavar="STORE")
@home_option
@json_option
def info(store_spec: str, home: Home, as_json: bool) -> None:
    """Print a store's cells, documents, tokens and bytes (STORE: a directory or name[/version])."""
    summary = store_summary(resolve_store(store_spec, home))
    if as_json:
        print_json(summary)
    else:
        print_summary(summary)


@store.command("verify")
@click.argument("store_spec", metavar="STORE")
@home_option
@json_option
def verify(store_spec: str, home: Home, as_json: bool) -> None:
    """Check every shard against its manifest; name each failing file and exit non-zero."""
    path = resolve_store(store_spec, home)
    problems = Store(path).verify()
    if as_json:
        print_json({"path": str(path), "ok": not problems, "problems": problems})
    else:
        for problem in problems:
            click.echo(f"FAIL {problem}")
        click.echo(f"{path}: {'ok' if not problems else f'{len(problems)} problem(s)'}")
    if problems:
        raise ArtifactError(f"{path}: {len(problems)} file(s) failed verification")


@store.command("from-stats")
@click.argument("stats_file", metavar="FILE.json", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--name", type=PLAIN_NAME, required=True, help="Store name.")
@click.option("--version", "version", required=True, help="Store version (CalVer YYYY.MM.DD).")
@home_option
@json_option
def from_stats(stats_file: Path, name: str, version: str, home: Home, as_json: bool) -> None:
    """Create a stats-only store (token counts per cell, no shards) from FILE.json.

    The file holds {"available_tokens": {"c00q0": tokens, ...}} (the reference run's form);
    a bare {"cell": tokens} object is accepted too.
    """
    if not CALVER.match(version):
        raise ConfigError(f"--version: {version!r} is not CalVer YYYY.MM.DD")
    try:
        data = json.loads(stats_file.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{stats_file}: file not found") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{stats_file}: not valid JSON ({exc})") from None
    cells = data.get("available_tokens", data.get("cells", data)) if isinstance(data, dict) else None
    if not isinstance(cells, dict) or not cells:
        raise ConfigError(f"{stats_file}: expected an object of cell -> tokens")
    for cell, tokens in cells.items():
        if isinstance(tokens, dict):
            tokens = tokens.get("tokens")
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
            raise ConfigError(f"{stats_file}: field '{cell}': expected a non-negative integer token count")
    counts = {c: (t["tokens"] if isinstance(t, dict) else t) for c, t in cells.items()}
    path = home.store(name, version)
    if path.exists():
        raise ConfigError(f"--version: store {name}/{version} already exists at {path}")
    write_stats_only_store(path, name, version, counts)
    if as_json:
        print_json(
            {"path": str(path), "name": name, "version": version, "cells": len(counts), "tokens": sum(counts.values())}
        )
        return
    click.echo(f"wrote stats-only store {name}/{version} ({len(counts)} cells) at {path}")


def parse_storage_options(pairs: tuple[str, ...]) -> dict[str, object]:
    """`KEY=VALUE` pairs; a VALUE that parses as JSON is taken as JSON (objects, numbers, booleans)."""
    options: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--option {pair!r}: expected KEY=VALUE")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


@store.command("copy")
@click.argument("store_spec", metavar="STORE")
@click.argument("url")
@click.option(
    "--option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="An fsspec storage option for URL's filesystem (repeatable; JSON values allowed), e.g. "
    'client_kwargs=\'{"endpoint_url": "http://127.0.0.1:9000"}\'.',
)
@click.option(
    "--timeout",
    type=float,
    default=WRITE_LIMITS.timeout,
    show_default=True,
    help="Seconds one upload may take (plus one per MiB of the file) before it is cancelled and retried.",
)
@click.option(
    "--retries",
    type=int,
    default=WRITE_LIMITS.retries,
    show_default=True,
    help="Attempts after an upload's first failure (with doubling waits); then one line naming the object.",
)
@home_option
@json_option
def copy(
    store_spec: str, url: str, options: tuple[str, ...], timeout: float, retries: int, home: Home, as_json: bool
) -> None:
    """Copy a store version to URL (any fsspec URL: s3://bucket/prefix, gs://..., file://...), store.json last.

    Run again after a failure, it resumes the copy (the objects already there are kept); a URL that holds
    another store version is refused. The loader reads the copy in place:
    MixtureStream(manifest, store=StoreAccess(url=URL))."""
    from pipeline.store.remote import copy_store  # lazy: command body: `millrace --help` loads no datatrove

    path = resolve_store(store_spec, home)
    limits = CallLimits(timeout, retries, WRITE_LIMITS.backoff_s, "--timeout")
    count = copy_store(path, url, parse_storage_options(options), limits)
    if as_json:
        print_json({"path": str(path), "url": url, "files": count})
    elif count == 0:
        click.echo(f"{url} already holds {path}: nothing copied")
    else:
        click.echo(f"copied {count} files of {path} to {url}")
