"""Xception-like network after keras-io "Image classification from scratch" (its
`make_model`: RandomFlip and RandomRotation inside the model, `Rescaling(1/255)`,
separable-convolution blocks with strided 1x1 residuals, a 1-unit sigmoid head for
two classes), with two narrow blocks instead of four wide ones.

In the zoo because: augmentation layers inside the model (random at training only,
and known to trouble a SavedModel export), the model rescaling its own 0-255 pixels
(trained with `--rescale 1`), and the binary sigmoid head on an image folder.
"""

import keras
from keras import layers

data_augmentation_layers = [layers.RandomFlip("horizontal"), layers.RandomRotation(0.1)]


def data_augmentation(images):
    for layer in data_augmentation_layers:
        images = layer(images)
    return images


def make_model(input_shape, num_classes):
    inputs = keras.Input(shape=input_shape)
    x = data_augmentation(inputs)
    x = layers.Rescaling(1.0 / 255)(x)
    x = layers.Conv2D(16, 3, strides=2, padding="same")(x)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)
    previous_block_activation = x
    for size in [24, 32]:
        x = layers.Activation("relu")(x)
        x = layers.SeparableConv2D(size, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)
        x = layers.Activation("relu")(x)
        x = layers.SeparableConv2D(size, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)
        x = layers.MaxPooling2D(3, strides=2, padding="same")(x)
        residual = layers.Conv2D(size, 1, strides=2, padding="same")(previous_block_activation)
        x = layers.add([x, residual])
        previous_block_activation = x
    x = layers.SeparableConv2D(48, 3, padding="same")(x)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)
    x = layers.GlobalAveragePooling2D()(x)
    activation, units = ("sigmoid", 1) if num_classes == 2 else ("softmax", num_classes)
    x = layers.Dropout(0.25)(x)
    outputs = layers.Dense(units, activation=activation)(x)
    return keras.Model(inputs, outputs, name="xception_small")
