"""Drill: names read from artifacts become paths just as names on the command line do. A crafted run.json
(`run = "../../evil"`), ladder.json or store.json makes `report build` fail in one line naming the artifact,
and nothing is written outside the site. A config's `samples.prompts` naming a file outside the config's
directory and $MILLRACE_HOME (its lines would be published on the run page) is refused before a run starts."""

import shutil
from pathlib import Path

import pytest

from millrace.artifacts import read_envelope, write_artifact
from millrace.cli import main as millrace
from millrace.home import Home
from pipeline.store.format import StoreManifest, write_store_manifest
from trainer.records import LADDER_KIND, RUN_KIND

BASE_RUN = {"status": "completed", "mixture": "default", "revision": "uniform-sampling", "total_steps": 4}


def crafted_run(home, field_value):
    write_artifact(home.run("crafted") / "run.json", RUN_KIND, 1, {**BASE_RUN, **field_value})


def crafted_ladder(home, field_value):
    write_artifact(
        home.ladder("crafted") / "ladder.json",
        LADDER_KIND,
        1,
        {"plan": {"ladder": "x", "file": "x.toml", "mixture": "m", "revision": "r", "seq_len": 32}, **field_value},
    )


def crafted_store(home, field_value):
    path = home.store("t", "2026.01.01")
    manifest = read_envelope(path / "store.json", "millrace.store", (1,)).payload
    if isinstance(field_value, str):  # a cell's name: the first cell renamed to it
        cells = dict(manifest["cells"])
        first = next(iter(cells))
        field_value = {"cells": {field_value: cells.pop(first), **cells}}
    write_store_manifest(path, StoreManifest.model_validate({**manifest, **field_value}))


CRAFTED = {
    "run.json run": (crafted_run, {"run": "../../evil"}, "runs/crafted/run.json", "'run'"),
    "run.json store": (
        crafted_run,
        {"run": "crafted", "store": {"name": "../../../evil", "version": "x"}},
        "runs/crafted/run.json",
        "'store.name'",
    ),
    "ladder.json ladder": (crafted_ladder, {"ladder": "../../evil"}, "ladders/crafted/ladder.json", "'ladder'"),
    "store.json name": (crafted_store, {"name": "../../evil"}, "stores/t/2026.01.01/store.json", "'name'"),
    "store.json version": (crafted_store, {"version": "../evil"}, "stores/t/2026.01.01/store.json", "'version'"),
    "store.json cell": (crafted_store, "../../evil", "stores/t/2026.01.01/store.json", "'cells'"),
    "run.json run, a newline": (crafted_run, {"run": "crafted\n"}, "runs/crafted/run.json", "'run'"),
}


def files_under(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


@pytest.mark.parametrize("case", list(CRAFTED))
def test_a_crafted_artifact_name_writes_nothing_outside_the_site(built, tmp_path, capsys, case):
    source, _ = built
    home = Home.resolve(tmp_path / "home")
    shutil.copytree(source.root, home.root)
    craft, value, artifact, field = CRAFTED[case]
    craft(home, value)
    before = files_under(tmp_path)
    capsys.readouterr()
    code = millrace(["--home", str(home.root), "report", "build"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert str(home.root / artifact) in err and field in err and "not a plain name" in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    outside = [
        p for p in files_under(tmp_path) if p not in before and p != "home/site" and not p.startswith("home/site/")
    ]
    assert outside == [] and not any("evil" in p for p in files_under(tmp_path))


def test_a_prompts_file_outside_the_config_tree_and_home_is_refused(built, tiny_config, tmp_path, capsys):
    source, _ = built
    home = Home.resolve(tmp_path / "home")
    shutil.copytree(source.root, home.root)
    secret = tmp_path / "elsewhere" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("root:$6$hash:19000:0:99999:7:::\n")
    config = tiny_config("prompted", samples={"prompts": str(secret)})
    config_dir = tmp_path / "configs"
    config_dir.mkdir()
    config = Path(shutil.move(config, config_dir / "prompted.toml"))
    for named in (str(secret), "../elsewhere/secret.txt"):
        text = config.read_text().replace(str(secret), named)
        config.write_text(text)
        capsys.readouterr()
        code = millrace(["--home", str(home.root), "train", "run", str(config), "--steps", "1", "--no-progress"])
        err = capsys.readouterr().err
        assert code == 2, err
        assert "field 'samples.prompts'" in err and "outside" in err and len(err.strip().splitlines()) == 1, err
    assert not home.run("prompted-default-uniform-sampling").exists(), "a refused config must start no run"


def test_a_prompts_file_beside_the_config_or_in_home_is_read_and_its_source_recorded(tmp_path):
    from trainer.samples import TokenText, file_prompts, prompts_path

    config = tmp_path / "configs" / "train.toml"
    config.parent.mkdir()
    (config.parent / "prompts.txt").write_text("hello\n")
    home = tmp_path / "home"
    (home / "prompts").mkdir(parents=True)
    (home / "prompts" / "more.txt").write_text("more\n")
    assert prompts_path("prompts.txt", config, home) == (config.parent / "prompts.txt").resolve()
    assert prompts_path(str(home / "prompts" / "more.txt"), config, home) == (home / "prompts" / "more.txt").resolve()
    (config.parent / "link.txt").symlink_to(tmp_path / "outside.txt")
    with pytest.raises(Exception, match="outside"):
        prompts_path("link.txt", config, home)  # links are resolved first

    class Ids(TokenText):
        def __init__(self):
            self.tokenizer = None

        def encode(self, text, where):
            return [ord(c) for c in text]

    prompts = file_prompts(prompts_path("prompts.txt", config, home), Ids())
    assert prompts[0].source == str((config.parent / "prompts.txt").resolve())
