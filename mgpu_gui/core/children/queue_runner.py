"""Start a store's queue runner: a detached child that outlives the app.

The queue's state and the runner's lock live with the store (`core.runs.queue`);
starting the process is a child's business, so it lives here, beside the
registry of child entries (which `core.runs` does not import).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from mgpu_gui.core.children.launch import Child, module_command
from mgpu_gui.core.runs.queue import runner_log_path, runner_pid


def ensure_runner(store_path: Path) -> bool:
    """Start the store's queue runner unless one runs; True if one was started.

    It is a process of its own (a session of its own, output to a log next to
    the store), so the queue goes on when the window or terminal closes. A shell
    starts it in the background and exits, so it is no child of ours: nobody
    here has to reap it when it ends.
    """
    if runner_pid(store_path) is not None:
        return False
    command = module_command(Child.QUEUE_RUNNER, "--store", str(store_path))
    with open(runner_log_path(store_path), "a", encoding="utf-8") as log:
        subprocess.run(["/bin/sh", "-c", '"$@" &', "mgpu-gui-queue", *command],
                       stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                       start_new_session=True, close_fds=True, check=True)
    return True
