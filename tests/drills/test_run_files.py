"""Drill: what a crash or a bad disk leaves in a run's files, and names a shell can hand over.

- A torn last line in metrics.jsonl, eval.jsonl and samples.jsonl (a crash mid-write) is cut back to
  the checkpoint's step on --resume, with a word; a damaged line before the last is one line naming
  the file and the line.
- A flipped exponent bit in a checkpoint's model.embed.weight is caught on resume, in one line naming
  the file (today's DCP reads it back and the losses diverge).
- `--run $'x\\n'` and a 300-character run name are one-line errors."""

import json
import logging
import shutil

import pytest
import torch.distributed.checkpoint as dcp

from millrace.cli import main as millrace
from millrace.home import Home
from testkit.stores import build_mixture, make_store

STREAMS = ("metrics.jsonl", "eval.jsonl", "samples.jsonl")


@pytest.fixture(scope="module")
def held(tmp_path_factory):
    """A store with validation shards: the runs write eval.jsonl and samples.jsonl too."""
    home = Home.resolve(tmp_path_factory.mktemp("run-files-home"))
    make_store(home, {"c00q0": 14000, "c01q0": 8000}, held_out=6)
    build_mixture(home, tokens=32 * 8 * 30, seq_len=32, global_batch=8)
    return home


def _args(config, home, run, *extra):
    return [
        "train",
        str(config),
        "--home",
        str(home.root),
        "--run",
        run,
        "--no-progress",
        "--checkpoint-every",
        "2",
        *extra,
    ]


def _errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_torn_last_lines_are_cut_back_to_the_checkpoint_on_resume(held, tiny_config, caplog, capsys):
    home = held
    config = tiny_config(
        eval={"every": 2, "max_sequences": 2, "batch_sequences": 4}, samples={"every": 2, "max_new_tokens": 4}
    )
    assert millrace(_args(config, home, "torn", "--steps", "4")) == 0
    run_dir = home.run("torn")
    before = {name: _records(run_dir / name) for name in STREAMS}
    assert {r["step"] for r in before["eval.jsonl"]} == {2, 4} and {r["step"] for r in before["samples.jsonl"]} == {
        2,
        4,
    }
    shutil.rmtree(run_dir / "checkpoints" / "step-00000004")  # the crash came before step 4's checkpoint ...
    for name in STREAMS:  # ... in the middle of writing each stream's last line
        data = (run_dir / name).read_bytes()
        last = data[:-1].rfind(b"\n") + 1
        (run_dir / name).write_bytes(data[: last + (len(data) - last) // 2])
    with caplog.at_level(logging.WARNING, logger="millrace.jsonl"):
        assert millrace(_args(config, home, "torn", "--steps", "4", "--resume")) == 0, capsys.readouterr().err
    said = [r.getMessage() for r in caplog.records if "torn last line" in r.getMessage()]
    assert sorted(message.split(": cut")[0].rsplit("/", 1)[1] for message in said) == sorted(STREAMS), said
    assert all("back to step 2, the checkpoint's" in message for message in said)
    after = {name: _records(run_dir / name) for name in STREAMS}
    assert [r["step"] for r in after["metrics.jsonl"]] == [1, 2, 3, 4]
    assert [r["loss"] for r in after["metrics.jsonl"]] == [r["loss"] for r in before["metrics.jsonl"]]
    assert [r["step"] for r in after["eval.jsonl"]] == [2, 4]
    assert [(r["step"], r["prompt_id"], r["temperature"]) for r in after["samples.jsonl"]] == [
        (r["step"], r["prompt_id"], r["temperature"]) for r in before["samples.jsonl"]
    ]


@pytest.mark.slow
def test_a_damaged_line_before_the_last_is_one_line_naming_file_and_line(built, tiny_config, capsys):
    home, _ = built
    config = tiny_config()
    assert millrace(_args(config, home, "damaged-line", "--steps", "4")) == 0
    path = home.run("damaged-line") / "metrics.jsonl"
    lines = path.read_text().splitlines()
    lines[1] = lines[1][: len(lines[1]) // 2]
    path.write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert millrace(_args(config, home, "damaged-line", "--steps", "6", "--resume")) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(_errors(err)) == 1, err
    assert _errors(err)[0].startswith(f"error: {path}:2: not a JSON line"), err
    assert json.loads((path.parent / "run.json").read_text())["status"] == "stopped"  # not left `running`
    assert millrace(["train", "status", "damaged-line", "--home", str(home.root)]) == 2


@pytest.mark.slow
def test_a_resume_refused_over_a_damaged_stream_or_run_json_changes_nothing(held, tiny_config, capsys):
    """Every record is checked before any stream is cut back: a resume refused over a damaged samples.jsonl
    leaves metrics.jsonl (here with a torn last line, which a cut would drop) as it was; a damaged run.json is
    refused too, rather than rewritten without the run's revision history."""
    config = tiny_config(samples={"every": 2, "max_new_tokens": 4})
    home = held
    assert millrace(_args(config, home, "damaged-sample", "--steps", "4")) == 0
    run_dir = home.run("damaged-sample")
    metrics = run_dir / "metrics.jsonl"
    metrics.write_bytes(metrics.read_bytes() + b'{"step": 5, "lo')
    samples = run_dir / "samples.jsonl"
    lines = samples.read_text().splitlines()
    samples.write_text("\n".join([lines[0][: len(lines[0]) // 2], *lines[1:]]) + "\n")
    before = {path: path.read_bytes() for path in (metrics, samples, run_dir / "run.json")}
    capsys.readouterr()
    assert millrace(_args(config, home, "damaged-sample", "--steps", "6", "--resume")) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(_errors(err)) == 1 and str(samples) in _errors(err)[0], err
    assert {path: path.read_bytes() for path in before} == before

    samples.write_text("\n".join(lines) + "\n")
    run_json = run_dir / "run.json"
    run_json.write_bytes(run_json.read_bytes()[:-40])
    damaged = {path: path.read_bytes() for path in (metrics, samples, run_json)}
    assert millrace(_args(config, home, "damaged-sample", "--steps", "6", "--resume")) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(_errors(err)) == 1, err
    assert _errors(err)[0].startswith(f"error: {run_json}") and "revision" in _errors(err)[0], err
    assert {path: path.read_bytes() for path in damaged} == damaged


def _flip_exponent_bit(checkpoint, key="model.embed.weight"):
    """Flip the top exponent bit of the first float32 of `key` where DCP stored it; returns the file."""
    metadata = dcp.FileSystemReader(str(checkpoint)).read_metadata()
    where = next(info for index, info in metadata.storage_data.items() if index.fqn == key)
    path = checkpoint / where.relative_path
    data = bytearray(path.read_bytes())
    data[where.offset + 3] ^= 0x40  # little-endian float32: byte 3 holds the sign and the top exponent bits
    path.write_bytes(bytes(data))
    return path


@pytest.mark.slow
def test_a_flipped_checkpoint_bit_is_refused_on_resume_naming_the_file(built, tiny_config, capsys):
    home, _ = built
    config = tiny_config()
    assert millrace(_args(config, home, "flipped", "--steps", "2")) == 0
    checkpoint = home.run("flipped") / "checkpoints" / "step-00000002"
    assert json.loads((checkpoint / "digests.json").read_text())["files"].keys() == {".metadata", "__0_0.distcp"}
    damaged = _flip_exponent_bit(checkpoint)
    capsys.readouterr()
    assert millrace(_args(config, home, "flipped", "--steps", "3", "--resume")) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(_errors(err)) == 1, err
    assert _errors(err)[0].startswith(f"error: {damaged}: digest mismatch (recorded xxh3_128:"), err
    assert [r["step"] for r in _records(home.run("flipped") / "metrics.jsonl")] == [1, 2]  # nothing trained on it


def test_run_names_with_a_newline_or_300_characters_are_one_line_errors(built, tiny_config, capsys):
    home, _ = built
    config = tiny_config()
    for name, shown in (("x\n", "'x\\n'"), ("r" * 300, "(300 characters)")):
        capsys.readouterr()
        for command in (["train", str(config), "--run", name, "--steps", "1"], ["train", "status", name]):
            assert millrace([*command, "--home", str(home.root)]) == 2
            err = capsys.readouterr().err
            assert "Traceback" not in err and len(_errors(err)) == 1 and shown in _errors(err)[0], err
            assert "not a plain name" in _errors(err)[0]
    assert not (home.runs / "x\n").exists()


@pytest.mark.slow
def test_a_checkpoint_without_digests_is_refused_unless_trusted(built, tiny_config, capsys):
    home, _ = built
    config = tiny_config()
    assert millrace(_args(config, home, "undigested", "--steps", "2")) == 0
    digests = home.run("undigested") / "checkpoints" / "step-00000002" / "digests.json"
    digests.unlink()
    capsys.readouterr()
    assert millrace(_args(config, home, "undigested", "--steps", "3", "--resume")) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(_errors(err)) == 1, err
    assert _errors(err)[0].startswith(f"error: {digests.parent}: no digests.json") and "--trust-unverified" in err
    assert [r["step"] for r in _records(home.run("undigested") / "metrics.jsonl")] == [1, 2]
    assert millrace(_args(config, home, "undigested", "--steps", "3", "--resume", "--trust-unverified")) == 0
    assert [r["step"] for r in _records(home.run("undigested") / "metrics.jsonl")] == [1, 2, 3]
