"""Exact and fuzzy dedup: signatures written in the filter tasks, duplicates found in parallel rounds after them."""
