"""Depthwise-separable network after Keras Applications' MobileNet v1
(`keras/src/applications/mobilenet.py`: `_conv_block` and `_depthwise_conv_block`,
DepthwiseConv2D-BN-ReLU6 then a 1x1 Conv2D-BN-ReLU6, strided blocks to downsample,
global pooling, Dropout, softmax) with 4 blocks and width 8-32.

In the zoo because: DepthwiseConv2D and ReLU6 (`ReLU(6.0)`), the building blocks of
the mobile networks people fine-tune, on an image folder, left uncompiled; also run
with `--precision mixed_bfloat16` as the zoo's `mobilenet_like_bf16`.
"""

import keras
from keras import layers


def _conv_block(inputs, filters, strides=(1, 1)):
    x = layers.Conv2D(filters, (3, 3), padding="same", use_bias=False, strides=strides)(inputs)
    x = layers.BatchNormalization()(x)
    return layers.ReLU(6.0)(x)


def _depthwise_conv_block(inputs, pointwise_conv_filters, strides=(1, 1)):
    x = layers.DepthwiseConv2D((3, 3), padding="same", strides=strides, use_bias=False)(inputs)
    x = layers.BatchNormalization()(x)
    x = layers.ReLU(6.0)(x)
    x = layers.Conv2D(pointwise_conv_filters, (1, 1), padding="same", use_bias=False)(x)
    x = layers.BatchNormalization()(x)
    return layers.ReLU(6.0)(x)


def build_model(input_shape, num_classes):
    inputs = keras.Input(input_shape)
    x = _conv_block(inputs, 8, strides=(2, 2))
    x = _depthwise_conv_block(x, 16)
    x = _depthwise_conv_block(x, 24, strides=(2, 2))
    x = _depthwise_conv_block(x, 24)
    x = _depthwise_conv_block(x, 32, strides=(2, 2))
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dropout(1e-3)(x)
    outputs = layers.Dense(num_classes, activation="softmax")(x)
    return keras.Model(inputs, outputs, name="mobilenet_like")
