"""Persistence: run directories, checkpoints, metrics sinks, plots."""
