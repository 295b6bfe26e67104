"""Binary MLP with a 1-unit sigmoid head, after keras-io "Imbalanced classification:
credit card fraud detection" (Dense 256-256 with Dropout 0.3, sigmoid output; its
confusion-count, precision and recall metrics), scaled down.

In the zoo because: the binary head (1 sigmoid unit, binary cross-entropy) that
`evaluate` reads as two classes, a file compiled with its own optimizer and with
metrics beyond accuracy (Precision, Recall, TP/FP/FN/TN counts), on imbalanced labels.
"""

import keras
from keras import layers


def build_model(input_shape, num_classes):
    model = keras.Sequential([
        keras.Input(input_shape),
        layers.Dense(32, activation="relu"),
        layers.Dense(32, activation="relu"),
        layers.Dropout(0.3),
        layers.Dense(32, activation="relu"),
        layers.Dropout(0.3),
        layers.Dense(1, activation="sigmoid"),
    ], name="fraud_mlp")
    metrics = [keras.metrics.FalseNegatives(name="fn"), keras.metrics.FalsePositives(name="fp"),
               keras.metrics.TrueNegatives(name="tn"), keras.metrics.TruePositives(name="tp"),
               keras.metrics.Precision(name="precision"), keras.metrics.Recall(name="recall")]
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy",
                  metrics=metrics)
    return model
