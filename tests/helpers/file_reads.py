"""Counting the run setup's file reads (model file and data inspections)."""

from __future__ import annotations

from mgpu_gui.gui.jobs import setup_check


def count_reads(monkeypatch) -> dict[str, int]:
    """{"data": n, "model": n}: how often `setup_check` inspected a file from now on."""
    calls = {"data": 0, "model": 0}

    def counted(name, read):
        def call(*args, **kwargs):
            calls[name] += 1
            return read(*args, **kwargs)
        return call

    monkeypatch.setattr(setup_check, "inspect_data", counted("data", setup_check.inspect_data))
    monkeypatch.setattr(setup_check, "inspect_model_file",
                        counted("model", setup_check.inspect_model_file))
    return calls
