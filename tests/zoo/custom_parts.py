"""A custom layer, a custom loss and a custom metric in a saved `.keras` file, after
keras-io "Making new layers and models via subclassing" (its `Linear` layer with
`add_weight` and `get_config`) and the Keras guide "Customizing what happens in fit"
/ "Training & evaluation with the built-in methods" (a `keras.losses.Loss` subclass
and a stateful `keras.metrics.Metric` subclass), all registered.

In the zoo because: the file to train is a compiled `.keras` whose loss and metric
are the user's own classes, found through `--custom-objects` (this file's
`custom_objects`), which every later stage (resume, evaluate, export and its check)
must find again. `write_model(folder)` makes the file: run it on the TensorFlow
backend.
"""

from pathlib import Path

import keras
import numpy as np
from keras import ops


@keras.saving.register_keras_serializable(package="zoo")
class Linear(keras.layers.Layer):
    def __init__(self, units=32, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], self.units),
                                 initializer="random_normal", trainable=True, name="w")
        self.b = self.add_weight(shape=(self.units,), initializer="zeros", trainable=True,
                                 name="b")

    def call(self, inputs):
        return ops.matmul(inputs, self.w) + self.b

    def get_config(self):
        return {**super().get_config(), "units": self.units}


@keras.saving.register_keras_serializable(package="zoo")
class SmoothedSparseCrossentropy(keras.losses.Loss):
    """Sparse categorical cross-entropy with label smoothing (on integer labels)."""

    def __init__(self, smoothing=0.1, num_classes=3, name="smoothed_sparse_ce", **kwargs):
        super().__init__(name=name, **kwargs)
        self.smoothing = smoothing
        self.num_classes = num_classes

    def call(self, y_true, y_pred):
        y_true = ops.one_hot(ops.cast(ops.reshape(y_true, (-1,)), "int32"), self.num_classes)
        y_true = y_true * (1.0 - self.smoothing) + self.smoothing / self.num_classes
        return keras.losses.categorical_crossentropy(y_true, y_pred)

    def get_config(self):
        return {**super().get_config(), "smoothing": self.smoothing,
                "num_classes": self.num_classes}


@keras.saving.register_keras_serializable(package="zoo")
class MeanConfidence(keras.metrics.Metric):
    """The mean probability of the predicted class."""

    def __init__(self, name="confidence", **kwargs):
        super().__init__(name=name, **kwargs)
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        top = ops.max(y_pred, axis=-1)
        self.total.assign_add(ops.sum(top))
        self.count.assign_add(ops.cast(ops.shape(top)[0], "float32"))

    def result(self):
        return self.total / ops.maximum(self.count, 1.0)

    def reset_state(self):
        self.total.assign(0.0)
        self.count.assign(0.0)


custom_objects = {"Linear": Linear, "SmoothedSparseCrossentropy": SmoothedSparseCrossentropy,
                  "MeanConfidence": MeanConfidence}


def write_model(folder: Path, features: int = 6, classes: int = 3) -> Path:
    """The compiled model, fitted one epoch on noise as a user's file would have been."""
    inputs = keras.Input((features,))
    x = Linear(16)(inputs)
    x = keras.layers.Activation("relu")(x)
    outputs = keras.layers.Dense(classes, activation="softmax")(x)
    model = keras.Model(inputs, outputs, name="custom_parts")
    model.compile(optimizer=keras.optimizers.RMSprop(1e-3),
                  loss=SmoothedSparseCrossentropy(num_classes=classes),
                  metrics=[MeanConfidence()])
    rng = np.random.default_rng(0)
    model.fit(rng.normal(size=(32, features)).astype("float32"), rng.integers(0, classes, 32),
              epochs=1, verbose=0)
    path = Path(folder) / "custom_parts.keras"
    model.save(path)
    return path
