"""Drill: fuzzed pipeline and training configs are either accepted or refused with one line
that names the field; never a traceback, never an artifact left behind.
(Revision files get the same treatment in tests/mixtures/test_revision_fuzz.py.)"""

import copy
import math
import tomllib
from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from millrace.cli import main as millrace
from millrace.errors import ConfigError
from pipeline.config import load_pipeline_config
from testkit.corpus import config_text, make_corpus
from testkit.fuzz import write_toml

REPO = Path(__file__).resolve().parents[2]
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

values = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=10),
    st.lists(st.one_of(st.integers(-3, 3), st.text(max_size=4)), max_size=3),
    st.dictionaries(st.text(min_size=1, max_size=6), st.integers(-2, 2), max_size=2),
    st.just("DELETE"),
)


def key_paths(doc, prefix=()):
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield prefix + (key,)
            yield from key_paths(value, prefix + (key,))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            yield prefix + (index,)
            yield from key_paths(value, prefix + (index,))


def mutate(doc, edits):
    doc = copy.deepcopy(doc)
    for path, value in edits:
        parent = doc
        for key in path[:-1]:
            try:
                parent = parent[key]
            except (KeyError, IndexError, TypeError):
                break
        else:
            if isinstance(parent, dict):
                if value == "DELETE":
                    parent.pop(path[-1], None)
                else:
                    parent[path[-1]] = value
            elif (
                isinstance(parent, list) and isinstance(path[-1], int) and path[-1] < len(parent) and value != "DELETE"
            ):
                parent[path[-1]] = value
    return doc


def edits_for(base, extra_keys):
    paths = list(key_paths(base)) + [(k,) for k in extra_keys]
    paths += [p + (k,) for p in key_paths(base) if isinstance(_get(base, p), dict) for k in extra_keys]
    return st.lists(st.tuples(st.sampled_from(paths), values), min_size=1, max_size=3)


def _get(doc, path):
    for key in path:
        doc = doc[key]
    return doc


def assert_one_line_naming(message, path):
    assert "\n" not in message.strip(), message
    assert "Traceback" not in message
    assert str(path) in message or "field" in message or "'" in message, message


@pytest.fixture(scope="module")
def pipeline_base(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz-pipeline")
    corpus = make_corpus(root / "corpus", documents=6)
    return tomllib.loads(config_text(corpus) + '\n[domains]\nk = 2\n\n[quality]\nreference_sources = ["articles"]\n')


PIPELINE_BASE_KEYS = ["bogus", "paths", "kind", "filters", "tasks", "vocab_size", "k", "buckets"]


@pytest.mark.slow
@FUZZ
@given(data=st.data())
def test_fuzzed_pipeline_configs_are_accepted_or_refused_in_one_line(pipeline_base, tmp_path, data):
    doc = mutate(pipeline_base, data.draw(edits_for(pipeline_base, PIPELINE_BASE_KEYS)))
    path = tmp_path / "pipeline.toml"
    if not write_toml(path, doc):
        return
    before = sorted(tmp_path.rglob("*"))
    try:
        load_pipeline_config(path)
    except ConfigError as exc:
        assert_one_line_naming(str(exc), path)
    assert sorted(tmp_path.rglob("*")) == before, "loading a config must write nothing"


TRAIN_BASE = tomllib.loads((REPO / "trainer" / "configs" / "tiny.toml").read_text())
TRAIN_KEYS = ["bogus", "top_k", "n_layers", "lr", "gpus", "seq_len"]


@pytest.mark.slow
@FUZZ
@given(data=st.data())
def test_fuzzed_training_configs_are_accepted_or_refused_in_one_line(tmp_path, capsys, data):
    doc = mutate(TRAIN_BASE, data.draw(edits_for(TRAIN_BASE, TRAIN_KEYS)))
    path = tmp_path / "train.toml"
    if not write_toml(path, doc):
        return
    home = tmp_path / "home"
    capsys.readouterr()
    code = millrace(["--home", str(home), "train", "plan", str(path), "--gpus", "8", "--json"])
    out, err = capsys.readouterr()
    if code == 0:
        assert out.strip().startswith("{")
        return
    assert code == 2, (code, err)
    assert_one_line_naming(err, path)
    assert not home.exists() or not any(home.rglob("*")), "a refused config must leave no artifact"


def test_nan_learning_rate_is_named(tmp_path, capsys):
    doc = copy.deepcopy(TRAIN_BASE)
    doc["optimizer"]["lr"] = math.nan
    path = tmp_path / "train.toml"
    path.write_text(tomli_w.dumps(doc))
    assert millrace(["train", "plan", str(path), "--gpus", "1"]) == 2
    assert "optimizer.lr" in capsys.readouterr().err


BAD_TRAIN_VALUES = {  # each validated before and then crashed or hung a run
    "optimizer.lr": math.inf,
    "optimizer.weight_decay": math.inf,
    "moe.bias_update_rate": math.inf,
    "model.init_std": math.nan,
    "moe.route_scale": math.nan,
    "model.norm_eps": -1.0,
    "model.rope_theta": 0.0,
    "samples.max_new_tokens": 10**9,
    "samples.temperatures": [0.0, 1e-300],
    "optimizer.eps": 0.0,
    "optimizer.betas": [0.9, 1.0],
}


@pytest.mark.parametrize(
    ("field", "value"), [("optimizer.lr", 1e308), ("dedup.rows", 10**9), ("executor.tasks", 10**9)]
)
def test_a_huge_value_is_refused_naming_its_field(pipeline_base, tmp_path, capsys, field, value):
    """Each was accepted, then overflowed (a traceback) or hung (a billion executor tasks)."""
    section, key = field.split(".")
    if section == "optimizer":
        doc, command = copy.deepcopy(TRAIN_BASE), ["train", "plan"]
    else:
        doc, command = copy.deepcopy(pipeline_base), ["pipeline", "run"]
    doc.setdefault(section, {})[key] = value
    path = tmp_path / "config.toml"
    path.write_text(tomli_w.dumps(doc))
    capsys.readouterr()
    assert millrace(["--home", str(tmp_path / "home"), *command, str(path)]) == 2
    err = capsys.readouterr().err
    assert f"'{field}'" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


@pytest.mark.parametrize("field", list(BAD_TRAIN_VALUES))
def test_each_bad_training_value_is_refused_naming_its_field(tmp_path, capsys, field):
    doc = copy.deepcopy(TRAIN_BASE)
    section, key = field.split(".")
    doc.setdefault(section, {})[key] = BAD_TRAIN_VALUES[field]
    path = tmp_path / "train.toml"
    path.write_text(tomli_w.dumps(doc))
    capsys.readouterr()
    assert millrace(["--home", str(tmp_path / "home"), "train", "plan", str(path), "--gpus", "1"]) == 2
    err = capsys.readouterr().err
    assert f"'{field}" in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


def test_a_tiny_revision_temperature_is_refused_naming_its_field(tmp_path):
    from mixtures.revision import load_revision

    text = (REPO / "mixtures" / "revisions" / "default" / "natural.toml").read_text()
    doc = tomllib.loads(text)
    doc["phases"][0].pop("weights", None)
    doc["phases"][0].update({"strategy": "temperature", "temperature": 1e-300})
    path = tmp_path / "natural.toml"
    path.write_text(tomli_w.dumps(doc))
    with pytest.raises(ConfigError, match=r"temperature") as caught:
        load_revision(path)
    assert "\n" not in str(caught.value)


def test_a_small_legal_temperature_gives_finite_weights():
    """tokens^(1/T) overflowed a float for T = 0.01 and 1e12 tokens (OverflowError); now taken in logs."""
    from mixtures.strategies import temperature

    weights = temperature({"a": 10**12, "b": 10**11, "c": 5}, 0.01)
    assert weights["a"] == 1 and 0 <= weights["b"] < 1e-90 and weights["c"] == 0
    assert temperature({"a": 400, "b": 100}, 2.0)["b"] == pytest.approx(0.5)
