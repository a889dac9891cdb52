"""The `millrace` command: one subcommand group per room, loaded only when used."""

from __future__ import annotations

import importlib
import sys

import click

from millrace import __version__
from millrace.errors import Interrupted, MillraceError, Terminated, disk_full_cause
from millrace.logs import CurrentStderrHandler  # noqa: F401  (re-exported: tests and older imports name it here)
from millrace.logs import configure as configure_logging
from millrace.signals import TERMINATED_EXIT_CODE, TerminateSignal, sigterm_as_interrupt

# subcommand -> "module:attribute"; imported lazily so `millrace report` never imports torch.
SUBCOMMANDS = {
    "corpus": ("pipeline.corpus.cli:corpus", "Build corpora (the embedded default corpus from this machine)."),
    "pipeline": ("pipeline.cli:pipeline", "Run the corpus pipeline into a token store."),
    "store": ("pipeline.store.cli:store", "Inspect, verify and create token stores."),
    "mix": ("mixtures.cli:mix", "Write, validate, build, plan and diff mixture revisions."),
    "loader": ("loader.cli:loader", "Look inside the deterministic batch stream."),
    "train": ("trainer.cli:train", "Train the MoE model, or plan a configuration on paper."),
    "ladder": ("trainer.ladder.cli:ladder", "Plan, train, fit and compare scaling ladders."),
    "runs": ("trainer.runs_cli:runs", "List training runs: status, revision, last step and loss."),
    "report": ("reports.cli:report", "Build and watch the static report site."),
    "demo": ("demo.cli:demo", "The main job end to end on the embedded default corpus."),
}
# groups nested under a room's group from a room downstream of it (the mixtures room never imports the search)
NESTED = {"mix": {"search": "trainer.search.cli:search"}}


def load_command(target: str) -> click.Command:
    module_name, attribute = target.split(":")
    command: click.Command = getattr(importlib.import_module(module_name), attribute)
    return command


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in SUBCOMMANDS:
            return None
        command = load_command(SUBCOMMANDS[name][0])
        if isinstance(command, click.Group):
            for child, target in NESTED.get(name, {}).items():
                if child not in command.commands:
                    command.add_command(load_command(target), child)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, help_text) for name, (_, help_text) in SUBCOMMANDS.items()])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--home",
    "home_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Artifact root for every subcommand (default: $MILLRACE_HOME, else ./millrace-data).",
)
@click.option("-v", "--verbose", is_flag=True, help="Log debug messages.")
@click.version_option(__version__, prog_name="millrace")
def cli(home_dir: str | None, verbose: bool) -> None:
    """millrace: corpora to exact training mixtures, streamed into an MoE trainer."""
    configure_logging(verbose)


def main(argv: list[str] | None = None) -> int:
    """Every error a user can act on is one line and an exit status; SIGTERM takes Ctrl-C's path (143)."""
    try:
        with sigterm_as_interrupt(["millrace", *(sys.argv[1:] if argv is None else argv)]):
            code = cli.main(args=argv, prog_name="millrace", standalone_mode=False)
    except Interrupted as exc:
        click.echo(f"{'terminated' if isinstance(exc, Terminated) else 'interrupted'}: {exc}", err=True)
        return exc.exit_code
    except MillraceError as exc:
        click.echo(f"error: {exc}", err=True)
        return exc.exit_code
    except click.exceptions.Abort as exc:  # click turns a KeyboardInterrupt (and so a SIGTERM) into Abort
        if isinstance(exc.__cause__, TerminateSignal):
            click.echo("terminated (SIGTERM): run the same command again to continue", err=True)
            return TERMINATED_EXIT_CODE
        click.echo("aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except KeyboardInterrupt:
        click.echo("interrupted: run the same command again to continue", err=True)
        return 130
    except OSError as exc:
        full = disk_full_cause(exc)
        if full is None:
            raise
        click.echo(f"error: no space left on device writing {full.filename or 'a file'} ({full.strerror})", err=True)
        return 2
    # a command that ends with `ctx.exit(code)` (e.g. `train status` while an alert is active)
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
