"""BatchNorm + Dropout convnet after the Keras 2 example `examples/cifar10_cnn.py`
(Conv-Conv-MaxPool-Dropout blocks, Dense 512 with Dropout 0.5, softmax), with a
BatchNormalization after each convolution and far fewer filters; left uncompiled.

In the zoo because: BatchNorm statistics across 2 replicas (trained with `--sync-bn`;
the JAX engine always synchronises them), Dropout (training-only behaviour that the
export's check must switch off), and the app choosing the loss from the softmax layer.
"""

import keras
from keras import layers


def build_model(input_shape, num_classes):
    inputs = keras.Input(input_shape)
    x = inputs
    for filters in (8, 16):
        x = layers.Conv2D(filters, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)
        x = layers.Activation("relu")(x)
        x = layers.Conv2D(filters, 3)(x)
        x = layers.BatchNormalization()(x)
        x = layers.Activation("relu")(x)
        x = layers.MaxPooling2D(pool_size=(2, 2))(x)
        x = layers.Dropout(0.25)(x)
    x = layers.Flatten()(x)
    x = layers.Dense(32)(x)
    x = layers.Activation("relu")(x)
    x = layers.Dropout(0.5)(x)
    outputs = layers.Dense(num_classes, activation="softmax")(x)
    return keras.Model(inputs, outputs, name="bn_dropout_convnet")
