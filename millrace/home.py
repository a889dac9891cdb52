"""The artifact root ($MILLRACE_HOME) and where each kind of artifact lives under it.

    stores/<name>/<version>/                 a token store version (see pipeline.store)
    stores/<name>/<version>/mixtures/<mixture>/<revision>/manifest.json   built mixtures
    mixtures/<mixture>/<revision>.toml       revision files written by `mix new`
    work/<name>/<version>/                   pipeline intermediates (resumable)
    runs/<run>/                              training runs (metrics.jsonl, checkpoints)
    site/                                    the static report site
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_HOME = "./millrace-data"


@dataclass(frozen=True)
class Home:
    root: Path

    @classmethod
    def resolve(cls, override: str | Path | None = None) -> "Home":
        return cls(Path(override or os.environ.get("MILLRACE_HOME") or DEFAULT_HOME).resolve())

    @property
    def stores(self) -> Path:
        return self.root / "stores"

    def store(self, name: str, version: str) -> Path:
        return self.stores / name / version

    def work(self, name: str, version: str) -> Path:
        return self.root / "work" / name / version

    def built_mixture(self, store_name: str, store_version: str, mixture: str, revision: str) -> Path:
        return self.store(store_name, store_version) / "mixtures" / mixture / revision

    @property
    def revisions(self) -> Path:
        return self.root / "mixtures"

    def run(self, name: str) -> Path:
        return self.root / "runs" / name

    @property
    def site(self) -> Path:
        return self.root / "site"
