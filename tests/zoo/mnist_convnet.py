"""Multi-class convnet after keras-io "Simple MNIST convnet" (Conv 32-64 with max
pooling, Flatten, Dropout 0.5, softmax; compiled with categorical cross-entropy), with
fewer filters.

In the zoo because: the plainest image classifier, on an `.npz` of grey 28x28 images
with integer labels that the app turns into one-hot for the file's
categorical_crossentropy; `predict` on grey PNG files exercises a 1-channel input.
"""

import keras
from keras import layers


def build_model(input_shape, num_classes):
    model = keras.Sequential([
        keras.Input(shape=input_shape),
        layers.Conv2D(8, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Conv2D(16, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Flatten(),
        layers.Dropout(0.5),
        layers.Dense(num_classes, activation="softmax"),
    ], name="mnist_convnet")
    model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
    return model
