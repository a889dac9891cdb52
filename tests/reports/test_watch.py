"""`report watch`: the run page follows a growing metrics stream and stops when the run is over."""

from __future__ import annotations

import json
import threading
import time

import pytest

from millrace.cli import main
from millrace.errors import ConfigError
from reports import WatchOptions, watch
from reports.run_data import read_script
from testkit import factory


def test_watch_rebuilds_as_the_stream_grows_and_stops_when_finished(small_home, tmp_path):
    home, lines = factory.copy_as_live(small_home, tmp_path / "home", lines=5)
    run_dir = home.run("live")
    seen_steps: list[int] = []
    built = threading.Condition()

    def on_build(event):
        data = read_script(event.page.parent / "data" / "overview.js")
        assert data["records"] == event.records and event.total_steps == 48
        with built:
            seen_steps.append(data["records"])
            built.notify_all()

    def grow():
        # A chunk is appended only once the page shows every line before it: the test waits for the watcher's
        # rebuilds as events instead of racing sleeps against its polling interval.
        written = 5
        with open(run_dir / "metrics.jsonl", "a") as stream:
            for end in (12, 18, len(lines)):
                with built:
                    built.wait_for(lambda w=written: bool(seen_steps) and seen_steps[-1] == w, timeout=20)
                stream.writelines(lines[written:end])
                stream.flush()
                written = end
        with built:
            built.wait_for(lambda: seen_steps[-1] == written, timeout=20)
        factory.set_status(home, "live", "completed")

    writer = threading.Thread(target=grow)
    writer.start()
    result = watch(home, "live", tmp_path / "site", WatchOptions(interval=0.05, timeout=30), on_build=on_build)
    writer.join()
    assert result.reason == "finished" and result.status == "completed"
    assert result.rebuilds >= 3 and seen_steps[0] == 5 and seen_steps[-1] == len(lines) == 24
    assert seen_steps == sorted(seen_steps)
    assert read_script(tmp_path / "site" / "runs" / "live" / "data" / "live.js")["live"] is False  # polling stops
    assert "runs/live/index.html" in (tmp_path / "site" / "index.html").read_text()


def test_watch_forever_stops_at_the_timeout(small_home, tmp_path, capsys):
    home, _ = factory.copy_as_live(small_home, tmp_path / "home")
    code = main(
        [
            "report",
            "watch",
            "live",
            "--home",
            str(home.root),
            "--out",
            str(tmp_path / "site"),
            "--forever",
            "--timeout",
            "0.5",
            "--interval",
            "0.1",
            "--json",
        ]
    )
    assert code == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["stopped"] == "timeout" and payload["rebuilds"] == 1 and payload["status"] == "running"
    assert read_script(tmp_path / "site" / "runs" / "live" / "data" / "live.js")["live"] is True


def test_watch_waits_for_a_run_to_start_only_when_asked(small_home, tmp_path):
    home, _ = factory.copy_as_live(small_home, tmp_path / "home", lines=3)
    result = watch(home, "not-yet", tmp_path / "site", WatchOptions(interval=0.05, timeout=0.3, wait=True))
    assert result.reason == "timeout" and result.rebuilds == 0 and result.status == "not started"

    def start_later():
        time.sleep(0.3)
        factory.set_status(home, "later", "completed", base=home.run("live") / "run.json")

    starter = threading.Thread(target=start_later)
    starter.start()
    result = watch(home, "later", tmp_path / "site", WatchOptions(interval=0.05, timeout=20, wait=True))
    starter.join()
    assert result.reason == "finished" and result.rebuilds == 1


def test_watch_in_a_thread_ends_when_its_stop_event_is_set(small_home, tmp_path):
    home, _ = factory.copy_as_live(small_home, tmp_path / "home", lines=3)
    stop = threading.Event()
    results = []
    follower = threading.Thread(
        target=lambda: results.append(watch(home, "live", tmp_path / "site", WatchOptions(interval=0.05), stop=stop))
    )
    follower.start()
    time.sleep(0.5)
    assert follower.is_alive()  # the run is live: it keeps watching
    stop.set()
    follower.join(timeout=10)
    assert not follower.is_alive() and results[0].reason == "stopped" and results[0].rebuilds == 1


def test_a_non_positive_interval_is_refused_where_the_options_are_made():
    with pytest.raises(ConfigError, match=r"^--interval 0: must be positive$"):
        WatchOptions(interval=0)
