import contextlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
import zstandard

from millrace.home import Home
from pipeline.config import load_pipeline_config
from pipeline.runner import PHASE_LABELS, run_pipeline
from pipeline.steps.tokenize.tokenization import load_tokenizer
from pipeline.store.format import ShardReader, Store
from testkit.corpus import config_text, make_corpus, store_files


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("pipeline")
    corpus = make_corpus(root / "corpus")
    config_path = root / "pipeline.toml"
    config_path.write_text(config_text(corpus))
    home = Home.resolve(root / "home")
    path = run_pipeline(load_pipeline_config(config_path), home)
    return root, corpus, config_path, path


@pytest.mark.slow
def test_store_has_source_cells_and_verifies(built):
    _, _, _, path = built
    store = Store(path)
    assert sorted(store.manifest.cells) == ["articles", "notes", "snippets"]
    assert store.verify() == []
    assert store.manifest.dtype == "uint16"
    assert store.manifest.sources == ["articles", "notes", "snippets"]


@pytest.mark.slow
def test_funnel_counts_every_removal_with_its_reason(built):
    _, _, _, path = built
    funnel = Store(path).manifest.funnel.stages
    by_name = {stage.name: stage.sources for stage in funnel}
    read = by_name["read"]["articles"]
    assert read.removed["malformed"].documents == 1
    assert read.removed["empty"].documents == 1
    assert by_name["exact_dedup"]["articles"].removed["exact"].documents == 1
    assert by_name["exact_dedup"]["notes"].removed["exact"].documents == 1
    assert by_name["fuzzy_dedup"]["articles"].removed["fuzzy"].documents == 1
    # code never goes through the prose filters
    assert "snippets" not in [s for s, c in by_name["gopher_quality"].items() if c.removed]
    for stage in funnel:
        for counts in stage.sources.values():
            assert counts.received.documents == counts.kept.documents + counts.removed_documents()
            removed_tokens = sum(r.tokens for r in counts.removed.values())
            assert counts.received.tokens == counts.kept.tokens + removed_tokens
    store = Store(path)
    for source in store.manifest.sources:
        cell = store.cell(source)
        assert by_name["tokenize"][source].kept.tokens == cell.tokens + cell.validation.tokens
        held = by_name["validation"][source]
        assert held.kept.documents == cell.documents and held.kept.tokens == cell.tokens
        assert held.removed["held out for validation"].documents == cell.validation.documents


@pytest.mark.slow
def test_megatron_reads_the_shards_and_documents_decode_to_the_input(built):
    indexed = pytest.importorskip("megatron.core.datasets.indexed_dataset")
    _, _, _, path = built
    store = Store(path)
    tokenizer = load_tokenizer(path / "tokenizer" / "tokenizer.json")
    eos = store.manifest.tokenizer.eos_id
    texts = {}
    inputs = set()
    for file in sorted((built[0] / "corpus").rglob("*.jsonl.zst")):
        raw = zstandard.ZstdDecompressor().decompress(file.read_bytes(), max_output_size=1 << 26)
        for line in raw.decode().splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                inputs.add(json.loads(line)["text"])
    for cell in store.manifest.cells:
        manifest = store.cell(cell)
        for shard in manifest.shards.rows():
            prefix = store.shard_prefix(cell, shard)
            ours = ShardReader(prefix)
            theirs = indexed.IndexedDataset(str(prefix))
            assert len(theirs) == ours.documents == shard.documents
            for i in range(len(theirs)):
                assert np.array_equal(theirs[i], ours.document(i))
                assert theirs[i][-1] == eos and eos not in theirs[i][:-1]
                texts[cell, shard.name, i] = tokenizer.decode(theirs[i][:-1].tolist())
    assert any("def function_" in text for (cell, _, _), text in texts.items() if cell == "snippets")
    assert all(text in inputs for text in texts.values())
    assert len(texts) == sum(c.documents for c in store.manifest.cells.values())


@pytest.mark.slow
def test_rerun_of_a_finished_store_changes_nothing(built):
    root, _, config_path, path = built
    before = store_files(path)
    assert run_pipeline(load_pipeline_config(config_path), Home.resolve(root / "home")) == path
    assert store_files(path) == before


def cell_contents(path):
    """Per cell: its training and held-out documents (token bytes) and trace rows, each as a sorted list."""
    from pipeline.store.trace import read_trace

    store, contents = Store(path), {}
    for name in store.manifest.cells:
        cell = store.cell(name)
        documents = {}
        for part, shards in (("training", list(cell.shards.rows())), ("held", cell.validation.shards)):
            readers = [ShardReader(store.shard_prefix(name, shard)) for shard in shards]
            documents[part] = sorted(r.document(i).tobytes() for r in readers for i in range(r.documents))
        rows = read_trace(store.cell_dir(name)).select(["tokens", "source", "id", "origin", "position"]).to_pylist()
        contents[name] = (documents, sorted(tuple(r.values()) for r in rows))
    return contents


@pytest.mark.slow
def test_another_task_count_deals_the_same_documents_into_other_shards(built, tmp_path):
    _root, corpus, _, reference = built
    config_path = tmp_path / "three-tasks.toml"
    config_path.write_text(config_text(corpus, tasks=3))
    path = run_pipeline(load_pipeline_config(config_path), Home.resolve(tmp_path / "home"))
    ours, theirs = Store(path), Store(reference)
    assert ours.verify() == []
    assert cell_contents(path) == cell_contents(reference)
    assert {n: s.model_dump(exclude={"manifest_hash"}) for n, s in ours.manifest.cells.items()} == {
        n: s.model_dump(exclude={"manifest_hash"}) for n, s in theirs.manifest.cells.items()
    }
    assert ours.manifest.funnel == theirs.manifest.funnel
    names = {n: list(ours.cell(n).shards.names) for n in ours.manifest.cells}
    assert any(name.startswith("shard-00002-") for shards in names.values() for name in shards)  # three tasks' shards
    assert names != {n: list(theirs.cell(n).shards.names) for n in theirs.manifest.cells}


@pytest.mark.slow
def test_the_trace_parts_read_as_one_cell_wide_table(built):
    from pipeline.store.trace import document_rows, read_trace

    _, _, _, path = built
    store = Store(path)
    multi_part = 0
    for name in store.manifest.cells:
        cell, cell_dir = store.cell(name), store.cell_dir(name)
        multi_part += len(cell.stats.trace.parts or [] if cell.stats.trace else []) > 1
        rows = read_trace(cell_dir).to_pylist()
        shards = list(cell.shards.rows())
        assert len(rows) == cell.documents == sum(s.documents for s in shards)
        assert [r["token_start"] for r in rows] == np.concatenate(
            [[0], np.cumsum([r["tokens"] for r in rows])[:-1]]
        ).tolist()
        for row in rows:  # each row names its document: shard index in the cell's table, index in the shard
            assert (
                ShardReader(store.shard_prefix(name, shards[row["shard"]])).lengths[row["document"]] == row["tokens"]
            )
        assert [(r["shard"], r["document"]) for r in rows] == [
            (s, d) for s, shard in enumerate(shards) for d in range(shard.documents)
        ]
        picked = list(range(len(rows)))[::-3]
        assert document_rows(cell_dir, picked) == [rows[i] for i in picked]
    assert multi_part  # the offsets between parts are exercised


@pytest.mark.slow
def test_assembly_reads_no_token_and_keeps_the_files_the_shard_tasks_wrote(built, tmp_path, monkeypatch):
    """Assembly over real shard-task output (the reference's cells, staged again): no `.bin` is opened, each
    final `.bin` is the very file staged (same inode), and the cell manifests come out as the reference's."""
    import builtins
    import io
    import shutil

    from pipeline.steps.assemble import StoreContents, assemble_store
    from pipeline.store.manifest_records import Funnel, StoreStats

    root, _, config_path, reference = built
    config = load_pipeline_config(config_path)
    staged = tmp_path / "work" / "store"
    shutil.copytree(
        reference / "cells", staged / "cells", ignore=lambda d, names: [n for n in names if n == "cell.json"]
    )
    inodes = {p.relative_to(staged).as_posix(): p.stat().st_ino for p in staged.rglob("*.bin")}
    opened = []
    real_open, real_os_open = builtins.open, os.open

    def watching_open(file, *args, **kwargs):
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    def watching_os_open(file, *args, **kwargs):
        opened.append(str(file))
        return real_os_open(file, *args, **kwargs)

    manifest = Store(reference).manifest
    monkeypatch.setattr(builtins, "open", watching_open)
    monkeypatch.setattr(io, "open", watching_open)
    monkeypatch.setattr(os, "open", watching_os_open)
    contents = StoreContents(
        name="local",
        version="again",
        tokenizer=reference / "tokenizer" / "tokenizer.json",
        eos=config.tokenizer.eos,
        sources=manifest.sources,
        shard_tokens=config.output.shard_tokens,
        pipeline_config=manifest.pipeline_config,
        funnel=Funnel(),
        stats=StoreStats(),
    )
    parts = Home.resolve(root / "home").work("local", "2026.01.02") / "parts"
    final = assemble_store(tmp_path / "stores" / "again", staged, parts, contents)
    monkeypatch.undo()
    assert not [p for p in opened if p.endswith(".bin")]
    assert len(inodes) >= 3 and {k: (final / k).stat().st_ino for k in inodes} == inodes
    assert not staged.exists()
    assert Store(final).verify() == []
    for name in manifest.cells:
        assert (final / "cells" / name / "cell.json").read_bytes() == (
            reference / "cells" / name / "cell.json"
        ).read_bytes()


@pytest.mark.slow
def test_tokenize_tasks_write_the_final_shards_and_the_split_writes_only_the_candidates(tmp_path):
    """When the split starts, every training shard the tokenize tasks wrote is already the store's final file
    (same inode at the end) and the runs' tokens are gone; the split writes only the waiting candidates."""
    from pipeline.work import WorkLayout

    corpus = make_corpus(tmp_path / "corpus")
    config_path = tmp_path / "pipeline.toml"
    config_path.write_text(config_text(corpus, tasks=3).replace("[output]\n", "[output]\nshard_tokens = 300\n"))
    config = load_pipeline_config(config_path)
    home = Home.resolve(tmp_path / "home")
    layout = WorkLayout(home.work("local", "2026.01.02"))
    at_split = {}
    announced = []

    def on_phase(label):
        announced.append(label)
        if label == "split":
            staged = layout.staged / "cells"
            at_split["bins"] = {p.relative_to(staged).as_posix(): p.stat().st_ino for p in staged.rglob("*.bin")}
            at_split["runs"] = sorted(p.name for p in layout.runs.rglob("*.tokens"))
            offered = [
                entry["pairs"]
                for path in layout.runs.glob("*/held-out.json")
                for entry in json.loads(path.read_text())["cells"].values()
            ]
            at_split["waiting"] = sum(len(rows) for rows in offered)
            at_split["before_last"] = [sum(row[2] for row in rows[:-1]) for rows in offered]

    final = run_pipeline(config, home, on_phase=on_phase)
    store = Store(final)
    assert announced == list(PHASE_LABELS)  # the runner runs the registry's phases in its order
    assert at_split["runs"] and all(name.endswith(".candidates.tokens") for name in at_split["runs"])
    assert not [name for name in at_split["bins"] if "/validation-" in name]
    assert len(at_split["bins"]) >= 6
    assert {k: (final / "cells" / k).stat().st_ino for k in at_split["bins"]} == at_split["bins"]
    written_by_split = 0
    for name in store.manifest.cells:
        cell = store.cell(name)
        for shard in [*cell.shards.rows(), *cell.validation.shards]:
            if f"{name}/{shard.name}.bin" not in at_split["bins"]:
                written_by_split += shard.documents
        assert cell.validation.documents >= 1
    assert written_by_split == at_split["waiting"]
    assert max(at_split["before_last"]) < 4096  # each task offers about `tokens_per_cell` per cell, no more
    assert store.verify() == []


@pytest.mark.slow
def test_peek_decode_names_each_samples_documents_from_the_trace_parts(built):
    """`loader peek --decode` over a store of several trace parts per cell: each listed document is the
    input record (origin, line) whose text the sample's window shows."""
    from loader import MixtureStream
    from loader.peek import peek
    from mixtures.build import build
    from mixtures.new import NewRevision, new_revision

    root, _, _, path = built
    home = Home.resolve(root / "home")
    new_revision(
        home,
        NewRevision(
            mixture="peeked", revision="all", store=Store(path).name, strategy="natural", seq_len=64, global_batch=8
        ),
    )
    stream = MixtureStream(build(home, "peeked", "all"), prefetch=0)
    lines: dict[str, list[str]] = {}
    checked = 0
    for step in range(3):
        for sample in peek(stream, step, decode=True)["samples"]:
            documents = sample["documents"]
            assert documents and all(d["source"] == sample["cell"] for d in documents)
            first = documents[0]
            if first["origin"] not in lines:
                raw = zstandard.ZstdDecompressor().decompress(
                    Path(first["origin"]).read_bytes(), max_output_size=1 << 26
                )
                lines[first["origin"]] = raw.decode().splitlines()
            text = json.loads(lines[first["origin"]][first["position"] - 1])["text"]
            piece = sample["text"].split("<|endoftext|>")[0][4:28]
            if len(piece) >= 16:
                assert piece in text, (piece, first)
                checked += 1
    assert checked >= 8


@pytest.mark.slow
def test_peek_decode_off_a_terminal_prints_whole_origins(built, capsys):
    """Under pytest stdout is a pipe, as under nohup or CI: no origin is cut at rich's 80 columns."""
    from millrace.cli import main as millrace
    from mixtures.build import build
    from mixtures.new import NewRevision, new_revision

    root, _, _, path = built
    home = Home.resolve(root / "home")
    new_revision(
        home,
        NewRevision(
            mixture="whole", revision="all", store=Store(path).name, strategy="natural", seq_len=64, global_batch=4
        ),
    )
    build(home, "whole", "all")
    assert (
        millrace(["loader", "peek", "whole", "--revision", "all", "--step", "0", "--decode", "--home", str(home.root)])
        == 0
    )
    out = capsys.readouterr().out
    origins = [str(p) for p in (root / "corpus").rglob("*.jsonl.zst")]
    assert any(origin in out for origin in origins) and max(len(o) for o in origins) > 40
