"""A subclassed `keras.Model`, after keras-io "Making new layers and models via
subclassing" (a Model subclass whose layers are made in `__init__` and used in
`call`, with `get_config` so it saves), as a small convnet for 32x32 images.

In the zoo because: a model with no functional graph, whose class must be known to
reload it: registered with `@keras.saving.register_keras_serializable` and listed in
`custom_objects` here, which the run, `evaluate`, `predict` and every export's
verifier must all find; subclassed models cannot be saved as `.h5`.
"""

import keras
from keras import layers


@keras.saving.register_keras_serializable(package="zoo")
class SmallSubclassedNet(keras.Model):
    def __init__(self, num_classes=3, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = num_classes
        self.conv1 = layers.Conv2D(8, 3, activation="relu")
        self.pool = layers.MaxPooling2D()
        self.conv2 = layers.Conv2D(16, 3, activation="relu")
        self.gap = layers.GlobalAveragePooling2D()
        self.head = layers.Dense(num_classes, activation="softmax")

    def call(self, inputs, training=False):
        x = self.pool(self.conv1(inputs))
        x = self.gap(self.conv2(x))
        return self.head(x)

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes}


custom_objects = {"SmallSubclassedNet": SmallSubclassedNet}


def build_model(input_shape, num_classes):
    model = SmallSubclassedNet(num_classes, name="small_subclassed")
    model(keras.ops.zeros((1, *input_shape)))  # builds every layer, as fitting would
    return model
