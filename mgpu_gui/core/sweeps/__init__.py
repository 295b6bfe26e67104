"""Sweeps: many runs of one setup over a search space, as plain data (no Qt, no store).

space (what can vary and how values are written), trials (the runs a sweep makes),
median (the early-stopping rule), estimate (how long it takes), results and plots (what
the Sweep view and `sweep show` present).
"""
