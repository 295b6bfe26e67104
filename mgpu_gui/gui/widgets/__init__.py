"""Small reusable widgets and table models."""
