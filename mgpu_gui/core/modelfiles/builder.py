"""Which function of a `.py` model file builds the model (no h5py: the GUI checks it).

The classic multi-GPU notebooks and blog posts call it `create_model()`, others
`get_model()` or `make_model()`; this app's own examples `build_model()`. Any of
them is taken, or the one `--builder` names. `inspection` reads the file's
top-level names with `ast` (nothing runs); this only decides, from what was read.
"""

from __future__ import annotations

from mgpu_gui.core.errors import ModelError
from mgpu_gui.core.modelfiles.info import ModelFileInfo

# Looked for in this order when no --builder is given.
BUILDER_NAMES = ("build_model", "create_model", "get_model", "make_model")
BUILDERS_TEXT = ", ".join(f"{name}()" for name in BUILDER_NAMES)


def py_builder(info: ModelFileInfo, requested: str | None = None) -> str:
    """The function of a `.py` model file that builds the model: `requested` (--builder), or
    the first of BUILDER_NAMES the file defines; raise ModelError naming what it does define.

    Pure (works on what was read), so a check of a changed --builder reads no file again.
    """
    if requested is None and info.builder is not None:
        return info.builder
    if requested is not None and requested in info.functions:
        return requested
    defined = (f"its functions: {', '.join(info.functions)}" if info.functions
               else "it defines no top-level function")
    if requested is not None:
        raise ModelError(f"{info.path.name} defines no top-level function {requested}() "
                         f"({defined}); check the name given to --builder.")
    raise ModelError(
        f"{info.path.name} defines none of {BUILDERS_TEXT} ({defined}). Give the function "
        "that returns the model one of these names, or name it with --builder NAME.")
