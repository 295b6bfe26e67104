"""Thin child entries: arguments in, typed events out. Started only through the registry
in mgpu_gui.core.children.launch, never imported by the GUI, the CLI or the core."""
