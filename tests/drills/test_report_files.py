"""Drill: what a killed `report build` leaves, and a metrics record a report cannot draw.

- A `.tmp` page a SIGKILLed build left half written is removed by the next build (a live
  writer's, moments old, is left alone).
- A malformed alert record in metrics.jsonl is skipped with a warning naming the file and the
  line; the page, `train status` and the site are built."""

import json
import logging
import os
import time

from millrace.artifacts import STALE_TEMPORARY_SECONDS
from millrace.cli import main as millrace
from millrace.home import Home
from testkit import factory


def test_a_killed_builds_temporary_page_is_removed_by_the_next_build(tmp_path, capsys):
    home = Home.resolve(tmp_path / "home")
    site = home.site / "runs" / "gone"
    site.mkdir(parents=True)
    left = site / ".index.html.k1ll3d.tmp"  # what `atomic_output` names its temporary, as a SIGKILL leaves it
    left.write_text("<html><body>half a pa")
    old = time.time() - STALE_TEMPORARY_SECONDS - 60
    os.utime(left, (old, old))
    live = home.site / ".index.html.wr1t1ng.tmp"  # another build's, being written now
    live.write_text("<html>")
    assert millrace(["report", "build", "--home", str(home.root), "--json"]) == 0, capsys.readouterr().err
    assert not left.exists() and live.exists()
    assert (home.site / "index.html").exists()


def test_a_malformed_alert_record_is_skipped_with_a_warning_naming_file_and_line(small_home, tmp_path, capsys, caplog):
    home, _ = factory.copy_as_live(small_home, tmp_path / "home")
    metrics = home.run("live") / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    bad = {
        **records[-1],
        "step": records[-1]["step"] + 1,
        "alerts": {"started": [{"message": "grad norm 9.1 > 2.0"}], "active": ["grad_norm"], "ended": []},
    }
    metrics.write_text(metrics.read_text() + json.dumps(bad) + "\n")
    line = len(records) + 1
    with caplog.at_level(logging.WARNING, logger="reports"):
        assert millrace(["report", "build", "--home", str(home.root), "--json"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    said = [r.getMessage() for r in caplog.records if "malformed alert" in r.getMessage()]
    assert said and set(said) == {
        f"{metrics}:{line}: skipped a malformed alert record (an 'alerts.started' entry "
        "is not an object with a 'name')"
    }, said
    page = (home.site / "runs" / "live" / "index.html").read_text()
    assert "grad norm 9.1" not in page
    assert millrace(["train", "status", "live", "--home", str(home.root), "--json"]) == 3  # grad_norm is active
    status = json.loads(capsys.readouterr().out)
    assert status["alerts"] == [{"name": "grad_norm", "since_step": None}] and status["last_step"] == bad["step"]


def test_a_damaged_run_is_named_and_every_other_page_is_built(small_home, tmp_path, capsys):
    home, _ = factory.copy_as_live(small_home, tmp_path / "home")
    damaged = home.run("damaged")
    damaged.mkdir()
    (damaged / "run.json").write_bytes((home.run("live") / "run.json").read_bytes()[:-30])
    assert millrace(["report", "build", "--home", str(home.root)]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert "Traceback" not in err and len(errors) == 1, err
    assert "run damaged (" in errors[0] and str(damaged / "run.json") in errors[0], errors[0]
    assert (home.site / "runs" / "live" / "index.html").exists() and not (home.site / "runs" / "damaged").exists()
    index = (home.site / "index.html").read_text()
    assert "live" in index
