"""Qt-free core: config, devices, models, data, training, events, export.

Nothing here imports Qt; TensorFlow is imported lazily, only inside the
functions that train, load or export, so the GUI process never loads it.
"""
