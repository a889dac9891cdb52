"""`train status` shows a run whose records are being pushed to its `[run] url` as such, with how long it has
taken: a push that hangs is seen, not read as `running` for minutes."""

import json

from millrace.cli import main as millrace
from testkit import factory
from trainer.run_url import RemoteDir, marked_push, push_records


def test_a_run_in_a_push_shows_it_and_the_marker_goes_with_the_push(small_home, tmp_path, capsys):
    home, _ = factory.copy_as_live(small_home, tmp_path / "home")
    run_dir = home.run("live")
    remote = RemoteDir(f"file://{tmp_path / 'bucket' / 'live'}")
    with marked_push(run_dir, remote):
        assert millrace(["train", "status", "live", "--home", str(home.root), "--json"]) == 0
        pushing = json.loads(capsys.readouterr().out)["pushing"]
        assert pushing["url"] == str(remote) and 0 <= pushing["seconds"] < 60
        assert millrace(["train", "status", "live", "--home", str(home.root)]) == 0
        assert f"pushing its records to {remote} for " in capsys.readouterr().out
    (tmp_path / "bucket" / "live").mkdir(parents=True)
    push_records(run_dir, remote)
    assert millrace(["train", "status", "live", "--home", str(home.root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pushing"] is None
    assert sorted(p.name for p in (tmp_path / "bucket" / "live").iterdir()) == ["metrics.jsonl", "run.json"]
