"""Sizes in bytes as a person reads them; a leaf module (it imports nothing of the
app), so that any part of the core can say a size without importing another's."""

from __future__ import annotations


def format_bytes(size: float | None) -> str:
    if size is None:
        return "an unknown amount"
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
