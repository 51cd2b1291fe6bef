"""The parts of paper/assets.py, one module per kind of result file."""
