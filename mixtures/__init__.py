"""The mixtures room: cells, token counts and weights. Reads store stats, never tokens.

Public API (see `mixtures.api`): `new_revision` (a `NewRevision` request), `build`, `plan`, `diff`,
`validate_file`, `list_revisions`; the manifest schema is `mixtures.manifest`.
"""

from mixtures.api import NewRevision, build, build_result, diff, list_revisions, new_revision, plan, validate_file

__all__ = ["NewRevision", "build", "build_result", "diff", "list_revisions", "new_revision", "plan", "validate_file"]
