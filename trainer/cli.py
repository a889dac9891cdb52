"""`millrace train CONFIG ...` trains; `millrace train plan CONFIG --gpus N` sizes a config on paper."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from millrace.config import parse_document
from millrace.errors import ConfigError
from millrace.home import Home
from millrace.names import PLAIN_NAME, check_name
from millrace.options import home_option, json_option, print_json, revision_option, run_option
from pipeline.config import TokenizerConfig
from trainer.config import load_train_config, shipped_configs
from trainer.records import RunLabels
from trainer.runs_cli import checked_tags
from trainer.runs_cli import list_command as runs_list_command
from trainer.status import ALERT_EXIT_CODE, existing_run, format_status, run_status
from trainer.train_request import TrainRequest

if TYPE_CHECKING:  # torch loads when a command runs
    from trainer.flops import Plan
    from trainer.loop import RunResult

TRAIN_HELP = """Train the MoE model, or plan a configuration on paper.

\b
  millrace train CONFIG [--mixture M --revision R] [--steps N] [--run NAME]
                        [--checkpoint-every K] [--resume] [--from-run SOURCE]
      train CONFIG's model on a built mixture (same as `millrace train run CONFIG ...`); CONFIG
      is a TOML file or a shipped config's name (tiny, micro-ladder, ...: `millrace train configs`);
      the run's files go to $MILLRACE_HOME/runs/<run>/ (run.json, metrics.jsonl,
      checkpoints/). Under torchrun it runs data + expert parallel.
      --from-run SOURCE branches: a new run from SOURCE's checkpoint on SOURCE's revision or
      one continuing it (many proxies from one shared checkpoint).
  millrace train plan CONFIG --gpus N [--gpus-per-node G] [--json]
      a runnable data x expert layout, parameters, FLOPs, memory per GPU and days for CONFIG,
      without training.
  millrace train configs [--json]
      the shipped configs, which CONFIG may name from anywhere (`millrace train tiny`).
  millrace train list [--json]
      the runs under $MILLRACE_HOME/runs (same as `millrace runs list`).
  millrace train status RUN [--json]
      the run's state, last step, latest evaluation and active alerts; exits 3
      while an alert is active.
  millrace train explain RUN --step N [--decode] [--json]
      what happened at step N: the batch's cells and sources, the loss per cell
      against its running mean, and which parameter groups moved.

See `millrace train run --help`, `train plan --help` and `train status --help` for every option.
"""


class TrainGroup(click.Group):
    """A group whose first argument, when it is not a subcommand, is the training config."""

    default_command = "run"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


@click.group(cls=TrainGroup, help=TRAIN_HELP, context_settings={"help_option_names": ["-h", "--help"]})
def train() -> None:
    pass


@train.command("run")
@click.argument("config", metavar="CONFIG")
@click.option("--mixture", type=PLAIN_NAME, default=None, help="Mixture name (default: the config's data.mixture).")
@revision_option("Mixture revision (default: the config's data.revision).", default=None)
@click.option(
    "--steps",
    type=click.IntRange(min=1),
    default=None,
    help="Stop after this many steps in all (default: the learning-rate horizon, which is the config's "
    "`steps`, else the manifest's total steps).",
)
@run_option(
    "Run name: files under runs/<run>/ (default: CONFIG-MIXTURE-REVISION). Under torchrun spell it "
    "--run-name: torchrun's own parser takes --run for an abbreviation of its --run-path.",
    default=None,
)
@click.option(
    "--checkpoint-every",
    type=click.IntRange(min=0),
    default=None,
    help="Write a checkpoint every K steps (default: the config's checkpoint.every; 0: only at the end).",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue from the run's latest checkpoint (from step 0 if it has none). With a --revision that "
    "continues the run's revision, the run switches mixture, from a checkpoint at or before its at_step.",
)
@click.option(
    "--from-run",
    type=PLAIN_NAME,
    default=None,
    help="Branch: start from run NAME's newest checkpoint usable here (weights, optimiser, router biases, "
    "counters, loader position), under this --run's own name. NAME must have trained this --revision or one "
    "it continues (the checkpoint at or before the step where they part); the new run takes NAME's records "
    "up to that step. Once this run has its own checkpoint, --resume continues from that.",
)
@click.option(
    "--allow-config-change",
    is_flag=True,
    help="With --resume: accept optimiser, schedule or other training settings that differ from the "
    "checkpoint's (each change is recorded in run.json). A model shape change is always refused.",
)
@click.option(
    "--trust-unverified",
    is_flag=True,
    help="With --resume: load a checkpoint that has no digests.json (one written before checkpoints were "
    "digested), whose files cannot be checked. Without it such a checkpoint is refused.",
)
@click.option(
    "--tag",
    "tags",
    multiple=True,
    help="A word to find the run by (repeatable): added to the tags in run.json, shown and searched on the runs "
    "index; `millrace runs tag` changes them later.",
)
@click.option(
    "--note",
    default=None,
    help="What the run is for, in words: its notes in run.json (replacing earlier ones), shown and searched on "
    "the runs index; `millrace runs note` changes them later.",
)
@click.option("--no-progress", is_flag=True, help="No progress bar (logs only).")
@json_option
@home_option
def run_command(
    home: Home,
    config: str,
    mixture: str | None,
    revision: str | None,
    steps: int | None,
    run_name: str | None,
    checkpoint_every: int | None,
    resume: bool,
    from_run: str | None,
    allow_config_change: bool,
    trust_unverified: bool,
    tags: tuple[str, ...],
    note: str | None,
    no_progress: bool,
    as_json: bool,
) -> None:
    """Train CONFIG's model on a built mixture, fed by the loader.

    CONFIG is a TOML file, or the name of a config millrace ships (`tiny`; `millrace train configs` lists
    them, with where they are)."""
    labels = RunLabels(tags=list(checked_tags(tags)), notes=note)  # refused before torch is imported
    from trainer.loop import train as train_fn  # lazy: command body: `millrace --help` loads no torch

    request = TrainRequest(
        mixture=mixture,
        revision=revision,
        steps=steps,
        run=run_name,
        checkpoint_every=checkpoint_every,
        resume=resume,
        progress=not no_progress,
        allow_config_change=allow_config_change,
        from_run=from_run,
        trust_unverified=trust_unverified,
        labels=labels,
    )
    result = train_fn(config, home, request)
    _report_run(result, as_json)


def _report_run(result: RunResult, as_json: bool) -> None:
    """What `train run` prints when training returns: the JSON record, or one line for this rank."""
    if as_json:
        print_json(
            {
                "run": result.run,
                "run_dir": str(result.run_dir),
                "rank": result.rank,
                "start_step": result.start_step,
                "end_step": result.end_step,
                "steps_run": len(result.losses),
                "first_loss": result.losses[0] if result.losses else None,
                "last_loss": result.losses[-1] if result.losses else None,
                "seconds": round(result.seconds, 3),
            }
        )
    elif result.losses and result.rank:  # its node may have no run directory: rank 0 writes the files
        click.echo(
            f"run {result.run}, rank {result.rank}: steps {result.start_step}..{result.end_step} done; rank 0 "
            f"writes the run's files ({result.files}, on its node unless shared)"
        )
    elif result.losses:
        click.echo(
            f"run {result.run}: steps {result.start_step}..{result.end_step}, loss {result.losses[0]:.4f} -> "
            f"{result.losses[-1]:.4f} in {result.seconds:.1f}s; files in {result.run_dir}"
        )
    else:
        click.echo(f"run {result.run}: already at step {result.end_step}; nothing to do ({result.run_dir})")


train.add_command(runs_list_command, "list")


@train.command("configs")
@json_option
def configs_command(as_json: bool) -> None:
    """The training configs millrace ships: each one's name (what CONFIG may say, from any directory) and file."""
    shipped = {name: str(path) for name, path in shipped_configs().items()}
    if as_json:
        print_json({"configs": shipped})
        return
    width = max((len(name) for name in shipped), default=0)
    for name, path in shipped.items():
        click.echo(f"{name:<{width}}  {path}")


def fmt_params(count: float) -> str:
    """Parameters in the unit that suits them: 535.12 B, 1.31 M, 912 K."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= size:
            return f"{count / size:,.2f} {unit}"
    return f"{count:,.0f}"


# spec files that live beside the training configs but are planned by another command
OTHER_SPECS = {
    "ladder": ("a ladder config", "millrace ladder plan"),
    "search": ("a mixture search spec", "millrace mix search plan"),
}


def refuse_other_spec(config: str) -> None:
    """A ladder or search spec given where a training config belongs: one line naming the command for it."""
    document = parse_document(Path(config))
    for key, (what, command) in OTHER_SPECS.items():
        if key in document:
            raise ConfigError(f"{config}: {what}, not a training config; plan it with: {command} {config}")


@train.command("plan")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--gpus", type=click.IntRange(min=1), default=None, help="GPUs (default: the config's plan.gpus).")
@click.option("--tokens", type=float, default=None, help="Token budget (default: the config's plan.tokens).")
@click.option(
    "--mfu",
    type=click.FloatRange(0, 1, min_open=True),
    default=None,
    help="Model FLOPs utilisation assumed for the duration (default: the config's plan.mfu).",
)
@click.option(
    "--gpus-per-node",
    type=click.IntRange(min=1),
    default=None,
    help="GPUs per node or NVLink domain; an expert group never straddles one unevenly "
    "(default: the config's plan.gpus_per_node, 0 there meaning all GPUs in one node).",
)
@click.option(
    "--vocab-size",
    type=click.IntRange(min=1),
    default=None,
    help="Vocabulary for a config whose model.vocab_size is 0 (taken from the store when training; "
    "default here: the pipeline's default tokenizer size).",
)
@json_option
@home_option
def plan_command(
    home: Home,
    config: str,
    gpus: int | None,
    tokens: float | None,
    mfu: float | None,
    gpus_per_node: int | None,
    vocab_size: int | None,
    as_json: bool,
) -> None:
    """A runnable data x expert layout for the GPUs (those it leaves idle, the loader's world), parameters,
    FLOPs, memory per GPU with and without activation checkpointing, and days, for CONFIG on paper."""
    from trainer.flops import plan  # lazy: command body: `millrace --help` stays light

    refuse_other_spec(config)
    loaded = load_train_config(config)
    assumed = None
    if vocab_size or not loaded.model.vocab_size:
        assumed = vocab_size or TokenizerConfig().vocab_size
        loaded = loaded.model_copy(update={"model": loaded.model.model_copy(update={"vocab_size": assumed})})
    result = plan(loaded, gpus=gpus, tokens=tokens, mfu=mfu, gpus_per_node=gpus_per_node)
    if as_json:
        print_json({"config": config, "vocab_size": loaded.model.vocab_size, **result.as_dict()})
        return
    click.echo(f"plan for {config}")
    if assumed is not None:
        why = (
            "from --vocab-size"
            if vocab_size
            else (
                "the pipeline's default tokenizer; the config's 0 means the "
                "store's, set when training; --vocab-size to change"
            )
        )
        click.echo(f"  vocabulary {assumed:,} ({why})")
    rows = _plan_rows(result, loaded.data.micro_batches)
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        click.echo(f"  {name:<{width}}  {value}")


def _plan_rows(result: Plan, micro_batches: int) -> list[tuple[str, str]]:
    """`train plan`'s table: parameters, FLOPs, budget, layout, memory per GPU and days, one line each."""
    p, lay, mem = result.params, result.layout, result.memory
    return [
        ("total parameters", fmt_params(p.total)),
        ("active parameters per token", fmt_params(p.active)),
        ("  of which routed experts (top-k)", f"{fmt_params(p.routed_active)} of {fmt_params(p.routed_experts)}"),
        ("  attention / embedding+output", f"{fmt_params(p.attention)} / {fmt_params(p.embedding + p.output)}"),
        (
            "FLOPs per token (6N + attention)",
            f"{result.flops_per_token:.4g} (attention {result.attention_flops_per_token:.3g}, seq {result.seq_len})",
        ),
        ("token budget", f"{result.tokens:.4g}"),
        (
            "steps",
            f"{result.steps:,} of {result.global_batch:,} x {result.seq_len} = {result.trained_tokens:.4g} tokens",
        ),
        (
            "weights: compute / master",
            f"{result.param_dtype} (what FSDP gathers) / {result.master_dtype} (sharded, updated by AdamW)",
        ),
        ("total training FLOPs", f"{result.total_flops:.4g}"),
        (
            "layout (data x expert parallel)",
            f"{lay.data_parallel} x {lay.expert_parallel} = {lay.gpus_used:,} of {lay.gpus:,} GPUs, "
            f"{lay.gpus_idle:,} idle; "
            f"{lay.ranks_per_node} ranks on each of {lay.nodes} nodes of {lay.gpus_per_node}",
        ),
        (
            "loader world / sequences per GPU",
            f"{lay.loader_world:,} / {result.global_batch // lay.gpus_used:,} (micro-batches {micro_batches})",
        ),
        (
            "per GPU: weights / grads / optimiser",
            f"{result.weights_gib_per_gpu:.2f} / {result.grads_gib_per_gpu:.2f} / "
            f"{result.optimizer_gib_per_gpu:.2f} GiB "
            f"(= {result.state_gib_per_gpu:.2f} GiB)",
        ),
        ("per GPU: gathered weights / logits", f"{mem.gathered:.2f} / {mem.logits:.2f} GiB"),
        (
            "per GPU: activations",
            f"{mem.activations:,.1f} GiB, {mem.activations_checkpointed:,.1f} GiB with activation checkpointing",
        ),
        (
            "per GPU: total",
            f"{mem.total:,.1f} GiB ({_fits(mem.total, mem.gpu_memory)}), "
            f"{mem.total_checkpointed:,.1f} GiB checkpointed ({_fits(mem.total_checkpointed, mem.gpu_memory)})",
        ),
        ("days", f"{result.days:.1f} at {result.mfu:.0%} MFU of {result.peak_flops_per_gpu:.3g} FLOP/s per GPU"),
    ]


def _fits(gib: float, capacity: float) -> str:
    return f"fits {capacity:g} GiB" if gib <= capacity else f"over {capacity:g} GiB"


@train.command("status")
@click.argument("run")
@json_option
@home_option
def status_command(home: Home, run: str, as_json: bool) -> None:
    """State, last step, latest evaluation and active alerts of RUN (a name under runs/, or a run directory).

    Exit status 3 while any alert is active (for cron jobs and Slurm scripts), 0 otherwise."""
    try:
        a_directory = Path(run).is_dir() and (Path(run) / "run.json").exists()
    except OSError:  # a name too long for a path: held to the name rule below
        a_directory = False
    run_dir = Path(run) if a_directory else existing_run(home, check_name(run, "RUN"))
    status = run_status(run_dir)
    if as_json:
        print_json(status)
    else:
        click.echo(format_status(status))
    if status["alerts"]:
        click.get_current_context().exit(ALERT_EXIT_CODE)


@train.command("explain")
@click.argument("run")
@click.option(
    "--step",
    type=click.IntRange(min=1),
    required=True,
    help="The metrics step to explain (as `train status` and the run page count them, from 1).",
)
@click.option(
    "--window",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Logged steps before N that make each running mean.",
)
@click.option(
    "--decode",
    is_flag=True,
    help="Also each sequence's first text and, where the store kept its trace, its documents.",
)
@json_option
@home_option
def explain_command(home: Home, run: str, step: int, window: int, decode: bool, as_json: bool) -> None:
    """What happened at step N of RUN: the batch's cells and sources (rebuilt by the loader from the run's
    manifest), each cell's loss against its running mean, and which parameter groups moved (the router bias,
    updated by a rule, apart from the gradient-trained groups)."""
    from trainer.explain import explain, format_explain  # lazy: command body: `millrace --help` stays light

    found = explain(home, run, step, decode=decode, window=window)
    if as_json:
        print_json(found)
    else:
        click.echo(format_explain(found))
