"""Drill: a flipped byte in a trace parquet and an altered tokenizer.json. Both are pinned (the trace parts'
sha256 in cell.json, the tokenizer's in store.json): `store verify` names the file, and `loader peek --decode`
(which reads both) refuses in one line instead of printing another source's name or other text."""

import json
import shutil

import pytest

from millrace.cli import main as millrace
from millrace.errors import ArtifactError
from millrace.home import Home
from pipeline.store.format import store_tokenizer
from pipeline.store.trace import part_name
from testkit.damage import flip_byte
from testkit.traced_stores import SOURCES, write_traced_store


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A store with a trained tokenizer and the pipeline's trace parts, written with the store's own writers."""
    return write_traced_store(tmp_path_factory.mktemp("drill-pins"))


def alter_tokenizer(path):
    """A valid tokenizer.json whose vocabulary maps one id to other text: decoding changes, parsing does not."""
    body = json.loads(path.read_text())
    vocab = body["model"]["vocab"]
    first, second = sorted(vocab, key=vocab.get)[100:102]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    path.write_text(json.dumps(body))


def run(capsys, *args):
    capsys.readouterr()
    code = millrace(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def peek(capsys, home, step):
    """`loader peek --decode --json` of the uniform revision's batch `step`: what decoding a batch reads."""
    return run(
        capsys,
        "--home",
        str(home.root),
        "loader",
        "peek",
        "default",
        "--revision",
        "uniform-sampling",
        "--step",
        str(step),
        "--decode",
        "--json",
    )


@pytest.mark.parametrize("fault", ["trace part", "tokenizer"])
def test_a_damaged_pinned_file_is_named_by_verify_and_refused_when_read(pristine, tmp_path, capsys, fault):
    home = Home.resolve(tmp_path / "home")
    shutil.copytree(pristine.root, home.root)
    store_dir = home.store("t", "2026.01.01")
    if fault == "trace part":
        target = store_dir / "cells" / "c00q0" / part_name(0)
        flip_byte(target)
    else:
        target = store_dir / "tokenizer" / "tokenizer.json"
        alter_tokenizer(target)
    before = target.read_bytes()

    code, out, err = run(capsys, "--home", str(home.root), "store", "verify", "t/2026.01.01")
    assert code != 0
    assert f"FAIL {target}: sha256 differs" in out, out
    assert "Traceback" not in err

    code, out, err = peek(capsys, home, 0)
    if fault == "trace part":  # the tokenizer is fine: a step whose samples touch c00q0 reads its part
        for step in range(1, 4):
            if code != 0:
                break
            code, out, err = peek(capsys, home, step)
    assert code == 2, out
    assert str(target) in err and len(err.strip().splitlines()) == 1, err
    assert target.read_bytes() == before, "reading must change nothing"
    if fault == "tokenizer":
        with pytest.raises(ArtifactError, match=r"differs from the fingerprint store\.json pins"):
            store_tokenizer(store_dir)  # what evaluation (bits per byte) and samples read the tokenizer through


def test_pristine_store_verifies_and_decodes_with_its_sources(pristine, capsys):
    code, out, err = run(capsys, "--home", str(pristine.root), "store", "verify", "t/2026.01.01", "--json")
    assert code == 0, out + err
    code, out, err = peek(capsys, pristine, 0)
    assert code == 0, err
    samples = json.loads(out)["samples"]
    assert {d["source"] for s in samples for d in s["documents"]} <= set(SOURCES)
    assert all(s["text"] for s in samples)


@pytest.mark.slow  # trains the tiny model for two steps
def test_the_run_page_says_where_its_prompts_came_from(pristine, tmp_path, capsys):
    import tomllib

    import tomli_w

    from reports.run_data import read_script
    from testkit.stores import REPO
    from trainer.records import read_samples

    home = Home.resolve(tmp_path / "home")
    shutil.copytree(pristine.root, home.root)
    config = tomllib.loads((REPO / "trainer" / "configs" / "tiny.toml").read_text())
    config["metrics"]["tensorboard"] = False
    config["eval"] = {"enabled": False}
    config["samples"] = {"prompts": "prompts.txt", "max_new_tokens": 4, "temperatures": [0.0]}
    (tmp_path / "prompts.txt").write_text("the river mill\nflour and bread\n")
    path = tmp_path / "prompted.toml"
    path.write_text(tomli_w.dumps(config))
    code, _out, err = run(
        capsys,
        "--home",
        str(home.root),
        "train",
        "run",
        str(path),
        "--steps",
        "2",
        "--run",
        "prompted",
        "--no-progress",
    )
    assert code == 0, err
    records = read_samples(home.run("prompted"))
    source = str((tmp_path / "prompts.txt").resolve())
    assert records and {r.prompt_source for r in records} == {source}
    code, _out, err = run(capsys, "--home", str(home.root), "report", "build", "--run", "prompted")
    assert code == 0, err
    data = read_script(home.site / "runs" / "prompted" / "data" / "overview.js")  # what the page draws from
    assert data["samples"]["sources"] == [source]  # shown as "Prompts from: ..." under the completions
