"""Loading user-written TOML/JSON into pydantic models, with one-line errors naming the field."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Annotated, Any, TypeVar

import pydantic

from millrace.errors import ConfigError, first_validation_error

Model = TypeVar("Model", bound=pydantic.BaseModel)


class StrictModel(pydantic.BaseModel):
    """The one base of every model: configs, revisions, manifests, loader state and trainer records alike.

    The rule: unknown options are errors, not silently ignored typos; so are NaN and infinite numbers (a config
    that validates must not crash or hang later: `lr = inf` passed `lr > 0`); and types are strict, in a file a
    person writes as in one a program writes: no "256" for 256, no 1.5 or `true` for an int. An int is a
    number, so TOML's `lr = 3` (or `tokens = 18.75e12` for a float field) reads as users expect. What TOML and
    JSON cannot spell natively comes as they spell it: a path as a string (`PathValue`), a tuple as a list
    (`TupleValue`)."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


def _path(value: Any) -> Any:
    return Path(value) if isinstance(value, str) else value


def _tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


PathValue = Annotated[Path, pydantic.BeforeValidator(_path)]  # a path a config file gives as a string
TupleValue = pydantic.BeforeValidator(_tuple)  # on a tuple field: a config file gives it as a list


def describe_validation_error(source: str, exc: pydantic.ValidationError) -> str:
    return f"{source}: {first_validation_error(exc)}"


def parse_document(path: Path) -> dict[str, Any]:
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


def validate(model: type[Model], data: Any, source: str) -> Model:
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        raise ConfigError(describe_validation_error(source, exc)) from None


def load_config(path: Path | str, model: type[Model]) -> Model:
    """Parse and validate a config file; every problem is a ConfigError naming file and field."""
    return validate(model, parse_document(Path(path)), str(path))
