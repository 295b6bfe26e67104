"""The training engine: TensorFlow and Keras, imported at module level.

Only ever imported inside a child process (mgpu_gui.processes), never by the
GUI or the CLI process. Keras-level modules (models, callbacks, export,
unwrap, precision, demo) are backend-neutral in what they do; the
TensorFlow-specific ones (strategy, pipeline, xla, multiworker, tf_facts) are
what a second backend (JAX) would add beside them.
"""
