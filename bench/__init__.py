"""Benchmarks: `make bench` (python -m bench). Not part of the pass/fail suite."""
