"""How many sequences of each cell a run should have drawn after n steps, from its built manifest.

Phases are contiguous in global sample positions and step s covers positions
[s·B, (s+1)·B) (mixtures/manifest.py), so after n steps the positions [0, n·B) are
consumed: every earlier phase whole, and the current one in part. Inside a phase the
loader interleaves cells exactly, so a cell's realised count stays within one sample
of its share of the consumed part: `realised − expected` is the mixing error the page
shows (the reference run logged declared weights, not what was sampled).
"""

from __future__ import annotations

import logging
from pathlib import Path

from millrace.errors import ArtifactError, ConfigError
from millrace.home import Home
from mixtures.manifest import MANIFEST_FILE, BuiltManifest, read_manifest
from trainer.records import RunRecord

log = logging.getLogger(__name__)


def expected_sequences(manifest: BuiltManifest, steps: int) -> dict[str, float]:
    consumed = steps * manifest.global_batch
    expected = dict.fromkeys(manifest.cells, 0.0)
    for phase in manifest.phases:
        part = min(max(consumed - phase.start_position, 0), phase.sequences)
        if not part:
            continue
        for cell, count in phase.counts.items():
            expected[cell] = expected.get(cell, 0.0) + count * part / phase.sequences
    return expected


def run_manifest(run_dir: Path, run: RunRecord) -> BuiltManifest | None:
    """The manifest a run trained on: run.json's `manifest_path`, else where the home keeps it.

    None (with a log line) when it is gone or is not the one the run pinned: the page
    then shows the plan from run.json alone.
    """
    candidates = []
    if run.manifest_path:
        candidates.append(Path(run.manifest_path))
    if run.store is not None and run.mixture and run.revision:
        try:
            built = Home.of_run(run_dir).built_mixture(run.store.name, run.store.version, run.mixture, run.revision)
            candidates.append(built / MANIFEST_FILE)
        except ConfigError:  # a name no store could have: there is no such manifest
            pass
    for path in candidates:
        if not path.exists():
            continue
        try:
            manifest, digest = read_manifest(path)
        except ArtifactError as exc:
            log.warning("%s", exc)
            continue
        if run.manifest_hash and digest != run.manifest_hash:
            log.warning("%s: hash %s is not the run's %s; expected counts not shown", path, digest, run.manifest_hash)
            continue
        return manifest
    return None
