"""Icons, styles and the demo dataset, installed as `mgpu_gui.resources`."""
