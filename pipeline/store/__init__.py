"""The token store: its format (`format`, light: no datatrove) and `millrace store` (`cli`).

`mixtures/` and `loader/` import `pipeline.store.format` only.
"""
