"""ResNet v1 after the Keras 2 example `examples/cifar10_resnet.py` (its `resnet_layer`
and `resnet_v1`: Conv-BN-ReLU stacks with identity shortcuts, 1x1 projections where the
size changes, average pooling, softmax), built by `create_model()` with no arguments as
the classic notebooks did. Depth 8 (n = 1) and 8 base filters instead of ResNet20's
depth 20 and 16 filters, for 32x32x3 images and 3 classes.

In the zoo because: `create_model()` takes no arguments (the input shape and class
count are fixed in the file), the file compiles itself with categorical cross-entropy
(integer labels made one-hot), and residual blocks with BatchNorm on 2 replicas.
"""

import keras
from keras import layers

INPUT_SHAPE = (32, 32, 3)
NUM_CLASSES = 3
DEPTH = 8  # 6n + 2


def resnet_layer(inputs, num_filters=8, kernel_size=3, strides=1, activation="relu",
                 batch_normalization=True):
    conv = layers.Conv2D(num_filters, kernel_size=kernel_size, strides=strides,
                         padding="same", kernel_initializer="he_normal",
                         kernel_regularizer=keras.regularizers.l2(1e-4))
    x = conv(inputs)
    if batch_normalization:
        x = layers.BatchNormalization()(x)
    if activation is not None:
        x = layers.Activation(activation)(x)
    return x


def resnet_v1(input_shape, depth, num_classes):
    num_filters = 8
    num_res_blocks = int((depth - 2) / 6)
    inputs = keras.Input(shape=input_shape)
    x = resnet_layer(inputs=inputs, num_filters=num_filters)
    for stack in range(3):
        for res_block in range(num_res_blocks):
            strides = 2 if stack > 0 and res_block == 0 else 1
            y = resnet_layer(inputs=x, num_filters=num_filters, strides=strides)
            y = resnet_layer(inputs=y, num_filters=num_filters, activation=None)
            if stack > 0 and res_block == 0:
                x = resnet_layer(inputs=x, num_filters=num_filters, kernel_size=1,
                                 strides=strides, activation=None, batch_normalization=False)
            x = layers.add([x, y])
            x = layers.Activation("relu")(x)
        num_filters *= 2
    x = layers.AveragePooling2D(pool_size=8)(x)
    y = layers.Flatten()(x)
    outputs = layers.Dense(num_classes, activation="softmax",
                           kernel_initializer="he_normal")(y)
    return keras.Model(inputs=inputs, outputs=outputs, name="resnet_v1_depth8")


def create_model():
    model = resnet_v1(input_shape=INPUT_SHAPE, depth=DEPTH, num_classes=NUM_CLASSES)
    model.compile(loss="categorical_crossentropy", optimizer=keras.optimizers.Adam(1e-3),
                  metrics=["accuracy"])
    return model
