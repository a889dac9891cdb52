"""Builders of real artifacts for the tests and the benches: stores, manifests, corpora, runs, browsers.

`tests/` holds only test modules and `conftest.py` files (the pytest fixtures); everything a test or a bench
imports to make its inputs lives here, so that neither imports the other. No room imports this package.
"""
