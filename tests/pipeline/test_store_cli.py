import json

import pytest

from millrace.cli import main
from millrace.home import Home
from pipeline.config import load_pipeline_config
from pipeline.runner import run_pipeline
from testkit.corpus import config_text, make_corpus
from testkit.damage import flip_byte


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    root = tmp_path_factory.mktemp("storecli")
    corpus = make_corpus(root / "corpus", documents=12)
    (root / "p.toml").write_text(config_text(corpus, tasks=1))
    return run_pipeline(load_pipeline_config(root / "p.toml"), Home.resolve(root / "home"))


@pytest.mark.slow
def test_info_json_lists_cells_documents_tokens_bytes(store_path, capsys):
    assert main(["store", "info", str(store_path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert set(info["cells"]) == {"articles", "notes", "snippets"}
    assert info["tokens"] == sum(c["tokens"] for c in info["cells"].values()) > 0
    assert info["funnel"][0]["stage"] == "read"
    home = store_path.parents[2]
    assert main(["store", "info", "local", "--home", str(home)]) == 0
    assert "articles" in capsys.readouterr().out


@pytest.mark.slow
def test_verify_names_the_damaged_shard(store_path, tmp_path, capsys):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(store_path, copy)
    assert main(["store", "verify", str(copy)]) == 0
    shard = min((copy / "cells" / "notes").glob("*.bin"))
    flip_byte(shard, 0)
    capsys.readouterr()
    assert main(["store", "verify", str(copy), "--json"]) == 2
    report = json.loads(capsys.readouterr().out)
    assert not report["ok"] and str(shard) in report["problems"][0]


def test_from_stats_writes_a_stats_only_store(tmp_path, capsys):
    stats = tmp_path / "stats.json"
    stats.write_text(json.dumps({"c00q0": 10**12, "c00q1": 5 * 10**11}))
    home = tmp_path / "home"
    assert (
        main(["store", "from-stats", str(stats), "--name", "big", "--version", "2026.01.01", "--home", str(home)]) == 0
    )
    capsys.readouterr()
    assert main(["store", "info", "big/2026.01.01", "--home", str(home), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["stats_only"] and info["tokens"] == 1_500_000_000_000
    stats.write_text(json.dumps({"c00q0": "many"}))
    assert (
        main(["store", "from-stats", str(stats), "--name", "big", "--version", "2026.01.02", "--home", str(home)]) == 2
    )
    assert "field 'c00q0'" in capsys.readouterr().err


def test_from_stats_reads_the_shipped_reference_file(tmp_path, capsys):
    from pathlib import Path

    stats = Path(__file__).parents[2] / "mixtures" / "examples" / "reference" / "available_tokens.json"
    home = tmp_path / "home"
    assert (
        main(
            ["store", "from-stats", str(stats), "--name", "reference", "--version", "2025.06.01", "--home", str(home)]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["store", "info", "reference/2025.06.01", "--home", str(home), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["stats_only"] and len(info["cells"]) == 200
    assert abs(info["tokens"] - 23.1e12) / 23.1e12 < 0.01


@pytest.mark.parametrize("scheme", ["", "file://"])
def test_copy_to_a_local_path_makes_its_folders(tmp_path, capsys, scheme):
    stats = tmp_path / "stats.json"
    stats.write_text(json.dumps({"c00q0": 10**6}))
    home = tmp_path / "home"
    assert (
        main(["store", "from-stats", str(stats), "--name", "s", "--version", "2026.01.01", "--home", str(home)]) == 0
    )
    target = tmp_path / "not" / "yet" / "there"
    assert main(["store", "copy", "s/2026.01.01", f"{scheme}{target}", "--home", str(home)]) == 0
    source = home / "stores" / "s" / "2026.01.01"
    copied = sorted(p.relative_to(target) for p in target.rglob("*") if p.is_file())
    assert copied == sorted(
        p.relative_to(source) for p in source.rglob("*") if p.is_file() and not p.name.startswith(".")
    )
    assert (target / "store.json").read_bytes() == (source / "store.json").read_bytes()
