"""Where revision files live: the user's under $MILLRACE_HOME/mixtures/, the shipped ones here.

A revision is found as `<root>/<mixture>/<revision>.toml`, the user's root first;
a file's own `mixture` and `revision` fields must agree with where it lies.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from millrace.errors import ConfigError
from millrace.home import Home
from millrace.names import known
from mixtures.manifest import MANIFEST_FILE
from mixtures.revision import Revision, load_revision

SHIPPED = Path(__file__).resolve().parent / "revisions"


@dataclass(frozen=True)
class RevisionFile:
    mixture: str
    revision: str
    path: Path
    origin: str  # "home" or "shipped"


def roots(home: Home) -> list[tuple[str, Path]]:
    return [("home", home.revisions), ("shipped", SHIPPED)]


def revision_files(home: Home) -> list[RevisionFile]:
    """Every revision file, the user's shadowing a shipped one of the same name."""
    found: dict[tuple[str, str], RevisionFile] = {}
    for origin, root in roots(home):
        for path in sorted(root.glob("*/*.toml")) if root.is_dir() else []:
            key = (path.parent.name, path.stem)
            found.setdefault(key, RevisionFile(key[0], key[1], path, origin))
    return sorted(found.values(), key=lambda f: (f.mixture, f.revision))


def find_revision_file(home: Home, mixture: str, revision: str) -> Path:
    for _, root in roots(home):
        path = root / mixture / f"{revision}.toml"
        if path.is_file():
            return path
    files = revision_files(home)
    revisions = [f.revision for f in files if f.mixture == mixture]
    if not revisions:
        raise ConfigError(f"no mixture {mixture!r}" + known("mixtures", (f.mixture for f in files)))
    raise ConfigError(f"no revision {revision!r}" + known("revisions", revisions, f"of {mixture}"))


def load_named(home: Home, mixture: str, revision: str, file: Path | str | None = None) -> tuple[Revision, Path]:
    """The revision `mixture/revision`, from `file` if given, else found by name."""
    path = Path(file) if file is not None else find_revision_file(home, mixture, revision)
    loaded = load_revision(path)
    if (loaded.mixture, loaded.revision) != (mixture, revision):
        raise ConfigError(
            f"{path}: fields 'mixture'/'revision' say {loaded.key}, but {mixture}/{revision} was asked for"
        )
    return loaded, path


def built_manifests(home: Home, mixture: str, revision: str) -> list[Path]:
    """Manifests built from this revision name, on any store and version."""
    return [p / MANIFEST_FILE for p in home.built_mixtures(MANIFEST_FILE, mixture=mixture, revision=revision)]
