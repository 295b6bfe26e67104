"""The training engine: TensorFlow and Keras, imported at module level.

Only ever imported inside a child process (mgpu_gui.processes), never by the
GUI, the CLI or the core: the import contracts in pyproject.toml check it.
Three import it inside functions because order matters: `strategy` sets the
device environment before TensorFlow starts, `multiworker` sets TF_CONFIG
first, and `tf_facts` captures what TensorFlow prints as it starts.

Keras-level modules (models, callbacks, export, unwrap, precision, demo) are
backend-neutral in what they do; the TensorFlow-specific ones (strategy,
pipeline, xla, multiworker, tf_facts) have JAX counterparts: jax_strategy
(DataParallel behind the strategy's interface) and py_pipeline (a PyDataset, no
TensorFlow; inputs.py chooses it or tf.data). A JAX run on py_pipeline imports
no TensorFlow: the modules on its path (training, inputs, data_source, models,
callbacks, export, failures, input_wait, xla) import it inside the functions
that only the tensorflow engine or tf.data reach.
"""

from mgpu_gui.engine import optional_imports

optional_imports.install()  # before the first engine module imports Keras
