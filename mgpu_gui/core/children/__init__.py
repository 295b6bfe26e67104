"""Child processes: how each is started (one registry), supervised and heard (typed events)."""
