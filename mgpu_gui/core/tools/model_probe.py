"""The model probe's parent side, for `mgpu-train layout` and the app's build check.

It lives in `core.children.model_probe`: `prepare_run` probes the model too (for
--mesh auto), and `core.children` cannot import `core.tools`, which builds on it.
The CLI and the GUI import it from here until they move to that module.
"""

from mgpu_gui.core.children.model_probe import ModelProbeJob, ProbeOutcome

__all__ = ["ModelProbeJob", "ProbeOutcome"]
