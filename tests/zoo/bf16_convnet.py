"""A convnet whose layers compute in bfloat16, after the Keras mixed precision guide
(TensorFlow's "Mixed precision" guide: layers given `dtype="mixed_bfloat16"`, the last
layer's softmax kept in float32 for numeric stability).

In the zoo because: a model file that sets the dtype policy on its own layers (rather
than through the app's `--precision`), whose float32 export must match its
bfloat16-computing checkpoint within bfloat16's precision.
"""

import keras
from keras import layers

POLICY = "mixed_bfloat16"


def build_model(input_shape, num_classes):
    inputs = keras.Input(input_shape)
    x = layers.Conv2D(8, 3, activation="relu", dtype=POLICY)(inputs)
    x = layers.MaxPooling2D(dtype=POLICY)(x)
    x = layers.Conv2D(16, 3, activation="relu", dtype=POLICY)(x)
    x = layers.GlobalAveragePooling2D(dtype=POLICY)(x)
    x = layers.Dense(num_classes, dtype=POLICY)(x)
    outputs = layers.Activation("softmax", dtype="float32")(x)
    return keras.Model(inputs, outputs, name="bf16_convnet")
