"""`python -m trainer.torchrun ARGS`: PyTorch's torchrun (`torch.distributed.run`, the same arguments) whose own end
is one line.

Killed (a Slurm time limit, `scancel`), torchrun passes the signal on to its ranks, which finish their step,
checkpoint and exit 143 with the command that continues the run (`trainer.loop`); torchrun itself then raised
`SignalException`: a traceback and exit 1, burying that line. Here the launcher says it was stopped, in one
line, and exits 128 + the signal. A rank that failed said why in its own line; the launcher adds one naming it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable


def main(argv: list[str] | None = None) -> int:
    # lazy: heavy (torch)
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    # torch leaves torchrun's two entry points unannotated: their types, as torchrun's own `main` uses them
    parse: Callable[[list[str] | None], argparse.Namespace] = parse_args
    launch: Callable[[argparse.Namespace], None] = run
    try:
        launch(parse(argv))
    except SignalException as exc:
        print(
            f"terminated: torchrun stopped by {exc.sigval.name} and its ranks with it (a training run checkpoints "
            "and names the command that continues it)",
            file=sys.stderr,
        )
        return 128 + int(exc.sigval)
    except ChildFailedError as exc:
        rank = min(exc.failures)
        failure = exc.failures[rank]
        print(
            f"error: torchrun: rank {rank} exited with status {failure.exitcode} (its own lines say why)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
