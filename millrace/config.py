"""Loading user-written TOML/JSON into pydantic models, with one-line errors naming the field."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import TypeVar

import pydantic

from millrace.errors import ConfigError, first_validation_error

Model = TypeVar("Model", bound=pydantic.BaseModel)


class StrictModel(pydantic.BaseModel):
    """The one base of every model: configs, revisions, manifests, loader state and trainer records alike.

    Unknown options are errors, not silently ignored typos; so are NaN and infinite numbers (a config that
    validates must not crash or hang later: `lr = inf` passed `lr > 0`). Types, by one rule:
    - an artifact (what a program wrote for another to read: store, cell and set json, mixture manifests,
      loader state, run/metrics/eval/samples/ladder records) is read strictly: `millrace.artifacts.validated`
      checks it as the JSON it is, so no "256" for 256, no 1.5 or `true` for an int (an int is a fine float);
      a revision, hashed and built from, is parsed as strictly (`mixtures.revision.parse_revision`);
    - a config a person writes (train, pipeline, ladder TOML) is read as TOML users expect: `steps = 1e3`
      for an int, a list for a tuple, a string for a path.
    """

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def describe_validation_error(source: str, exc: pydantic.ValidationError) -> str:
    return f"{source}: {first_validation_error(exc)}"


def parse_document(path: Path) -> dict[str, object]:
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read ({exc})") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'TOML'} ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a table at the top level")
    return data


def validate(model: type[Model], data: object, source: str) -> Model:
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        raise ConfigError(describe_validation_error(source, exc)) from None


def load_config(path: Path | str, model: type[Model]) -> Model:
    """Parse and validate a config file; every problem is a ConfigError naming file and field."""
    return validate(model, parse_document(Path(path)), str(path))
