"""PySide6 widgets; this package never imports TensorFlow or Keras."""
