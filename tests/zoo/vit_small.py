"""A small Vision Transformer after keras-io "Image classification with Vision
Transformer" (its `Patches` layer cutting images with `keras.ops.image.extract_patches`,
`PatchEncoder` adding a learned position embedding, pre-norm transformer blocks of
LayerNormalization, MultiHeadAttention and an MLP with skip connections, a logits head
trained with `SparseCategoricalCrossentropy(from_logits=True)`); 32x32 images cut into
16 patches of 8x8, one block of 2 heads, width 16.

In the zoo because: attention and layer norm on 2 replicas, two custom layers (listed
in `custom_objects`), and a logits head (a linear last layer) that `evaluate` and
`predict` must pass through a softmax.
"""

import keras
from keras import layers, ops

IMAGE_SIZE = 32
PATCH_SIZE = 8
NUM_PATCHES = (IMAGE_SIZE // PATCH_SIZE) ** 2
PROJECTION_DIM = 16
NUM_HEADS = 2
TRANSFORMER_LAYERS = 1
MLP_HEAD_UNITS = [32]


@keras.saving.register_keras_serializable(package="zoo")
class Patches(layers.Layer):
    def __init__(self, patch_size, **kwargs):
        super().__init__(**kwargs)
        self.patch_size = patch_size

    def call(self, images):
        input_shape = ops.shape(images)
        batch_size = input_shape[0]
        height, width, channels = input_shape[1], input_shape[2], input_shape[3]
        num_patches_h = height // self.patch_size
        num_patches_w = width // self.patch_size
        patches = keras.ops.image.extract_patches(images, size=self.patch_size)
        return ops.reshape(patches, (batch_size, num_patches_h * num_patches_w,
                                     self.patch_size * self.patch_size * channels))

    def get_config(self):
        return {**super().get_config(), "patch_size": self.patch_size}


@keras.saving.register_keras_serializable(package="zoo")
class PatchEncoder(layers.Layer):
    def __init__(self, num_patches, projection_dim, **kwargs):
        super().__init__(**kwargs)
        self.num_patches = num_patches
        self.projection_dim = projection_dim
        self.projection = layers.Dense(units=projection_dim)
        self.position_embedding = layers.Embedding(input_dim=num_patches,
                                                   output_dim=projection_dim)

    def call(self, patch):
        positions = ops.expand_dims(ops.arange(start=0, stop=self.num_patches, step=1), axis=0)
        projected_patches = self.projection(patch)
        return projected_patches + self.position_embedding(positions)

    def get_config(self):
        return {**super().get_config(), "num_patches": self.num_patches,
                "projection_dim": self.projection_dim}


custom_objects = {"Patches": Patches, "PatchEncoder": PatchEncoder}


def mlp(x, hidden_units, dropout_rate):
    for units in hidden_units:
        x = layers.Dense(units, activation=keras.activations.gelu)(x)
        x = layers.Dropout(dropout_rate)(x)
    return x


def build_model(input_shape, num_classes):
    inputs = keras.Input(shape=input_shape)
    patches = Patches(PATCH_SIZE)(inputs)
    encoded_patches = PatchEncoder(NUM_PATCHES, PROJECTION_DIM)(patches)
    for _ in range(TRANSFORMER_LAYERS):
        x1 = layers.LayerNormalization(epsilon=1e-6)(encoded_patches)
        attention_output = layers.MultiHeadAttention(
            num_heads=NUM_HEADS, key_dim=PROJECTION_DIM, dropout=0.1)(x1, x1)
        x2 = layers.Add()([attention_output, encoded_patches])
        x3 = layers.LayerNormalization(epsilon=1e-6)(x2)
        x3 = mlp(x3, hidden_units=[PROJECTION_DIM * 2, PROJECTION_DIM], dropout_rate=0.1)
        encoded_patches = layers.Add()([x3, x2])
    representation = layers.LayerNormalization(epsilon=1e-6)(encoded_patches)
    representation = layers.Flatten()(representation)
    representation = layers.Dropout(0.5)(representation)
    features = mlp(representation, hidden_units=MLP_HEAD_UNITS, dropout_rate=0.5)
    logits = layers.Dense(num_classes)(features)
    model = keras.Model(inputs=inputs, outputs=logits, name="vit_small")
    model.compile(optimizer=keras.optimizers.AdamW(learning_rate=1e-3, weight_decay=1e-4),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
    return model
