"""The PySide6 window. Never imports TensorFlow, Keras or h5py: training, model loading and
the parsing of untrusted files happen in child processes."""
