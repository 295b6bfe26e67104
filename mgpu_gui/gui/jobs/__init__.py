"""Background work for the GUI: QThread and child-process adapters, results as queued signals."""
