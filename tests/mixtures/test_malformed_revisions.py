"""Every malformed revision file: one line naming what is wrong, a non-zero exit, no traceback."""

import copy
import json
import subprocess
import sys

import pytest
import tomli_w

from millrace.cli import main
from testkit.revisions import base
from testkit.stores import EVEN

VERSION = EVEN.version


def mutate(path, value):
    def apply(doc):
        target = doc
        for key in path[:-1]:
            target = target[key]
        if value is DELETE:
            del target[path[-1]]
        else:
            target[path[-1]] = value
        return doc

    return apply


DELETE = object()

CASES = {
    "missing field": (mutate(["seq_len"], DELETE), ["field 'seq_len'", "required"]),
    "missing store name": (mutate(["store", "name"], DELETE), ["'store.name'", "required"]),
    "missing phase tokens": (mutate(["phases", 0, "tokens"], DELETE), ["phase 'main'", "'tokens'", "required"]),
    "string for int": (mutate(["seq_len"], "256"), ["field 'seq_len'", "valid integer"]),
    "bool for int": (mutate(["seed"], True), ["field 'seed'"]),
    "float for int": (mutate(["global_batch"], 4.5), ["field 'global_batch'"]),
    "string weight": (mutate(["phases", 0, "weights", "c00q0"], "0.25"), ["phase 'main'", "'c00q0'"]),
    "weights sum to 0.7": (
        mutate(["phases", 0, "weights"], {"c00q0": 0.2, "c01q*": 0.5}),
        ["phase 'main'", "'weights'", "0.7", "normalize"],
    ),
    "weights sum over 1": (mutate(["phases", 0, "weights", "c00q0"], 0.2500001), ["sum to 1.0000001"]),
    "unknown cell": (
        mutate(["phases", 0, "weights"], {"c00q0": 0.5, "c99q9": 0.5}),
        ["phase 'main'", "'c99q9'", "no such cell"],
    ),
    "pattern matching nothing": (
        mutate(["phases", 0, "weights"], {"c00q0": 0.5, "c7*": 0.5}),
        ["'c7*'", "matches no non-empty cell"],
    ),
    "NaN weight": (mutate(["phases", 0, "weights", "c00q0"], float("nan")), ["'c00q0'", "finite"]),
    "infinite weight": (mutate(["phases", 0, "weights", "c00q0"], float("inf")), ["'c00q0'", "finite"]),
    "negative weight": (mutate(["phases", 0, "weights"], {"c00q0": -0.5, "c01q0": 1.5}), ["'c00q0'", "negative"]),
    "all weights zero": (mutate(["phases", 0, "weights"], {"c00q0": 0.0}), ["every weight is zero"]),
    "empty weights": (mutate(["phases", 0, "weights"], {}), ["'weights'", "empty"]),
    "empty cell with weight": (mutate(["phases", 0, "weights"], {"c00q0": 0.5, "c09q0": 0.5}), ["'c09q0'", "empty"]),
    "cell shorter than a sequence": (
        mutate(["phases", 0, "weights"], {"c00q0": 0.5, "c09q1": 0.5}),
        ["'c09q1'", "fewer than one sequence"],
    ),
    "unknown option": (mutate(["epoc_cap"], 8), ["'epoc_cap'", "unknown option"]),
    "unknown phase option": (mutate(["phases", 1, "tempreature"], 2.0), ["phase 'cooldown'", "'tempreature'"]),
    "no phases": (mutate(["phases"], []), ["'phases'"]),
    "weights and strategy": (mutate(["phases", 0, "strategy"], "natural"), ["phase 'main'", "exactly one"]),
    "neither weights nor strategy": (mutate(["phases", 1, "strategy"], DELETE), ["phase 'cooldown'", "exactly one"]),
    "duplicate phase": (mutate(["phases", 1, "name"], "main"), ["'name'", "used twice"]),
    "unknown strategy": (mutate(["phases", 1, "strategy"], "random"), ["phase 'cooldown'", "'strategy'"]),
    "temperature missing": (mutate(["phases", 1, "strategy"], "temperature"), ["'temperature'", "required"]),
    "strategy option on a weights phase": (
        mutate(["phases", 0, "temperature"], 2.0),
        ["phase 'main'", "field 'temperature'", "only for a strategy phase"],
    ),
    "another strategy's option": (
        mutate(["phases", 1, "tilt"], {"q4": 2.0}),
        ["phase 'cooldown'", "field 'tilt'", "only for strategy 'quality-tilt'"],
    ),
    "bad tilt bucket": (
        lambda d: mutate(
            ["phases", 1], {"name": "cooldown", "tokens": 8192, "strategy": "quality-tilt", "tilt": {"top": 2.0}}
        )(d),
        ["'tilt'", "'top'"],
    ),
    "tilt bucket absent": (
        lambda d: mutate(
            ["phases", 1], {"name": "cooldown", "tokens": 8192, "strategy": "quality-tilt", "tilt": {"q7": 2.0}}
        )(d),
        ["phase 'cooldown'", "'q7'"],
    ),
    "zero seq_len": (mutate(["seq_len"], 0), ["'seq_len'", "greater than 0"]),
    "negative tokens": (mutate(["phases", 0, "tokens"], -5), ["phase 'main'", "'tokens'"]),
    "negative epoch cap": (mutate(["epoch_cap"], -1.0), ["'epoch_cap'"]),
    "bad revision name": (mutate(["revision"], "a/b"), ["'revision'"]),
    "missing store": (mutate(["store", "name"], "nosuch"), ["'store.name'", "no store 'nosuch'"]),
    "missing store version": (mutate(["store", "version"], "1999.01.01"), ["'store.version'", "1999.01.01", VERSION]),
    "store hash mismatch": (
        mutate(["store", "manifest_hash"], "sha256:" + "0" * 64),
        ["'store.manifest_hash'", "differs"],
    ),
    "epoch cap passed": (
        mutate(["phases", 0], {"name": "main", "tokens": 10**8, "weights": {"c00q0": 1.0}}),
        ["phase 'main'", "'epoch_cap'", "'c00q0'"],
    ),
    "weight too small for a sample": (
        mutate(["phases", 0, "weights"], {"c00q0": 1 - 3e-9, "c01q0": 1e-9, "c02q0": 1e-9, "c00q1": 1e-9}),
        ["phase 'main'", "no sample"],
    ),
    "empty cells list": (mutate(["phases", 1, "cells"], []), ["'cells'", "empty"]),
    "cells list matching nothing": (mutate(["phases", 1, "cells"], ["x*"]), ["'cells'", "'x*'"]),
}


def run_cli(capsys, *args):
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_base_revision_is_valid(revision_home, tmp_path, capsys):
    path = tmp_path / "r1.toml"
    path.write_text(tomli_w.dumps(base()))
    code, out, err = run_cli(capsys, "--home", str(revision_home.root), "mix", "validate", str(path))
    assert code == 0, err
    assert out.startswith("ok: default/r1")


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_revision_is_one_line_naming_it(revision_home, tmp_path, capsys, case):
    change, expected = CASES[case]
    path = tmp_path / "r1.toml"
    path.write_text(tomli_w.dumps(change(copy.deepcopy(base()))))
    code, _out, err = run_cli(capsys, "--home", str(revision_home.root), "mix", "validate", str(path))
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert str(path) in lines[0] and "Traceback" not in err
    for fragment in expected:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("mixture = \n", "not valid TOML"),
        ("mixture = 'default'\nmixture = 'x'\n", "not valid TOML"),
        ("\xff\xfe garbage", "not valid TOML"),
    ],
)
def test_unparsable_files_are_one_line(revision_home, tmp_path, capsys, text, fragment):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    code, _, err = run_cli(capsys, "--home", str(revision_home.root), "mix", "validate", str(path))
    assert code != 0 and fragment in err and len(err.strip().splitlines()) == 1


def test_binary_and_json_files(revision_home, tmp_path, capsys):
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\x80\x81\x82")
    code, _, err = run_cli(capsys, "--home", str(revision_home.root), "mix", "validate", str(binary))
    assert code != 0 and "bin.toml" in err and len(err.strip().splitlines()) == 1
    listing = tmp_path / "list.json"
    listing.write_text(json.dumps([1, 2]))
    code, _, err = run_cli(capsys, "--home", str(revision_home.root), "mix", "validate", str(listing))
    assert code != 0 and "list.json" in err and "table" in err
    as_json = tmp_path / "r1.json"
    as_json.write_text(json.dumps(base()))
    code, _out, err = run_cli(capsys, "--home", str(revision_home.root), "mix", "validate", str(as_json))
    assert code == 0, err
    code, _, err = run_cli(capsys, "--home", str(revision_home.root), "mix", "validate", str(tmp_path / "absent.toml"))
    assert code != 0 and "absent.toml" in err and "not found" in err


def test_normalize_rescales_an_intended_partial_sum(revision_home, tmp_path, capsys):
    doc = base()
    doc["normalize"] = True
    doc["phases"][0]["weights"] = {"c00q0": 0.2, "c01q*": 0.5}
    path = tmp_path / "r1.toml"
    path.write_text(tomli_w.dumps(doc))
    code, out, err = run_cli(
        capsys,
        "--home",
        str(revision_home.root),
        "mix",
        "plan",
        "default",
        "--revision",
        "r1",
        "--file",
        str(path),
        "--json",
    )
    assert code == 0, err
    plan = json.loads(out)
    assert plan["cells"]["c00q0"]["phases"]["main"]["declared_weight"] == pytest.approx(0.2 / 0.7)


def test_the_real_command_exits_non_zero_without_traceback(revision_home, tmp_path):
    doc = base()
    doc["phases"][0]["weights"] = {"c00q0": 0.2, "c01q*": 0.5}
    path = tmp_path / "r1.toml"
    path.write_text(tomli_w.dumps(doc))
    result = subprocess.run(
        [sys.executable, "-m", "millrace", "--home", str(revision_home.root), "mix", "validate", str(path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "sum to 0.7" in result.stderr and "phase 'main'" in result.stderr
