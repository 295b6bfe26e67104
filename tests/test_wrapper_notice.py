"""A legacy multi-GPU file picked in the run setup: what was found, and unwrapping it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from mgpu_gui.gui.panels.run_setup import RunSetupPanel

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wrapped(tmp_path_factory):
    """A Keras 2 multi_gpu_model wrapper (2 towers) saved as .h5, and its template's output."""
    from tests import legacy_models as lm

    folder = tmp_path_factory.mktemp("wrapped")
    template = lm.functional_template("template")
    path = lm.train_and_save(lm.multi_gpu_model(template, 2), folder / "wrapped.h5")
    return path, template.predict(lm.X, verbose=0)


def test_picking_a_wrapper_says_so_and_saves_the_plain_model(qtbot, wrapped, tmp_path):
    path, reference = wrapped
    panel = RunSetupPanel()
    qtbot.addWidget(panel)
    panel.set_model_path(path)
    panel.check_now()
    notice = panel.wrapper_notice
    assert not notice.isHidden()
    assert "2 towers around 'template'" in notice.label.text()
    assert "Lambda" not in panel.problems().get("model", "")  # slicing Lambdas never run

    target = tmp_path / "plain.keras"
    with qtbot.waitSignal(notice.exporter.finished, timeout=180_000) as done:
        notice.save_unwrapped((target, "keras"))
    assert done.args[0], done.args[1]
    script = textwrap.dedent(f"""
        import keras, numpy as np
        from tests import legacy_models as lm
        model = keras.saving.load_model({str(target)!r})
        print(float(np.abs(model.predict(lm.X, verbose=0) - np.load({str(tmp_path)!r}
              + "/ref.npy")).max()))
    """)
    np.save(tmp_path / "ref.npy", reference)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert float(out.stdout.strip()) <= 1e-5, out.stderr[-2000:]

    panel.set_model_path("demo")
    panel.check_now()
    assert notice.isHidden()
