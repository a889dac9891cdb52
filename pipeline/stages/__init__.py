"""The pipeline's stages in flow order: read, filter, dedup, cells, tokenize, assemble.

`readers` → `filtering` → `dedup` (signing, in the filter tasks) → `duplicates` (finding, over
`sorted_runs` merges and `components` rounds) → `cell_stages` → `tokenization` → `assemble`; `intermediate`
is the document files between executor runs, `funnel` the per-stage counts. All of them import datatrove.
"""
