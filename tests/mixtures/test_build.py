"""Building revisions: pinned manifests, idempotence, immutable names, concurrent builds, plan/diff/list."""

import json
import multiprocessing
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pydantic
import pytest
import tomli_w

import mixtures
from millrace.cli import main
from millrace.errors import ConfigError
from millrace.home import Home
from mixtures.manifest import DOCUMENT_RUN, find_manifest, read_manifest
from mixtures.resolve import phase_sequences
from pipeline.store.format import Store, write_stats_only_store
from testkit.revisions import write_revision_file
from testkit.stores import EVEN, REFERENCE_STATS, grid, make_store

REPO = Path(__file__).resolve().parents[2]
VERSION = EVEN.version


def test_shipped_default_revisions_build_with_pinned_shards(store_home):
    store = Store(store_home.store("local", VERSION))
    for revision in ("natural", "uniform-sampling", "quality-tilt"):
        path = mixtures.build(store_home, "default", revision)
        assert path == find_manifest(store_home, "default", revision)
        manifest, _digest = read_manifest(path)
        assert manifest.store.version == VERSION and manifest.store.manifest_hash == store.manifest_hash
        assert manifest.eos_id == 0 and manifest.dtype == "uint16"
        assert manifest.document_run == DOCUMENT_RUN > 1  # documents are ordered in runs (one read each)
        assert json.loads(path.read_text())["document_run"] == DOCUMENT_RUN
        assert [p.name for p in manifest.phases] == ["main", "cooldown"]
        for phase in manifest.phases:
            assert sum(phase.counts.values()) == phase.sequences and phase.sequences % manifest.global_batch == 0
            assert phase.start_position == phase.start_step * manifest.global_batch
        assert manifest.total_steps == sum(p.steps for p in manifest.phases) == 304
        for name, cell in manifest.cells.items():
            cell_manifest = store.cell(name)
            assert cell.shards == len(cell_manifest.shards.names) > 0
            assert cell.cell_manifest_hash == store.manifest.cells[name].manifest_hash
            assert cell.sequences_available == (cell.available_tokens - 1) // manifest.seq_len
            drawn = sum(p.counts[name] for p in manifest.phases)
            assert 0 < drawn <= manifest.epoch_cap * cell.sequences_available
    uniform, _ = read_manifest(find_manifest(store_home, "default", "uniform-sampling"))
    cooldown = uniform.phases[1]
    assert {c for c, n in cooldown.counts.items() if n} == {c for c in grid() if c.endswith(("q3", "q4"))}
    main_counts = set(uniform.phases[0].counts.values())
    assert max(main_counts) - min(main_counts) <= 1  # equal weights, no cell near the cap here


def test_build_is_idempotent_and_refuses_a_changed_revision(store_home):
    phases = [{"name": "main", "tokens": 40960, "weights": {"c00q0": 0.5, "c*q4": 0.5}}]
    path = write_revision_file(store_home, "mine", "r1", phases)
    first = mixtures.build_result(store_home, "mine", "r1")
    assert first.written
    before = first.path.read_bytes()
    again = mixtures.build_result(store_home, "mine", "r1")
    assert not again.written and again.manifest_hash == first.manifest_hash and again.path.read_bytes() == before
    # Comments and layout don't change a revision's meaning.
    path.write_text("# a comment\n" + path.read_text())
    assert mixtures.build_result(store_home, "mine", "r1").manifest_hash == first.manifest_hash
    # Same inputs in another home give the same manifest hash.
    write_revision_file(
        store_home, "mine", "r1", [{"name": "main", "tokens": 40960, "weights": {"c00q0": 0.6, "c*q4": 0.4}}]
    )
    with pytest.raises(
        ConfigError, match=r"r1.toml: revision mine/r1 was already built from a different file.*new revision"
    ):
        mixtures.build(store_home, "mine", "r1")
    assert first.path.read_bytes() == before


def test_same_inputs_give_the_same_manifest_hash_across_homes(tmp_path):
    digests = set()
    for name in ("a", "b"):
        home = Home.resolve(tmp_path / name)
        make_store(home, grid(), EVEN)
        digests.add(mixtures.build_result(home, "default", "quality-tilt").manifest_hash)
    assert len(digests) == 1


def build_in_process(root: str, mixture: str, revision: str, start: float) -> str:
    while time.time() < start:
        time.sleep(0.001)
    try:
        return mixtures.build_result(Home.resolve(root), mixture, revision).manifest_hash
    except ConfigError as exc:
        return f"error: {exc}"


def test_concurrent_builds_give_one_complete_manifest(store_home):
    context = multiprocessing.get_context("fork")
    start = time.time() + 0.5
    with context.Pool(4) as pool:
        digests = pool.starmap(build_in_process, [(str(store_home.root), "default", "uniform-sampling", start)] * 4)
    assert len(set(digests)) == 1 and digests[0].startswith("sha256:")
    path = find_manifest(store_home, "default", "uniform-sampling")
    assert read_manifest(path)[1] == digests[0]
    leftovers = [p.name for p in path.parent.iterdir() if p.name != "manifest.json"]
    assert leftovers == []


def test_concurrent_builds_of_different_files_under_one_name_let_one_win(store_home, tmp_path):
    files = []
    for index, weight in enumerate((0.3, 0.7)):
        doc = {
            "mixture": "mine",
            "revision": "race",
            "seed": 1,
            "seq_len": 128,
            "global_batch": 8,
            "epoch_cap": 4.0,
            "store": {"name": "local"},
            "phases": [{"name": "main", "tokens": 40960, "weights": {"c00q0": weight, "c01q0": 1 - weight}}],
        }
        path = tmp_path / f"race{index}.toml"
        path.write_text(tomli_w.dumps(doc))
        files.append(path)
    context = multiprocessing.get_context("fork")
    start = time.time() + 0.5
    with context.Pool(2) as pool:
        results = pool.starmap(build_file_in_process, [(str(store_home.root), str(f), start) for f in files])
    errors = [r for r in results if r.startswith("error:")]
    assert len(errors) == 1 and "immutable" in errors[0]
    _manifest, digest = read_manifest(find_manifest(store_home, "mine", "race"))
    assert digest in results


def build_file_in_process(root: str, file: str, start: float) -> str:
    while time.time() < start:
        time.sleep(0.001)
    try:
        return mixtures.build_result(Home.resolve(root), "mine", "race", file).manifest_hash
    except ConfigError as exc:
        return f"error: {exc}"


def test_two_hundred_cells_with_tiny_weights_are_all_represented_or_named(home):
    cells = {f"c{d:02d}q{q}": 10**11 + 7919 * (d * 5 + q) for d in range(40) for q in range(5)}
    write_stats_only_store(home.store("big", "2025.01.01"), "big", "2025.01.01", cells)
    names = sorted(cells)
    tiny = names[::17]
    zero = names[1:3]
    rest = [name for name in names if name not in tiny and name not in zero]
    weights = dict.fromkeys(tiny, 1e-06) | dict.fromkeys(zero, 0.0)
    weights |= {name: (1 - 1e-6 * len(tiny)) / len(rest) for name in rest}
    doc = {
        "mixture": "big",
        "revision": "tiny",
        "seed": 1,
        "seq_len": 4096,
        "global_batch": 1024,
        "epoch_cap": 8.0,
        "store": {"name": "big"},
        "phases": [{"name": "main", "tokens": 10**13, "weights": weights}],
    }
    path = home.revisions / "big" / "tiny.toml"
    path.parent.mkdir(parents=True)
    path.write_text(tomli_w.dumps(doc))
    built = mixtures.build(home, "big", "tiny")
    manifest, _ = read_manifest(built)
    assert manifest.document_run == 1 and "document_run" not in json.loads(built.read_text())  # no documents
    counts = manifest.phases[0].counts
    nonzero = {name for name, weight in weights.items() if weight > 0}
    assert set(manifest.cells) == nonzero and all(counts[name] >= 1 for name in nonzero)
    assert all(2000 < counts[name] < 3000 for name in tiny)  # 1e-6 of 2.44e9 sequences
    # On three batches (3072 sequences) a 1e-6 share is 0.003 of a sequence: the others' remainders
    # make room and each tiny weight gets exactly one sequence, every count still within one of its share.
    doc["revision"] = "tiny-small"
    doc["phases"][0]["tokens"] = 4096 * 1024 * 3
    (home.revisions / "big" / "tiny-small.toml").write_text(tomli_w.dumps(doc))
    manifest, _ = read_manifest(mixtures.build(home, "big", "tiny-small"))
    counts = manifest.phases[0].counts
    assert all(counts[name] == 1 for name in tiny) and set(manifest.cells) == nonzero
    assert sum(counts.values()) == 3072
    # On 64 sequences 198 non-zero weights can't all be sampled: the build fails naming them.
    doc["revision"] = "tiny-tiny"
    doc["global_batch"] = 64
    doc["phases"][0]["tokens"] = 4096 * 64
    (home.revisions / "big" / "tiny-tiny.toml").write_text(tomli_w.dumps(doc))
    with pytest.raises(ConfigError) as info:
        mixtures.build(home, "big", "tiny-tiny")
    message = str(info.value)
    assert "no sample" in message and tiny[0] in message and f"and {len(nonzero) - 8} more" in message
    assert "\n" not in message
    assert not list(home.stores.glob("big/*/mixtures/big/tiny-tiny/*"))


def test_reference_scale_example_validates_builds_and_plans_fast(home, capsys):
    stats = json.loads(REFERENCE_STATS.read_text())["available_tokens"]
    assert len(stats) == 200 and abs(sum(stats.values()) - 23.1e12) < 1e9
    write_stats_only_store(home.store("reference", "2025.06.01"), "reference", "2025.06.01", stats)
    start = time.process_time()  # CPU time: what the commands cost, not how busy the machine is
    shipped = REPO / "mixtures" / "revisions" / "reference" / "two-phase.toml"
    assert main(["--home", str(home.root), "mix", "validate", str(shipped)]) == 0
    assert main(["--home", str(home.root), "mix", "build", "reference", "--revision", "two-phase"]) == 0
    assert main(["--home", str(home.root), "mix", "plan", "reference", "--revision", "two-phase", "--json"]) == 0
    cpu_seconds = time.process_time() - start
    out = capsys.readouterr().out
    assert json.loads(out[out.index("\n{") + 1 :])["max_epochs"] <= 8
    assert cpu_seconds < 2.0
    result = mixtures.plan(home, "reference", "two-phase")
    assert [p["name"] for p in result["phases"]] == ["pretrain", "cooldown"]
    assert result["phases"][0]["sequences"] == phase_sequences(15 * 10**12, 4096, 2048)
    assert len(result["cells"]) == 200
    for info in result["cells"].values():
        assert set(info) >= {"available_tokens", "epochs"}
        assert 0 < info["epochs"] <= 8
        for phase in ("pretrain", "cooldown"):
            assert set(info["phases"][phase]) >= {"declared_weight", "realised_weight", "sequences", "tokens"}
    uniform = mixtures.plan(home, "reference", "uniform-sampling")
    capped = [c for c, info in uniform["cells"].items() if info["epochs"] == 8.0]
    assert capped and max(info["epochs"] for info in uniform["cells"].values()) <= 8.0


def test_plan_diff_and_list_through_the_cli(store_home, capsys):
    root = str(store_home.root)
    assert main(["--home", root, "mix", "build", "default", "--revision", "natural"]) == 0
    capsys.readouterr()
    assert main(["--home", root, "mix", "plan", "default", "--revision", "quality-tilt", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    for info in plan["cells"].values():
        for phase in plan["phases"]:
            cp = info["phases"][phase["name"]]
            assert cp["tokens"] == cp["sequences"] * plan["seq_len"]
            assert abs(cp["realised_weight"] * phase["sequences"] - cp["declared_weight"] * phase["sequences"]) < 1
    q4 = [c for c in plan["cells"] if c.endswith("q4")]
    q0 = [c for c in plan["cells"] if c.endswith("q0")]
    assert all(plan["cells"][c]["phases"]["cooldown"]["sequences"] == 0 for c in q0)
    assert all(plan["cells"][c]["phases"]["cooldown"]["sequences"] > 0 for c in q4)
    assert main(["--home", root, "mix", "diff", "default", "natural", "quality-tilt", "--json"]) == 0
    diff = json.loads(capsys.readouterr().out)
    assert diff["changed_cells"] == 15
    c = diff["cells"]["c00q4"]["phases"]["main"]
    assert c["weight_b"] > c["weight_a"] and c["weight_change"] == pytest.approx(c["weight_b"] - c["weight_a"])
    assert diff["cells"]["c00q4"]["epochs_change"] > 0
    assert main(["--home", root, "mix", "diff", "default", "natural", "quality-tilt"]) == 0
    assert "c00q4" in capsys.readouterr().out
    assert main(["--home", root, "mix", "list", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    revisions = listing["mixtures"]["default"]["revisions"]
    assert {"natural", "uniform-sampling", "quality-tilt"} <= set(revisions)
    assert revisions["natural"]["built"][0]["version"] == VERSION and revisions["quality-tilt"]["built"] == []
    assert main(["--home", root, "mix", "plan", "default", "--revision", "natural"]) == 0
    assert "c00q0" in capsys.readouterr().out
    assert main(["--home", root, "mix", "list"]) == 0
    assert "uniform-sampling" in capsys.readouterr().out


@pytest.mark.parametrize(
    "strategy, extra",
    [
        ("natural", []),
        ("uniform", []),
        ("temperature", ["--temperature", "3"]),
        ("quality-tilt", ["--tilt", "q0=0.5,q4=2"]),
        ("explicit", ["--weight", "c*q4=0.5", "--weight", "c00q0=0.5"]),
    ],
)
def test_new_writes_a_valid_pinned_revision_for_each_strategy(store_home, capsys, strategy, extra):
    root = str(store_home.root)
    args = [
        "--home",
        root,
        "mix",
        "new",
        "mine",
        "--revision",
        f"r-{strategy}",
        "--store",
        "local",
        "--strategy",
        strategy,
        "--phase",
        "main:64K",
        "--phase",
        "cooldown:16K:uniform@c*q3,c*q4",
        "--seq-len",
        "128",
        "--global-batch",
        "8",
        "--epoch-cap",
        "4",
        *extra,
        "--json",
    ]
    assert main(args) == 0, capsys.readouterr().err
    summary = json.loads(capsys.readouterr().out)
    path = store_home.revisions / "mine" / f"r-{strategy}.toml"
    assert summary["file"] == str(path) and summary["store"]["version"] == VERSION
    text = path.read_text()
    assert 'version = "2026.11.30"' in text and "manifest_hash" in text and "[phases.weights]" in text
    plan = mixtures.plan(store_home, "mine", f"r-{strategy}")
    main_weights = {c: info["phases"]["main"]["declared_weight"] for c, info in plan["cells"].items()}
    tokens = {c: info["available_tokens"] for c, info in plan["cells"].items()}
    if strategy == "natural":
        assert main_weights["c02q4"] / main_weights["c00q0"] == pytest.approx(tokens["c02q4"] / tokens["c00q0"])
    if strategy == "uniform":
        assert max(main_weights.values()) == pytest.approx(min(main_weights.values()))
    if strategy == "quality-tilt":
        ratio = (main_weights["c00q4"] / tokens["c00q4"]) / (main_weights["c00q0"] / tokens["c00q0"])
        assert ratio == pytest.approx(4.0)
    if strategy == "explicit":
        assert main_weights["c00q0"] == pytest.approx(0.5) and main_weights["c01q1"] == 0
    assert mixtures.build(store_home, "mine", f"r-{strategy}").exists()
    # Writing it again is a no-op; a different revision under the same name is refused.
    assert main(args) == 0
    capsys.readouterr()
    changed = [a if a != "4" else "5" for a in args]
    assert main(changed) == 2
    assert "already exists" in capsys.readouterr().err


def test_new_symbolic_keeps_the_strategy(store_home):
    path = mixtures.new_revision(
        store_home,
        mixtures.NewRevision(
            mixture="mine",
            revision="sym",
            store="local",
            strategy="uniform",
            phases=["main:64K"],
            seq_len=128,
            global_batch=8,
            symbolic=True,
        ),
    )
    text = path.read_text()
    assert 'strategy = "uniform"' in text and "version" not in text.split("[store]")[1].split("[[")[0]
    assert mixtures.build(store_home, "mine", "sym").exists()


def test_newest_store_version_is_used_unless_pinned(store_home):
    make_store(store_home, {k: v * 2 for k, v in grid().items()}, replace(EVEN, version="2026.12.01"))
    manifest, _ = read_manifest(mixtures.build(store_home, "default", "natural"))
    assert manifest.store.version == "2026.12.01"
    pinned = write_revision_file(
        store_home,
        "mine",
        "old",
        [{"name": "main", "tokens": 40960, "strategy": "natural"}],
        store={"name": "local", "version": VERSION},
    )
    manifest, _ = read_manifest(mixtures.build(store_home, "mine", "old"))
    assert manifest.store.version == VERSION and pinned.exists()


def test_an_altered_cell_manifest_is_named_and_nothing_is_written(store_home):
    """Building reads cell manifests only (O(cells)): shard files are checked by the loader as it reads them
    and by `store verify` (tests/loader/test_faults.py, tests/drills/test_store_faults.py)."""
    cell_json = store_home.store("local", VERSION) / "cells" / "c00q0" / "cell.json"
    cell_json.write_text(cell_json.read_text().replace('"documents": ', '"documents": 1', 1))
    with pytest.raises(Exception) as info:
        mixtures.build(store_home, "default", "natural")
    assert "c00q0/cell.json" in str(info.value)
    assert not list(store_home.stores.glob("local/*/mixtures/default/natural/*"))


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--store", "nosuch"], "no store 'nosuch'"),
        (["--store", "local/1999.01.01"], "1999.01.01"),
        (["--store", "local", "--phase", "main"], "NAME:TOKENS"),
        (["--store", "local", "--phase", "main:lots"], "token budget 'lots'"),
        (["--store", "local", "--phase", "main:1.5"], "whole number"),
        (["--store", "local", "--phase", "main:64K:random"], "unknown strategy 'random'"),
        (["--store", "local", "--strategy", "temperature"], "--temperature"),
        (["--store", "local", "--strategy", "quality-tilt", "--tilt", "q0"], "--tilt 'q0'"),
        (["--store", "local", "--strategy", "explicit"], "--weight"),
        (["--store", "local", "--strategy", "explicit", "--weight", "c00q0=0.5"], "sum to 0.5"),
        (["--store", "local", "--phase", "main:100G"], "epoch cap"),
        (["--store", "local", "--seq-len", "0"], "--seq-len: Input should be greater than or equal to 1 (got 0)"),
        (["--store", "local", "--global-batch", "-4"], "--global-batch:"),
        (["--store", "local", "--continues", "natural"], "--continues and --at-step go together"),
    ],
)
def test_new_refuses_bad_requests_in_one_line(store_home, capsys, args, fragment):
    code = main(["--home", str(store_home.root), "mix", "new", "mine", "--revision", "bad", *args])
    err = capsys.readouterr().err
    assert code != 0 and fragment in err and len(err.strip().splitlines()) == 1, err
    assert not (store_home.revisions / "mine" / "bad.toml").exists()


def test_a_new_revision_request_is_checked_where_it_is_made():
    with pytest.raises(pydantic.ValidationError, match="unknown strategy"):
        mixtures.NewRevision(mixture="m", revision="r", strategy="random")
    with pytest.raises(pydantic.ValidationError, match="--continues and --at-step go together"):
        mixtures.NewRevision(mixture="m", revision="r", at_step=3)


def test_build_json_reports_the_manifest(store_home, capsys):
    assert main(["--home", str(store_home.root), "mix", "build", "default", "--revision", "natural", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["written"] is True and report["total_steps"] == 304 and report["phases"] == ["main", "cooldown"]
    assert read_manifest(Path(report["manifest"]))[1] == report["manifest_hash"]
    assert main(["--home", str(store_home.root), "mix", "build", "default", "--revision", "natural", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["written"] is False
    assert main(["--home", str(store_home.root), "mix", "build", "default", "--revision", "absent"]) == 2
    assert "no revision 'absent'" in capsys.readouterr().err


@pytest.mark.slow
def test_concurrent_mix_build_commands_leave_one_complete_manifest(store_home):
    command = [
        sys.executable,
        "-m",
        "millrace",
        "--home",
        str(store_home.root),
        "mix",
        "build",
        "default",
        "--revision",
        "natural",
        "--json",
    ]
    processes = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)
    ]
    outputs = [process.communicate(timeout=60) for process in processes]
    assert all(process.returncode == 0 for process in processes), outputs
    reports = [json.loads(out) for out, _ in outputs]
    assert len({r["manifest_hash"] for r in reports}) == 1
    assert sorted(r["written"] for r in reports) == [False, False, True]
    path = find_manifest(store_home, "default", "natural")
    assert read_manifest(path)[1] == reports[0]["manifest_hash"]
    assert [p.name for p in path.parent.iterdir()] == ["manifest.json"]
