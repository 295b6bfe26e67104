"""The core: what every process shares. No Qt, no TensorFlow or Keras, ever.

Enforced by the import contracts in pyproject.toml (tests/test_architecture.py):
the GUI, the CLI and the children all import from here, so nothing here may
pull in a toolkit or a framework that one of them must not load.
"""
