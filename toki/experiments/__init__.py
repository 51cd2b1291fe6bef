"""Experiment support: statistics for paired comparisons (`toki.experiments.stats`)."""
