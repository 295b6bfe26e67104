"""A Keras 2 `multi_gpu_model` file: the template (Dense, BatchNorm, Dropout, softmax;
6 features, 3 classes) nested in 2 slicing Lambda towers and a `Concatenate(axis=0)`,
trained and saved as `.h5` by Keras 2 itself (tf_keras), as `multi_gpu_model` users
did before TF 2.4 removed it. Made with the project's own `tests/legacy_models.py`.

In the zoo because: Keras 3 cannot load such a file; the app rebuilds the template
from the file's config and weights (no code from the file runs) and trains it, and a
resume, evaluate and export must all work from that rebuilt model.
"""

from pathlib import Path


def write_model(folder: Path) -> Path:
    """Write `legacy_multi_gpu.h5` into `folder` (needs tf_keras; run on TensorFlow)."""
    from tests import legacy_models as lm

    template = lm.functional_template("template")
    return lm.train_and_save(lm.multi_gpu_model(template, 2), Path(folder) / "legacy_multi_gpu.h5")
