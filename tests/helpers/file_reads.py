"""Counting the run setup's file reads (model file and data inspections)."""

from __future__ import annotations

from mgpu_gui.core.children.inspector import FileInspector


def count_reads(monkeypatch) -> dict[str, int]:
    """{"data": n, "model": n}: how often a file was asked of the file inspector from now on."""
    calls = {"data": 0, "model": 0}

    def counted(name, read):
        def call(*args, **kwargs):
            calls[name] += 1
            return read(*args, **kwargs)
        return call

    monkeypatch.setattr(FileInspector, "inspect_data", counted("data", FileInspector.inspect_data))
    monkeypatch.setattr(FileInspector, "inspect_model",
                        counted("model", FileInspector.inspect_model))
    return calls
