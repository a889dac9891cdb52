"""The other faces of the stream: index-only mode, torch + DCP, and `millrace loader peek`."""

import json

import numpy as np
import pytest

from loader import MixtureStream, TorchMixtureDataset
from millrace.cli import main as millrace
from millrace.errors import ArtifactError
from testkit.manifests import ManifestFrame, make_manifest, make_stats_store

PLAN_CELLS = {f"c{d:02d}q{q}": 10**9 * (d + 1) + q for d in range(8) for q in range(5)}


@pytest.fixture
def plan(home):
    store = make_stats_store(home, PLAN_CELLS)
    names = sorted(PLAN_CELLS)
    counts = {name: 1000 + 37 * i for i, name in enumerate(names)}
    counts[names[0]] = 1  # a tiny share
    counts[names[1]] += 64 - sum(counts.values()) % 64
    return make_manifest(
        home, store, [counts], ManifestFrame(seq_len=4096, global_batch=64), mixture="plan", revision="p1"
    )


@pytest.mark.slow
def test_index_only_mode_on_a_stats_only_manifest(plan):
    stream = MixtureStream(plan)
    assert stream.index_only
    index = stream.index(stream.steps - 1)
    assert index.cell_ids.size == 64 and (index.sequences < stream.schedule.sequences_available[index.cell_ids]).all()
    with pytest.raises(ArtifactError, match="index-only"):
        stream.batch(0)
    total = sum(np.bincount(i.cell_ids, minlength=40) for i in map(stream.index, range(stream.steps)))
    assert dict(zip(stream.cell_names, total.tolist())) == stream.manifest.phases[0].counts


def test_peek_json_index_only(plan, home, capsys):
    assert (
        millrace(
            [
                "loader",
                "peek",
                "plan",
                "--revision",
                "p1",
                "--step",
                "3",
                "--rank",
                "1",
                "--world",
                "2",
                "--json",
                "--home",
                str(home.root),
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert len(report["samples"]) == 32 and report["index_only"]
    assert [s["position"] for s in report["samples"]] == list(range(3 * 64 + 32, 4 * 64))
    assert all(
        set(s) == {"position", "cell", "sequence", "epoch", "digest"} and s["digest"] is None
        for s in report["samples"]
    )


def test_peek_with_tokens_and_errors(built, capsys):
    home, path = built
    assert (
        millrace(["loader", "peek", "mix", "--revision", "r1", "--step", "26", "--json", "--home", str(home.root)])
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    stream = MixtureStream(path)
    batch = stream.batch(26)
    assert [s["cell"] for s in report["samples"]] == batch.cells
    assert [s["sequence"] for s in report["samples"]] == batch.sequences.tolist()
    assert all(len(s["digest"]) == 16 for s in report["samples"]) and report["phase"] == "phase1"
    assert millrace(["loader", "peek", "mix", "--revision", "r1", "--step", "0", "--home", str(home.root)]) == 0
    assert "phase0" in capsys.readouterr().out
    assert (
        millrace(
            [
                "loader",
                "peek",
                "mix",
                "--revision",
                "r1",
                "--step",
                "1",
                "--decode",
                "--json",
                "--home",
                str(home.root),
            ]
        )
        == 0
    )
    decoded = json.loads(capsys.readouterr().out)["samples"]
    first = stream.batch(1).input_ids[0][:3]
    assert decoded[0]["text"].startswith(" ".join("<eos>" if t == 1 else f"w{t}" for t in first))
    assert millrace(["loader", "peek", "mix", "--revision", "r1", "--step", "999", "--home", str(home.root)]) == 2
    assert "step 999" in capsys.readouterr().err
    assert millrace(["loader", "peek", "nope", "--revision", "r1", "--step", "0", "--home", str(home.root)]) == 2
    assert "no built manifest" in capsys.readouterr().err


@pytest.mark.slow
def test_torch_dataset_resumes_through_distributed_checkpoint(built, tmp_path):
    torch = pytest.importorskip("torch")
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.stateful import Stateful

    _, path = built
    dataset = TorchMixtureDataset(path)
    assert isinstance(dataset, Stateful) and isinstance(dataset, torch.utils.data.IterableDataset)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=0)
    items = iter(loader)
    for _ in range(5):
        item = next(items)
    assert item["input_ids"].dtype == torch.int64 and item["input_ids"].shape == (8, 16)
    assert int(item["step"]) == 4 and item["segment_sources"].shape[0] == 8
    dcp.save({"loader": dataset}, checkpoint_id=str(tmp_path / "ckpt"))
    expected = next(items)

    resumed = TorchMixtureDataset(path)
    dcp.load({"loader": resumed}, checkpoint_id=str(tmp_path / "ckpt"))
    assert resumed.stream.step == 5
    first = next(iter(resumed))
    assert int(first["step"]) == 5
    assert all(torch.equal(first[k], expected[k]) for k in expected)


def test_reference_plan_built_by_mixtures_runs_index_only(home):
    """The mixtures room's shipped 18.75T-token / 200-cell revision, built for real, iterated here."""
    from pathlib import Path

    from mixtures.build import build
    from pipeline.store.format import write_stats_only_store

    stats = json.loads(
        (Path(__file__).resolve().parents[2] / "mixtures/examples/reference/available_tokens.json").read_text()
    )["available_tokens"]
    write_stats_only_store(home.store("reference", "2025.06.01"), "reference", "2025.06.01", stats)
    stream = MixtureStream(build(home, "reference", "two-phase"))
    assert stream.index_only and len(stream.cell_names) == 200
    assert stream.manifest.total_sequences * stream.manifest.seq_len >= 18_750_000_000_000 - 4096 * 2048
    for step in (
        0,
        390_000,
        stream.manifest.phases[1].start_step - 1,
        stream.manifest.phases[1].start_step,
        stream.steps - 1,
    ):
        index = stream.index(step)
        assert (index.sequences < stream.schedule.sequences_available[index.cell_ids]).all()
    phase = stream.manifest.phases[0]
    realised = stream.realised_counts(390_000)
    n = 390_000 * stream.manifest.global_batch
    assert max(abs(realised[c] - n * phase.counts.get(c, 0) / phase.sequences) for c in stream.cell_names) < 2
    assert stream.realised_counts(stream.steps) == {
        c: sum(p.counts.get(c, 0) for p in stream.manifest.phases) for c in stream.cell_names
    }


@pytest.mark.parametrize("workers", [0, 2])
def test_data_loader_workers_yield_each_step_once_in_order_and_state_follows_the_consumer(built, workers):
    torch = pytest.importorskip("torch")
    from loader import MixtureDataLoader

    _, path = built
    reference = MixtureStream(path, prefetch=0)
    dataset = TorchMixtureDataset(path, prefetch=0)
    dataset.load_state_dict({**dataset.state_dict(), "step": 3})
    items = iter(MixtureDataLoader(dataset, num_workers=workers))
    taken = [next(items) for _ in range(7)]
    assert [int(item["step"]) for item in taken] == list(range(3, 10))
    assert dataset.state_dict()["step"] == 10, "the state is the step after the last batch the consumer took"
    from loader.torch_dataset import batch_tensors

    for item in taken:  # every field, packed in this process from what the workers gathered
        expected = batch_tensors(reference.batch(int(item["step"])))
        assert sorted(item) == sorted(expected) and "segment_sources" in item
        assert all(
            torch.equal(item[key], expected[key]) and item[key].dtype == expected[key].dtype for key in expected
        )
    del items
    rest = [int(item["step"]) for item in MixtureDataLoader(dataset, num_workers=workers)]
    assert rest == list(range(10, reference.steps)) and dataset.state_dict()["step"] == reference.steps


def test_plain_data_loader_with_workers_is_refused(built):
    torch = pytest.importorskip("torch")

    _, path = built
    loader = torch.utils.data.DataLoader(TorchMixtureDataset(path, prefetch=0), batch_size=None, num_workers=2)
    with pytest.raises(Exception, match="MixtureDataLoader"):
        next(iter(loader))
