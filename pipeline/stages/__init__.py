"""The pipeline's stages in flow order: read, filter, dedup, cells, tokenize, assemble.

`readers` → `filtering` → `dedup` → `cell_stages` → `tokenization` → `assemble`; `intermediate` is the
document files between executor runs, `funnel` the per-stage counts. All of them import datatrove.
"""
