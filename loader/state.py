"""The loader's resumable state: a handful of integers and the manifest hash they belong to."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pydantic

from millrace.config import StrictModel
from millrace.errors import ArtifactError, first_validation_error


class LoaderState(StrictModel):
    manifest_hash: str
    step: int  # the next step to hand out
    global_batch: int
    total_steps: int
    phase_start_steps: list[int]

    @classmethod
    def parse(cls, state: Mapping[str, object], manifest_path: Path) -> LoaderState:
        try:
            return cls.model_validate(dict(state))
        except pydantic.ValidationError as exc:
            raise ArtifactError(f"not a loader state for {manifest_path}: {first_validation_error(exc)}") from None
        except (TypeError, ValueError) as exc:
            raise ArtifactError(f"not a loader state for {manifest_path}: {exc}") from None
