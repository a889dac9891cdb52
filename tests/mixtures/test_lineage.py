"""Revisions that continue another: the format, `mix new --continues`, build pins, plan/diff, errors."""

from __future__ import annotations

import json

import pytest

import mixtures
from millrace.cli import main
from millrace.errors import ConfigError
from mixtures.manifest import read_manifest
from mixtures.revision import load_revision
from testkit.lineage import AT_STEP, CHILD, lineage_home, write_revision


@pytest.fixture
def lineage(tmp_path):
    return lineage_home(tmp_path / "home")


def run_cli(capsys, home, *args):
    code = main(["--home", str(home.root), *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_build_pins_the_parent_and_at_step(lineage):
    parent = mixtures.build_result(lineage, "mix", "natural")
    child, digest = read_manifest(mixtures.build(lineage, "mix", "swap"))
    assert child.at_step == AT_STEP
    assert [(a.revision, a.manifest_hash, a.shared_steps) for a in child.ancestors] == [
        ("natural", parent.manifest_hash, AT_STEP)
    ]
    first, *own = child.phases
    assert (first.name, first.revision, first.start_step, first.steps) == ("natural/main", "natural", 0, AT_STEP)
    assert first.prefix_of == parent.manifest.phases[0].counts
    assert [p.start_step for p in own] == [AT_STEP, AT_STEP + own[0].steps]
    assert [r.model_dump() for r in child.revision_ranges()] == [
        {"revision": "natural", "start_step": 0, "stop_step": AT_STEP},
        {"revision": "swap", "start_step": AT_STEP, "stop_step": child.total_steps},
    ]
    # A manifest without lineage carries none of the lineage fields (its hash is what it was before lineage).
    text = parent.path.read_text()
    assert '"ancestors"' not in text and '"prefix_of"' not in text and '"revision": null' not in text
    assert mixtures.build_result(lineage, "mix", "swap").manifest_hash == digest  # idempotent


def test_mix_new_continues_writes_a_pinned_child(lineage, capsys):
    code, out, err = run_cli(
        capsys,
        lineage,
        "mix",
        "new",
        "mix",
        "--revision",
        "tilt",
        "--continues",
        "natural",
        "--at-step",
        "100",
        "--phase",
        "main:8K:uniform",
        "--phase",
        "cooldown:2K:uniform@c01*",
    )
    assert code == 0, err
    assert "continues natural at step 100" in out
    written = load_revision(lineage.revisions / "mix" / "tilt.toml")
    parent = mixtures.build_result(lineage, "mix", "natural")
    assert written.continues is not None and written.continues.at_step == 100
    assert written.continues.manifest_hash == parent.manifest_hash
    assert (written.seed, written.seq_len, written.global_batch) == (7, 16, 8)  # the parent's, not the defaults
    assert [p.name for p in written.phases] == ["main", "cooldown"]
    code, out, err = run_cli(capsys, lineage, "mix", "plan", "mix", "--revision", "tilt", "--json")
    plan = json.loads(out)
    assert plan["at_step"] == 100 and [r["revision"] for r in plan["lineage"]] == ["natural", "tilt"]
    assert plan["lineage"][0]["manifest_hash"] == parent.manifest_hash
    for info in plan["cells"].values():
        assert info["before_switch"] + info["after_switch"] == info["sequences"]
        assert info["by_revision"] == {"natural": info["before_switch"], "tilt": info["after_switch"]}
    assert sum(info["before_switch"] for info in plan["cells"].values()) == 100 * 8
    code, out, err = run_cli(capsys, lineage, "mix", "diff", "mix", "natural", "tilt", "--json")
    diff = json.loads(out)
    assert diff["lineage"]["b_continues_a"] and diff["phases"] == ["main", "cooldown"]
    c00 = diff["cells"]["c00q0"]["phases"]["main"]
    assert c00["weight_a"] == pytest.approx(30000 / 66800, rel=1e-3) and c00["weight_b"] == pytest.approx(0.2)


def test_a_cycle_and_a_missing_parent_are_errors(lineage):
    write_revision(lineage, CHILD.replace('revision = "natural"', 'revision = "ghost"'), "swap")
    with pytest.raises(
        ConfigError, match=r"swap.toml: revision mix/swap: field 'continues.revision': no revision 'ghost'"
    ):
        mixtures.build(lineage, "mix", "swap")
    write_revision(lineage, CHILD.replace('revision = "natural"', 'revision = "late"'), "swap")
    with pytest.raises(ConfigError, match=r"field 'continues.revision': swap -> late -> swap is a cycle"):
        mixtures.build(lineage, "mix", "swap")


@pytest.mark.parametrize(
    "change, message",
    [
        (
            ("seq_len = 16", "seq_len = 32"),
            r"field 'seq_len': 32 differs from parent mix/natural \(.*natural.toml\)'s 16",
        ),
        (("global_batch = 8", "global_batch = 16"), r"field 'global_batch': 16 differs from parent"),
        (("seed = 7", "seed = 8"), r"field 'seed': 8 differs from parent"),
        (
            (f"at_step = {AT_STEP}", "at_step = 400"),
            r"field 'continues.at_step': 400 is not a step of parent .*steps 1\.\.399",
        ),
        (
            (f"at_step = {AT_STEP}", "at_step = 0"),
            r"field 'continues.at_step': Input should be greater than or equal to 1",
        ),
        (
            (f"at_step = {AT_STEP}", f"at_step = {AT_STEP}\nmanifest_hash = 'sha256:{'0' * 64}'"),
            r"field 'continues.manifest_hash': sha256:0+ differs from parent",
        ),
        ((f"at_step = {AT_STEP}", f"at_step = {AT_STEP}\nstep = 3"), r"field 'continues.step': unknown option"),
        (
            ('name = "local"', 'name = "local"\nversion = "2027.01.01"'),
            r"field 'store.version': store local/2027.01.01 not found",
        ),
        (
            ("c02q0 = 0.5", "c02q0 = 0.5\n[[phases]]\nname = 'more'\ntokens = 12800\nweights = { c02q0 = 1.0 }"),
            r"phase 'more': field 'epoch_cap' cell 'c02q0': passes the epoch cap of 12: .* after \d+ drawn earlier",
        ),
    ],
)
def test_a_child_that_breaks_the_lineage_is_one_line(lineage, change, message):
    path = write_revision(lineage, CHILD.replace(*change, 1), "swap")
    with pytest.raises(ConfigError, match=message) as caught:
        mixtures.validate_file(lineage, path)
    assert "\n" not in str(caught.value)
    assert str(path) in str(caught.value)


def test_reference_shaped_swap_builds_plans_and_peeks_within_a_second(home):
    """The shipped stats-only example: `pre-swap`, and `swap-108000` continuing it at 27.7% with a cooldown at 80%."""
    import time

    from loader import MixtureStream
    from loader.peek import peek
    from pipeline.store.format import write_stats_only_store
    from testkit.stores import REFERENCE_STATS

    stats = json.loads(REFERENCE_STATS.read_text())["available_tokens"]
    write_stats_only_store(home.store("reference", "2025.06.01"), "reference", "2025.06.01", stats)
    mixtures.build(home, "reference", "pre-swap")
    timings = {}
    for name, action in (
        ("build", lambda: mixtures.build(home, "reference", "swap-108000")),
        ("plan", lambda: mixtures.plan(home, "reference", "swap-108000")),
        ("peek", lambda: peek(MixtureStream(mixtures.build(home, "reference", "swap-108000"), prefetch=0), 390_250)),
    ):
        start = time.process_time()  # CPU time: fair on a machine shared with other work
        timings[name] = (action(), time.process_time() - start)
    assert all(seconds < 1.0 for _, seconds in timings.values()), timings
    plan = timings["plan"][0]
    assert plan["total_steps"] == 390_251 and plan["at_step"] == 108_000
    assert round(plan["at_step"] / plan["total_steps"], 3) == 0.277
    cooldown = next(p for p in plan["phases"] if p["name"] == "cooldown")
    assert round(cooldown["start_step"] / plan["total_steps"], 3) == 0.8 and cooldown["start_step"] == 312_192
    assert [r["revision"] for r in plan["lineage"]] == ["pre-swap", "swap-108000"]
    assert plan["max_epochs"] <= 8 and len(plan["cells"]) == 200
    assert sum(c["before_switch"] for c in plan["cells"].values()) == 108_000 * 11_264
    last = timings["peek"][0]
    assert last["phase"] == "cooldown" and len(last["samples"]) == 11_264
    assert all(s["cell"].endswith(("q3", "q4")) for s in last["samples"])
    parent = MixtureStream(mixtures.build(home, "reference", "pre-swap"), prefetch=0)
    child = MixtureStream(mixtures.build(home, "reference", "swap-108000"), prefetch=0)
    for step in (0, 54_321, 107_999):
        assert peek(parent, step)["samples"] == peek(child, step)["samples"]
    assert peek(parent, 108_000)["samples"] != peek(child, 108_000)["samples"]
