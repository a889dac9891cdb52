"""Benchmarks: each `bench/bench_*.py` module has `main() -> list[Result]`, run by `make bench`."""
