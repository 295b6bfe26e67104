"""Entry point of the PyInstaller bundle (see mgpu-gui.spec).

One executable does three jobs:

- `mgpu-gui --mgpu-module MODULE ARGS...`: a child process the app started
  (worker, model probe, export child, export verifier); a bundle has no
  `python -m`, so `mgpu_gui.core.children.launch.module_command` starts the bundle itself.
- started as `mgpu-train` (a link next to `mgpu-gui` in the bundle folder):
  the headless CLI.
- otherwise: the desktop app.

With MGPU_BUNDLE_TRACE=FILE set, every process this entry point starts
appends one JSON line to FILE (its pid, parent, argv, sys.executable,
sys.frozen, which job it does, where `mgpu_gui` was imported from). The
bundle's smoke check uses it to prove the worker ran through the frozen
executable; without the variable nothing is written.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

TRACE_ENV = "MGPU_BUNDLE_TRACE"
CLI_NAME = "mgpu-train"


def _job(argv: list[str]) -> str:
    from mgpu_gui.core.children.launch import MODULE_FLAG

    if len(argv) >= 3 and argv[1] == MODULE_FLAG:
        return argv[2]
    if Path(argv[0]).name == CLI_NAME:
        return "mgpu_gui.cli.main"
    return "mgpu_gui.gui.app"


def _trace(job: str) -> None:
    path = os.environ.get(TRACE_ENV)
    if not path:
        return
    import mgpu_gui

    record = {"pid": os.getpid(), "ppid": os.getppid(), "job": job, "argv": sys.argv,
              "executable": sys.executable, "frozen": bool(getattr(sys, "frozen", False)),
              "mgpu_gui": mgpu_gui.__file__}
    with open(path, "a", encoding="utf-8") as f:  # one short write: lines do not interleave
        f.write(json.dumps(record) + "\n")


def main() -> int:
    from mgpu_gui.core.children.launch import run_module_from_argv

    _trace(_job(sys.argv))
    if run_module_from_argv():
        return 0  # a module that wants another exit status calls sys.exit itself
    if Path(sys.argv[0]).name == CLI_NAME:
        from mgpu_gui.cli.main import main as cli_main

        return cli_main()
    from mgpu_gui.gui.app import main as gui_main

    return gui_main()


if __name__ == "__main__":
    sys.exit(main())
