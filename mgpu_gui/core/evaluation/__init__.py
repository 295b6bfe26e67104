"""How good a trained model is: figures from its predictions (no TensorFlow, no Qt)."""
