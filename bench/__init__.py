"""Benchmarks, run by `make bench`; each prints ratios against its peers."""
