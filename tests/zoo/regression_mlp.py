"""Regression MLP after the TensorFlow tutorial "Basic regression: Predict fuel
efficiency" (its DNN: Dense 64-64 ReLU, one linear unit, Adam, MSE loss with MAE
reported), with 32 units.

In the zoo because: a model that predicts values, not classes (float labels, a linear
head), which `evaluate` must judge with MAE and MSE and the data check must not treat
as class ids; the file compiles itself.
"""

import keras
from keras import layers


def build_model(input_shape, num_classes):
    model = keras.Sequential([
        keras.Input(input_shape),
        layers.Dense(32, activation="relu"),
        layers.Dense(32, activation="relu"),
        layers.Dense(1),
    ], name="regression_mlp")
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mean_squared_error",
                  metrics=["mae"])
    return model
