"""The pipeline room: documents in, a token store out. Imports no other room.

The Python API (what `millrace demo` and the CLI call):

    from pipeline.corpus.builder import build_local_corpus  # (out_dir, max_bytes=None) -> CorpusSummary
    from pipeline import init_config                         # (corpus_dir) -> starter config text
    from pipeline.config import load_pipeline_config         # (path) -> PipelineConfig (ConfigError naming the field)
    from pipeline.runner import run_pipeline                 # (config, home, executor=None, workers=None) -> store dir

Layout, in flow order:

    config.py, starter.py   the run's TOML config (every section's model); `pipeline init`'s starter config
    filters.py              the filter registry: config checks, funnel steps and starter tables come from it
    work.py                 the run's phases in order, the work directory and what may be resumed from it
    runner.py, cli.py       the run's orchestration (executor runs, driver steps); `millrace pipeline`
    stages/                 read/ → filter/ → dedup/ → tokenize/ → held_out/ → assemble (datatrove steps)
    cells/                  the quality and domain models that give a document its cell
    store/                  the token store's format (light) and `millrace store`
    corpus/                 the embedded default corpus and `millrace corpus`

`import pipeline` stays light (no datatrove): `pipeline.store.format` is read by later rooms.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "init_config":
        # lazy: the package's names load on first use (`import pipeline` stays light)
        from pipeline.starter import init_config

        return init_config
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
