"""The TensorFlow-free halves of the tools: scaling test, batch finder, doctor."""
