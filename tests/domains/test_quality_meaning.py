"""What q0…q4 mean for a store, and what a reference source is, said where the user chooses them.

Per-language buckets (the default) rank a document among its own language only, so a q4 document of a
language the reference does not resemble can score below a q0 of another; `calibrate_by = "none"` is the
global calibrated score, and the store's stated meaning says which one it used."""

import tomllib
from pathlib import Path

import numpy as np

from pipeline.cells.calibration import BucketEdges
from pipeline.cells.quality import QualityConfig, score_meaning
from pipeline.starter import init_config


def two_languages() -> tuple[np.ndarray, list[str]]:
    rng = np.random.default_rng(0)
    scores = np.r_[rng.uniform(0.0, 0.3, 200), rng.uniform(0.6, 1.0, 200)]  # "ja" resembles the reference less
    return scores, ["ja"] * 200 + ["en"] * 200


def test_per_language_buckets_put_a_q4_below_a_q0_and_the_global_scale_does_not():
    scores, groups = two_languages()
    for by_group, crossed in ((True, True), (False, False)):
        buckets = BucketEdges.fit(scores, groups, 5, 10, by_group=by_group).bucket(scores, groups)
        best_low = scores[buckets == 4].min()
        worst_high = scores[buckets == 0].max()
        assert bool(best_low < worst_high) is crossed


def test_the_stated_meaning_names_the_scale_the_store_used():
    per_language = score_meaning(QualityConfig(calibrate_by="language"), 0)
    assert per_language.calibrated_by == "language"
    assert "q4 document of one language may score below a q0 of another" in per_language.meaning
    assert 'calibrate_by = \\"none\\"' not in per_language.meaning and 'calibrate_by = "none"' in per_language.meaning
    overall = score_meaning(QualityConfig(calibrate_by="none"), 0)
    assert overall.calibrated_by == "none" and "one global scale" in overall.meaning


def starter_sections(corpus: Path, names: list[str]) -> str:
    """`pipeline init` on a corpus whose sources are `names`."""
    for name in names:
        (corpus / name).mkdir(parents=True)
        (corpus / name / "a.jsonl").write_text('{"text": "a line"}\n')
    return init_config(corpus)


def test_pipeline_init_says_what_a_reference_is_and_why_quality_is_off(tmp_path):
    with_docs = starter_sections(tmp_path / "with", ["python-docs", "man-pages"])
    assert "REFERENCE of good documents" in with_docs and "# Reference: python-docs (found" in with_docs
    without = starter_sections(tmp_path / "without", ["fortunes", "npm-docs"])
    assert "no reference source found" in without and "(here: fortunes, npm-docs)" in without
    assert tomllib.loads(without)["quality"]["enabled"] is False
    assert QualityConfig(**tomllib.loads(with_docs)["quality"]) == QualityConfig()
