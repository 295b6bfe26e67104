"""Test-only fakes (GPUs as a fake pynvml, fault injection).

Imported only at their selection points, and only when the test variable is
set (MGPU_GUI_FAKE_GPUS, MGPU_GUI_FAULT): the protected contract in
pyproject.toml names those points.
"""
