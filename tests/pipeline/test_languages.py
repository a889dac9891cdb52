"""Every language survives its filters: language id first, then each filter with its language's rules.

A generated corpus of good prose in nine languages (English, German, Portuguese, Spanish, Russian,
Japanese, Chinese, Korean, Arabic) in one source goes through the filter stage with all four of
datatrove's prose filters. The share of each language's documents kept is within a factor of 1.5 of
every other's, and the funnel counts each filter's removals per language.
"""

import json

import pytest

from pipeline.config import load_pipeline_config
from pipeline.runner import _run_stage, filter_pipeline, stage_names
from pipeline.stages.funnel import merge_stage, stage_dir
from pipeline.stages.intermediate import read_jsonl_zst
from pipeline.work import WorkLayout
from testkit.multilingual_prose import LANGUAGES, multilingual_records

PER_LANGUAGE = 6
FILTERS = ["gopher_repetition", "gopher_quality", "c4_quality", "fineweb_quality"]


def run_filter_stage(tmp_path, records: list[dict], filters: list[str]) -> tuple[list[str], WorkLayout, list[str]]:
    """The filter stage alone (one task, in this process): the ids it kept, its work layout, its stage names."""
    (tmp_path / "prose").mkdir()
    (tmp_path / "prose" / "all.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    (tmp_path / "p.toml").write_text(
        f'[[sources]]\nname = "prose"\npaths = ["prose"]\nformat = "jsonl"\nfilters = {json.dumps(filters)}\n'
        '[dedup]\nexact = false\nfuzzy = false\n[executor]\ntasks = 1\nworkers = 1\n'
    )
    config = load_pipeline_config(tmp_path / "p.toml")
    layout = WorkLayout(tmp_path / "work")
    _run_stage("filter", "local", filter_pipeline(config, layout), 1, 1, layout.logs / "1-filter")
    kept = [record["id"] for path in sorted(layout.filtered.glob("*.jsonl.zst")) for record in read_jsonl_zst(path)]
    return kept, layout, stage_names(config)


@pytest.fixture(scope="module")
def filtered(tmp_path_factory):
    records = [{"id": r["id"], "text": r["text"], "written_in": r["language"]}
               for r in multilingual_records(PER_LANGUAGE)]
    return records, *run_filter_stage(tmp_path_factory.mktemp("languages"), records, FILTERS)


@pytest.mark.slow
def test_the_share_of_good_prose_kept_is_alike_across_languages(filtered):
    records, kept, _, _ = filtered
    kept_ids = set(kept)
    share = {language: sum(f"prose/{r['id']}" in kept_ids for r in records if r["written_in"] == language) / PER_LANGUAGE
             for language in LANGUAGES}
    assert min(share.values()) > 0, share
    assert max(share.values()) / min(share.values()) <= 1.5, share
    assert min(share.values()) >= 0.8, share  # good prose is kept, not only kept alike


@pytest.mark.slow
def test_the_funnel_counts_each_filters_removals_per_language(filtered):
    _, _, layout, names = filtered
    assert names.index("language") < min(names.index(f) for f in FILTERS)  # language id first
    identified = merge_stage(stage_dir(layout.funnel, names.index("language"), "language"), "languages")
    assert {lang: c["received"]["documents"] for lang, c in identified.items()} == dict.fromkeys(LANGUAGES, PER_LANGUAGE)
    for name in FILTERS:
        languages = merge_stage(stage_dir(layout.funnel, names.index(name), name), "languages")
        assert set(languages) == set(LANGUAGES)
        for counts in languages.values():
            removed = sum(r["documents"] for r in counts["removed"].values())
            assert counts["received"]["documents"] == counts["kept"]["documents"] + removed
