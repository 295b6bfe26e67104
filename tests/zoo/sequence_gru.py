"""Sequence classifier after keras-io "Timeseries classification from scratch" (FordA:
three Conv1D(64, 3)-BatchNorm-ReLU blocks on univariate series, then pooling and a
softmax; sparse categorical cross-entropy and accuracy), with 16 filters and a GRU in
place of the global pooling.

In the zoo because: 3-D `.npz` samples (n, steps, 1) rather than images or rows, and a
recurrent layer (GRU) on 2 replicas and through every export format.
"""

import keras
from keras import layers


def build_model(input_shape, num_classes):
    input_layer = keras.Input(input_shape)
    x = input_layer
    for _ in range(2):
        x = layers.Conv1D(filters=16, kernel_size=3, padding="same")(x)
        x = layers.BatchNormalization()(x)
        x = layers.ReLU()(x)
    x = layers.GRU(16)(x)
    output_layer = layers.Dense(num_classes, activation="softmax")(x)
    model = keras.Model(inputs=input_layer, outputs=output_layer, name="conv1d_gru")
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                  metrics=["sparse_categorical_accuracy"])
    return model
