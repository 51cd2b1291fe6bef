"""Benchmarks: each writes results/<name>.json with machine info and its anchors."""
