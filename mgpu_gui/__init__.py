"""mgpu-gui: data-parallel Keras training on a multi-GPU workstation."""

__version__ = "0.1.0"
