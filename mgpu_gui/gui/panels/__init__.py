"""The panels the main window is made of."""
