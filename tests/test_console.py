"""One line per event; whole URLs and paths; log lines that do not collide with bars."""

from __future__ import annotations

import io
import logging
from pathlib import Path

from rich.console import Console

from millrace.cli import main
from millrace.home import Home

REFERENCE_STATS = Path(__file__).parents[1] / "mixtures" / "examples" / "reference" / "available_tokens.json"


def test_demo_prints_urls_and_paths_whole_at_80_columns(tmp_path):
    from demo.run import DemoReport, print_done

    root = tmp_path / ("a-rather-long-directory-name-that-a-user-might-really-have" * 2) / "home"
    home = Home(root)
    page = (home.site / "local" / "2026.12.01" / "index.html").as_uri() + "?revision=uniform-sampling"
    report = DemoReport(
        home=root, store=home.store("local", "2026.12.01"), run=home.run("demo"), page=page, seconds={"total": 1.0}
    )
    out = io.StringIO()
    print_done(Console(file=out, width=80), home, report)
    lines = out.getvalue().splitlines()
    assert f"  {page}" in lines
    assert f"store:    {home.store('local', '2026.12.01')}" in lines
    assert f"  {(home.site / 'runs' / 'demo' / 'index.html').as_uri()}" in lines


def test_demo_step_headings_are_whole_lines_off_a_terminal():
    from demo.run import DemoReport, step

    what = "fit the cells, tokenize and place every document of the corpus into its domain and quality bucket"
    out = io.StringIO()
    with step(Console(file=out, width=80), DemoReport(home=Path(".")), "pipeline", what):
        pass
    assert out.getvalue().splitlines()[0] == f"== pipeline: {what}"


def test_each_action_is_one_line_not_a_log_line_and_a_human_line(tmp_path, capsys):
    base = ["--home", str(tmp_path)]
    assert (
        main([*base, "store", "from-stats", str(REFERENCE_STATS), "--name", "reference", "--version", "2025.06.01"])
        == 0
    )
    for argv in (
        ["mix", "build", "reference", "--revision", "two-phase"],
        ["mix", "new", "reference", "--revision", "again", "--phase", "main:1T"],
        ["report", "build"],
    ):
        assert main([*base, *argv]) == 0
        out, err = capsys.readouterr()
        assert out.strip() and err == "", (argv, err)


def test_log_lines_go_to_the_stderr_of_the_moment(monkeypatch):
    """While a rich bar is live, sys.stderr is rich's proxy, which prints a log line above the bar."""
    from millrace.cli import CurrentStderrHandler

    handler = CurrentStderrHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    proxy = io.StringIO()
    monkeypatch.setattr("sys.stderr", proxy)
    handler.emit(logging.LogRecord("x", logging.INFO, __file__, 1, "checkpoint written", None, None))
    assert proxy.getvalue() == "checkpoint written\n"


def test_mix_list_prints_each_revision_file_whole(tmp_path, capsys, monkeypatch):
    """In an 80-column terminal a table would wrap the paths; they must stay whole to be copied."""
    import sys

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert main(["--home", str(tmp_path / ("long-directory-name-" * 5)), "mix", "list"]) == 0
    out = capsys.readouterr().out
    from mixtures.catalog import SHIPPED

    for path in sorted(SHIPPED.glob("*/*.toml")):
        assert any(line.endswith(str(path)) for line in out.splitlines()), (path, out)
