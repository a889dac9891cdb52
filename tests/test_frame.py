"""The frame every room stands on: artifacts, config errors, the command line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from millrace.artifacts import read_envelope, write_artifact
from millrace.config import StrictModel, load_config
from millrace.errors import ArtifactError, ConfigError


def test_artifact_roundtrip_and_tamper_detection(tmp_path):
    path = tmp_path / "a.json"
    digest = write_artifact(path, "millrace.test", 1, {"x": [1, 2]})
    body = read_envelope(path, "millrace.test")
    assert body.payload["x"] == [1, 2] and body.content_hash == digest
    tampered = json.loads(path.read_text())
    tampered["x"] = [1, 3]
    path.write_text(json.dumps(tampered))
    with pytest.raises(ArtifactError, match=r"a\.json.*hash"):
        read_envelope(path, "millrace.test")


def test_artifact_of_unknown_schema_is_refused_by_name(tmp_path):
    path = tmp_path / "b.json"
    write_artifact(path, "millrace.test", 7, {})
    with pytest.raises(ArtifactError, match=r"b.json.*schema version 7"):
        read_envelope(path, "millrace.test", (1,))
    with pytest.raises(ArtifactError, match=r"expected a millrace\.other"):
        read_envelope(path, "millrace.other", (7,))


class Inner(StrictModel):
    size: int


class Outer(StrictModel):
    name: str
    inner: Inner


@pytest.mark.parametrize(
    "text, field",
    [
        ('name = "a"\n[inner]\nsize = "big"\n', "inner.size"),
        ('name = "a"\n[inner]\nsize = 1\ncolour = 2\n', "inner.colour"),
        ("[inner]\nsize = 1\n", "name"),
    ],
)
def test_config_errors_name_the_field(tmp_path, text, field):
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, Outer)
    message = str(info.value)
    assert "\n" not in message and str(path) in message and f"'{field}'" in message


def test_unparsable_config_is_one_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("name = \n")
    with pytest.raises(ConfigError, match=r"bad\.toml: not valid TOML"):
        load_config(path, Outer)


@pytest.mark.slow
def test_cli_reports_errors_without_traceback(tmp_path):
    missing = tmp_path / "nope.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "millrace",
            "--home",
            str(tmp_path),
            "store",
            "from-stats",
            str(missing),
            "--name",
            "x",
            "--version",
            "2026.01.01",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "nope.json" in result.stderr


@pytest.mark.parametrize("umask, expected", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_atomic_writes_honour_the_umask(tmp_path, umask, expected):
    import os
    import stat

    from millrace.artifacts import atomic_output, atomic_write_text

    previous = os.umask(umask)
    try:
        write_artifact(tmp_path / "a.json", "millrace.test", 1, {})
        atomic_write_text(tmp_path / "page.html", "<p>")
        with atomic_output(tmp_path / "shard.idx") as handle:
            handle.write(b"x")
    finally:
        os.umask(previous)
    for name in ("a.json", "page.html", "shard.idx"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == expected, name


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "trainer/configs/tiny.toml", "--run", "../escape"],
        ["train", "trainer/configs/tiny.toml", "--run-name", "a/b"],
        ["train", "trainer/configs/tiny.toml", "--revision", "../up"],
        ["mix", "new", "../m", "--revision", "r", "--store", "local"],
        ["mix", "build", "default", "--revision", ".hidden"],
        ["mix", "new", "default", "--revision", "r", "--store", "local/../../x"],
        ["loader", "peek", "default", "--revision", "a/b", "--step", "0"],
        ["report", "build", "--run", "../escape"],
        ["report", "watch", "../escape"],
        ["report", "watch", "--run", "../escape"],
        ["store", "from-stats", "x.json", "--name", "../escape", "--version", "2026.01.01"],
    ],
)
def test_names_that_are_not_plain_are_one_line_errors(tmp_path, capsys, argv):
    from millrace.cli import main

    code = main(["--home", str(tmp_path / "home"), *argv])
    err = capsys.readouterr().err
    assert code != 0
    assert err.count("\n") == 1 and err.startswith("error: ") and "not a plain name" in err, err
    assert not (tmp_path / "escape").exists() and not (tmp_path / "home").exists()


def test_home_refuses_a_path_for_a_name(tmp_path):
    from millrace.home import Home

    home = Home(tmp_path)
    with pytest.raises(ConfigError, match=r"run '\.\./escape': not a plain name"):
        home.run("../escape")
    with pytest.raises(ConfigError, match="store version"):
        home.store("local", "../../x")
    assert home.run("tiny-default-uniform-sampling.2") == tmp_path / "runs" / "tiny-default-uniform-sampling.2"


@pytest.mark.parametrize(
    ("location", "url", "local"),
    [
        ("s3://bucket/stores", True, None),
        ("file:///data/stores", True, "/data/stores"),
        ("/data/stores", False, "/data/stores"),
        ("stores/odd://name", False, "stores/odd://name"),  # a protocol only at the start
    ],
)
def test_one_rule_tells_a_url_from_a_local_path_in_every_room(tmp_path, location, url, local):
    from loader.files import ReadOptions, StoreFiles
    from millrace.urls import is_url, local_path

    assert is_url(location) is url
    assert local_path(location) == (None if local is None else Path(local))
    if local is not None:  # the loader reads what the pipeline calls a local file (file:// too) with pread
        assert StoreFiles(location, ReadOptions(cache_dir=tmp_path)).local == Path(local)


def test_s3_storage_options_keep_one_retry_layer_and_refuse_config_kwargs_that_are_no_table():
    from millrace.remote_calls import single_retry_layer

    layered = single_retry_layer("s3", {"anon": True, "config_kwargs": {"max_pool_connections": 4}}, 5.0)
    assert layered["anon"] is True and layered["skip_instance_cache"] is True
    assert layered["config_kwargs"] == {
        "max_pool_connections": 4,
        "connect_timeout": 5.0,
        "read_timeout": 5.0,
        "retries": {"total_max_attempts": 1},
    }
    assert single_retry_layer("gcs", {"token": "anon"}, 5.0) == {"token": "anon"}
    with pytest.raises(ConfigError, match=r"storage_options.config_kwargs 'fast': expected a table"):
        single_retry_layer("s3", {"config_kwargs": "fast"}, 5.0)
