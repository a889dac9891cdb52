"""The main job end to end, small: corpus → pipeline → mixtures → training → site, then a rerun that reuses it."""

import json
import subprocess
import sys

import pytest


def _demo(home, *extra):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "millrace",
            "--home",
            str(home),
            "demo",
            "--max-bytes",
            "3000000",
            "--json",
            "--no-ladder",
            "--no-search",
            *extra,
        ],  # the ladder step: tests/trainer/test_ladder_e2e.py; the search: tests/search/test_known_optimum.py
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return {**json.loads(result.stdout), "stderr": result.stderr}


@pytest.mark.slow
def test_demo_runs_end_to_end_then_reuses_what_it_built(tmp_path):
    home = tmp_path / "home"
    first = _demo(home, "--steps", "4")
    assert set(first["manifests"]) == {"natural", "uniform-sampling", "quality-tilt"}
    page = first["page"]
    assert page.endswith("index.html?revision=uniform-sampling")
    assert (home / "site" / "local").is_dir() and (home / "site" / "runs" / "demo" / "index.html").is_file()
    html = (home / "site" / "index.html").read_text()
    assert "local" in html and "demo" in html
    steps = [json.loads(line)["step"] for line in (home / "runs" / "demo" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]
    # no terminal here: steady progress lines stand in for the bars (pipeline phases, training steps)
    assert "pipeline: tokenize, " in first["stderr"] and "train demo: step 4/4, " in first["stderr"]
    evals = [json.loads(line) for line in (home / "runs" / "demo" / "eval.jsonl").read_text().splitlines()]
    assert evals and evals[-1]["step"] == 4 and evals[-1]["loss"]["macro"] > 0  # held out by the pipeline
    assert (home / "runs" / "demo" / "samples.jsonl").read_text().strip()

    again = _demo(home, "--steps", "6")
    assert again["manifests"] == first["manifests"]
    assert again["store"] == first["store"]
    # nothing rebuilt: the corpus and the store are reused, and no pipeline phase runs (events, not seconds)
    assert "reusing the corpus at " in again["stderr"] and "already built from this config" in again["stderr"]
    assert "pipeline: filter, " not in again["stderr"] and "pipeline: tokenize, " not in again["stderr"]
    steps = [json.loads(line)["step"] for line in (home / "runs" / "demo" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]  # resumed from the checkpoint at step 4, nothing run twice
