"""The artifact root ($MILLRACE_HOME) and where each kind of artifact lives under it.

stores/<name>/<version>/                 a token store version (see pipeline.store.format)
stores/<name>/<version>/mixtures/<mixture>/<revision>/manifest.json   built mixtures
mixtures/<mixture>/<revision>.toml       revision files written by `mix new`
work/<name>/<version>/                   pipeline intermediates (resumable)
runs/<run>/                              training runs (metrics.jsonl, checkpoints)
ladders/<ladder>/                        scaling ladders (ladder.json, rung configs)
searches/<search>/                       mixture searches (plan, proxy rows, fit, proposal, validation)
site/                                    the static report site
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from millrace.names import check_name

DEFAULT_HOME = "./millrace-data"


@dataclass(frozen=True)
class Home:
    root: Path

    @classmethod
    def resolve(cls, override: str | Path | None = None) -> Home:
        return cls(Path(override or os.environ.get("MILLRACE_HOME") or DEFAULT_HOME).resolve())

    # Which home, store or run a path is: the inverse of the layout above, kept beside it.
    @classmethod
    def of_store(cls, store_dir: str | Path) -> Home:
        """The home of a store version directory, `<home>/stores/<name>/<version>`."""
        return cls(Path(store_dir).resolve().parents[2])

    @classmethod
    def of_run(cls, run_dir: str | Path) -> Home:
        """The home of a run directory, `<home>/runs/<run>`."""
        return cls(Path(run_dir).resolve().parents[1])

    @staticmethod
    def store_of_built_mixture(path: str | Path) -> Path:
        """The store version directory holding a file of a built mixture,
        `<store>/mixtures/<mixture>/<revision>/<file>`."""
        return Path(path).resolve().parents[3]

    @property
    def stores(self) -> Path:
        return self.root / "stores"

    def store_versions(self, name: str | None = None) -> list[Path]:
        """Every store version directory under the home (one holding its store.json), or every version of store
        `name`, sorted."""
        where = check_name(name, "store") if name else "*"
        return sorted(p.parent for p in self.stores.glob(f"{where}/*/store.json"))

    def store(self, name: str, version: str) -> Path:
        return self.stores / check_name(name, "store") / check_name(version, "store version")

    def built_mixtures(
        self, marker: str, store: str | None = None, mixture: str = "*", revision: str = "*"
    ) -> list[Path]:
        """Built mixture directories holding `marker` (the manifest's file name, from its schema module), on any
        store version (or those of store `store`), of any mixture and revision unless named; sorted."""
        names = [check_name(n, kind) if n != "*" else n for n, kind in ((mixture, "mixture"), (revision, "revision"))]
        where = check_name(store, "store") if store else "*"
        return sorted(p.parent for p in self.stores.glob(f"{where}/*/mixtures/{names[0]}/{names[1]}/{marker}"))

    @staticmethod
    def built_mixtures_in(store_dir: str | Path, marker: str) -> list[Path]:
        """The built mixture directories of one store version (`<store>/mixtures/<mixture>/<revision>`), sorted."""
        return sorted(p.parent for p in Path(store_dir).glob(f"mixtures/*/*/{marker}"))

    def work(self, name: str, version: str) -> Path:
        return self.root / "work" / check_name(name, "store") / check_name(version, "store version")

    def built_mixture(self, store_name: str, store_version: str, mixture: str, revision: str) -> Path:
        return (
            self.store(store_name, store_version)
            / "mixtures"
            / check_name(mixture, "mixture")
            / check_name(revision, "revision")
        )

    @property
    def revisions(self) -> Path:
        return self.root / "mixtures"

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    def run(self, name: str) -> Path:
        return self.runs / check_name(name, "run")

    def run_dirs(self, marker: str) -> list[Path]:
        """Run directories holding `marker` (the run record's file name, from its schema module), sorted."""
        return _holding(self.runs, marker)

    def ladder_dirs(self, marker: str) -> list[Path]:
        """Ladder directories holding `marker` (the ladder record's file name), sorted."""
        return _holding(self.ladders, marker)

    def search_dirs(self, marker: str) -> list[Path]:
        """Search directories holding `marker` (the search plan's file name), sorted."""
        return _holding(self.searches, marker)

    def ladder(self, name: str) -> Path:
        return self.ladders / check_name(name, "ladder")

    @property
    def ladders(self) -> Path:
        return self.root / "ladders"

    def search(self, name: str) -> Path:
        return self.searches / check_name(name, "search")

    @property
    def searches(self) -> Path:
        return self.root / "searches"

    @property
    def site(self) -> Path:
        return self.root / "site"


def _holding(root: Path, marker: str) -> list[Path]:
    """The directories one level under `root` that hold a file named `marker`, sorted."""
    return sorted(p.parent for p in root.glob(f"*/{marker}")) if root.is_dir() else []
