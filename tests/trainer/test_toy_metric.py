"""The newcomer's toy metric: logged by the trainer and drawn on the training page."""

from reports import build_run_page
from reports.run_data import read_script
from trainer.loop import train
from trainer.records import read_metrics


def test_seconds_per_million_tokens_is_logged_and_reaches_the_page(built, tiny_config, tmp_path):
    home, _ = built
    config = tiny_config("toy", eval={"enabled": False}, samples={"enabled": False}, metrics={"log_every": 1})
    train(config, home, steps=3, run="toy")
    records = read_metrics(home.run("toy"))
    assert [r["seconds_per_million_tokens"] > 0 for r in records] == [True] * 3
    page = build_run_page(home, "toy", tmp_path / "site")
    series = read_script(page.parent / "data" / "overview.js")["series"]["seconds_per_million_tokens"]
    assert series["v"] == [float(f"{r['seconds_per_million_tokens']:.7g}") for r in records]
