"""Dialogs opened from the menus (imported when opened, not at start-up)."""
