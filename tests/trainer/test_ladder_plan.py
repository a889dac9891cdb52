"""`ladder plan`: the shipped reference ladder reproduces the reference table; the JSON contract; bad files."""

import json
from pathlib import Path

import pytest

from millrace.cli import main as millrace
from trainer.ladder.plan import plan_ladder

REFERENCE = Path(__file__).parents[2] / "trainer" / "configs" / "reference-ladder.toml"
# The reference team's ladder: total params, active params, tokens per rung; the hero's FLOPs.
TABLE = {
    "d768": (1.6e9, 61e6, 48e9),
    "d1024": (4.0e9, 162e6, 128e9),
    "d1536": (11.5e9, 481e6, 381e9),
    "d2048": (27.7e9, 1.2e9, 926e9),
}
HERO_FLOPS = 2.7e24


def test_reference_ladder_reproduces_the_table_and_the_hero_flops(home):
    plan = plan_ladder(REFERENCE, home)
    assert [r.name for r in plan.rungs] == list(TABLE)
    for rung in plan.rungs:
        total, active, tokens = TABLE[rung.name]
        assert abs(rung.total_params / total - 1) < 0.10, (rung.name, rung.total_params)
        assert abs(rung.active_params / active - 1) < 0.10, (rung.name, rung.active_params)
        assert abs(rung.tokens / tokens - 1) < 0.10, (rung.name, rung.tokens)
        assert rung.config.moe.n_routed_experts == 384 and rung.config.moe.top_k == 8
        assert rung.config.moe.n_shared_experts == 2 and rung.seq_len == 4096
    assert [r.batch for r in plan.rungs] == [1024, 2048, 6144, 11264]
    assert [r.layers for r in plan.rungs] == [8, 12, 16, 22]
    assert abs(plan.target.flops / HERO_FLOPS - 1) < 0.05, plan.target.flops
    assert plan.target.d_model == 6144 and plan.target.layers == 48


def test_plan_json_has_the_contract_shape(home, capsys):
    assert millrace(["ladder", "plan", str(REFERENCE), "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    keys = {
        "name",
        "d_model",
        "layers",
        "params",
        "tokens",
        "steps",
        "batch",
        "lr",
        "flops",
        "seconds_here",
        "raised_from",
    }
    for rung in body["rungs"] + [body["target"]]:
        assert set(rung) == keys and set(rung["params"]) == {"total", "active"}
        assert rung["steps"] == round(rung["tokens"] / (rung["batch"] * 4096))
        assert rung["seconds_here"] > 0 and rung["raised_from"] is None
    assert body["store"] is None  # no reference store here: a plan on paper, not checked
    flops = [r["flops"] for r in body["rungs"]]
    assert flops == sorted(flops)
    # a learning-rate rule in width and batch: wider and smaller-batch rungs step less far
    assert body["target"]["lr"] == pytest.approx(2.2e-4)


@pytest.mark.parametrize(
    "edit, message",
    [
        (("widths = [768, 1024, 1536, 2048]", "widths = [1024, 768, 1536, 2048]"), "strictly increasing"),
        (("layers = [8, 12, 16, 22]", "layers = [8, 12, 16]"), "'layers' has 3 entries for 4 widths"),
        (("tokens_per_active_param = 791", "tokens_per_active_parm = 791"), "rules.tokens_per_active_param"),
        (('config = "535b-a23b.toml"\n\n[mixture]', 'config = "missing.toml"\n\n[mixture]'), "missing.toml"),
    ],
)
def test_a_bad_ladder_file_is_one_line_naming_the_field(home, tmp_path, capsys, edit, message):
    text = REFERENCE.read_text().replace(*edit)
    assert text != REFERENCE.read_text()
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert millrace(["ladder", "plan", str(path)]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and str(path) in err, err
