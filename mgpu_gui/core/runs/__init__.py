"""Runs on disk and in the store: the run folder, its lock, checkpoints, history, claims, queue."""
