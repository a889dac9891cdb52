"""Every input format the config accepts reaches the store: parquet, jsonl, a datasets directory."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from millrace.home import Home
from pipeline.config import load_pipeline_config
from pipeline.runner import run_pipeline
from pipeline.store.format import Store
from testkit.corpus import prose


@pytest.mark.slow
def test_parquet_jsonl_and_datasets_sources(tmp_path, caplog):
    import logging
    import random

    import datasets

    rng = random.Random(3)
    rows = [{"id": f"p{i}", "text": prose(rng)} for i in range(6)]
    (tmp_path / "pq").mkdir()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "pq" / "part.parquet")
    (tmp_path / "pq" / "part.csv").write_text("id,text\n")  # a file no source reads: named in the log and the funnel
    (tmp_path / "js").mkdir()
    lines = [json.dumps({"id": f"j{i}", "text": prose(rng)}) for i in range(5)] + ["not json", json.dumps(["a list"])]
    (tmp_path / "js" / "a.jsonl").write_text("\n".join(lines) + "\n")
    datasets.Dataset.from_list([{"id": f"h{i}", "text": prose(rng)} for i in range(4)]).save_to_disk(tmp_path / "hf")
    (tmp_path / "p.toml").write_text(
        '[[sources]]\nname = "pq"\npaths = ["pq"]\nformat = "parquet"\n'
        '[[sources]]\nname = "js"\npaths = ["js/a.jsonl"]\nformat = "jsonl"\n'
        '[[sources]]\nname = "hf"\npaths = ["hf"]\nformat = "hf-datasets"\n'
        '[tokenizer]\nvocab_size = 300\n[output]\nversion = "2026.02.03"\n[executor]\ntasks = 2\nworkers = 1\n'
    )
    with caplog.at_level(logging.WARNING, logger="pipeline.runner"):
        path = run_pipeline(load_pipeline_config(tmp_path / "p.toml"), Home.resolve(tmp_path / "home"))
    store = Store(path)
    assert {c: m.documents + m.validation_documents for c, m in store.manifest.cells.items()} == {
        "pq": 6,
        "js": 5,
        "hf": 4,
    }
    (unread,) = store.manifest.funnel.not_read
    assert (unread.source, unread.files, unread.examples) == ("pq", 1, ["part.csv"])
    assert f"not read: 1 file under {tmp_path / 'pq'} (source pq), e.g. part.csv" in caplog.text
    language = next(stage for stage in store.manifest.funnel.stages if stage.name == "language")
    assert sum(c.received.documents for c in language.languages.values()) == 6 + 5 + 4
    assert all(m.validation_documents == 1 for m in store.manifest.cells.values())  # the minimum held out per cell
    read = store.manifest.funnel.stages[0].sources["js"]
    assert read.removed["malformed"].documents == 2
    from pipeline.runner import WorkLayout, malformed_report

    report = malformed_report(WorkLayout(Home.resolve(tmp_path / "home").work("local", "2026.02.03")))
    assert sorted(r["line"] for r in report) == [6, 7] and all(r["file"].endswith("js/a.jsonl") for r in report)


@pytest.mark.slow
def test_a_given_tokenizer_json_is_used_and_its_eos_checked(tmp_path):
    import random

    import pytest

    from millrace.errors import ConfigError
    from pipeline.steps.tokenize.tokenization import tokenizer_fingerprint, train_byte_level_bpe

    rng = random.Random(5)
    texts = [prose(rng) for _ in range(8)]
    train_byte_level_bpe(texts, 320, "</s>", tmp_path / "tok.json")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.jsonl").write_text(
        "".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(texts))
    )
    base = '[[sources]]\nname = "d"\npaths = ["d"]\nformat = "jsonl"\n[output]\nversion = "2026.02.04"\n'
    (tmp_path / "p.toml").write_text(base + '[tokenizer]\npath = "tok.json"\neos = "</s>"\n')
    path = run_pipeline(load_pipeline_config(tmp_path / "p.toml"), Home.resolve(tmp_path / "home"))
    store = Store(path)
    assert store.manifest.tokenizer.fingerprint == tokenizer_fingerprint(tmp_path / "tok.json")
    assert store.manifest.tokenizer.vocab_size == 320
    (tmp_path / "q.toml").write_text(base.replace("2026.02.04", "2026.02.05") + '[tokenizer]\npath = "tok.json"\n')
    with pytest.raises(ConfigError, match=r"q\.toml: field 'tokenizer\.eos'"):
        load_pipeline_config(tmp_path / "q.toml")


@pytest.mark.slow
def test_a_run_that_removes_everything_is_an_error_naming_the_stages(tmp_path):
    """60 distinct documents, every one too short: the run stops after the filters with what removed them, not
    with "8 domains need as many documents; the sample has 0" after fitting a tokenizer on nothing."""
    import pytest

    from pipeline.runner import PipelineError

    (tmp_path / "d").mkdir()
    lines = [json.dumps({"id": str(i), "text": f"too short, number {i}"}) + "\n" for i in range(60)]
    (tmp_path / "d" / "a.jsonl").write_text("".join(lines))
    (tmp_path / "p.toml").write_text(
        '[[sources]]\nname = "d"\npaths = ["d"]\nformat = "jsonl"\nfilters = ["gopher_quality"]\n'
        '[tokenizer]\nvocab_size = 300\n[output]\nversion = "2026.02.06"\n[domains]\nk = 8\n'
    )
    with pytest.raises(PipelineError) as raised:
        run_pipeline(load_pipeline_config(tmp_path / "p.toml"), Home.resolve(tmp_path / "home"))
    message = str(raised.value)
    assert "60 read, removed by gopher_quality 60 (gopher_short_doc 60)" in message and "[filters.<name>]" in message
    assert "\n" not in message and "domains" not in message
    assert not any((tmp_path / "home").rglob("tokenizer.json"))  # stopped before fitting anything on nothing


def test_a_process_loads_each_tokenizer_file_once_and_again_when_it_changes(tmp_path):
    """A worker runs many tasks: they share one loaded tokenizer, and a rewritten file is loaded anew."""
    from pipeline.steps.tokenize.tokenization import load_tokenizer, train_byte_level_bpe

    path = train_byte_level_bpe(["alpha beta gamma"] * 20, 300, "<eos>", tmp_path / "tokenizer.json")
    first = load_tokenizer(path)
    assert load_tokenizer(tmp_path / "." / "tokenizer.json") is first
    train_byte_level_bpe(["delta epsilon zeta eta theta"] * 20, 320, "<eos>", path)
    second = load_tokenizer(path)
    assert second is not first
    assert second.encode("delta").ids != first.encode("delta").ids or second.get_vocab() != first.get_vocab()
