"""The built manifest a run trained on, for the training page's expected counts.

How many sequences of each cell a run should have drawn after n steps is the manifest's own per-cell plan
(`BuiltManifest.cell_plan(n)`); `realised − expected` is the mixing error the page shows (the reference run
logged declared weights, not what was sampled).
"""

from __future__ import annotations

import logging
from pathlib import Path

from millrace.errors import ArtifactError, ConfigError
from millrace.home import Home
from mixtures.manifest import MANIFEST_FILE, BuiltManifest, read_manifest
from trainer.records import RunRecord

log = logging.getLogger(__name__)


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
