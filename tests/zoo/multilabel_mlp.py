"""Multi-label classifier after keras-io "Large-scale multi-label text classification"
(its shallow MLP: Dense 512-256 ReLU, a Dense sigmoid unit per label, binary
cross-entropy, binary accuracy), on 10 float features and 4 labels.

In the zoo because: K sigmoid units with multi-hot labels, which the data check must
accept as labels and `evaluate` reads as multi-label (the README says it refuses that
head by name for now).
"""

import keras
from keras import layers

NUM_LABELS = 4  # the labels' width: a multi-hot row is not a class id


def build_model(input_shape, num_classes):
    model = keras.Sequential([
        keras.Input(input_shape),
        layers.Dense(32, activation="relu"),
        layers.Dense(16, activation="relu"),
        layers.Dense(NUM_LABELS, activation="sigmoid"),
    ], name="multilabel_mlp")
    model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["binary_accuracy"])
    return model
