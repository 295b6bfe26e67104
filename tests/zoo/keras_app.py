"""A Keras Applications model built in a `.py`: `keras.applications.MobileNetV3Small`
with `weights=None` (alpha 0.75, minimalistic) for 32x32x3 images and the data's class
count, as users write one instead of picking the built-in architecture.

In the zoo because: a large real graph (hundreds of layers, hard-swish, squeeze-excite,
its own `Rescaling` preprocessing taking 0-255 pixels: trained with `--rescale 1`) made
by Keras itself, and the biggest model here (about 0.7M parameters: its 1024-wide last stage is
fixed whatever the alpha).
"""

import keras


def build_model(input_shape, num_classes):
    model = keras.applications.MobileNetV3Small(
        input_shape=input_shape, alpha=0.75, minimalistic=True, weights=None,
        classes=num_classes, dropout_rate=0.2, include_preprocessing=True)
    return model
