"""Child entry: import TensorFlow and Keras once, then fork the app's engine children.

    python -m mgpu_gui.processes.warm_starter --socket PATH --alive-fd N

Started by core/children/warm_start.py, with no GPU (`CUDA_VISIBLE_DEVICES=""`). It
listens on PATH only once the imports are done (before, a client finds no socket and
starts its child fresh) and serves until the pipe `N` from its owner ends (the owner
exited) and its last child has ended (core/children/warm_server.py).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
from pathlib import Path

from mgpu_gui.core.children.launch import WARM_CHILDREN, preload_warm_modules
from mgpu_gui.core.children.warm_server import serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mgpu_gui.processes.warm_starter")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--alive-fd", type=int, required=True)
    args = parser.parse_args(argv)
    path = Path(args.socket)
    # Its folder goes however it ends (a clean exit also for TERM and HUP): a folder
    # left behind says to the processes it served that it still starts children.
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda *_: sys.exit(0))
    try:
        return _serve(path, args.alive_fd)
    finally:
        for leftover in (path, path.with_suffix(".new")):
            leftover.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            path.parent.rmdir()


def _serve(path: Path, alive_fd: int) -> int:
    preload_warm_modules()
    keras = sys.modules.get("keras")
    if keras is None:
        return 1  # nothing to share: the clients go on starting their children fresh
    os.environ["KERAS_BACKEND"] = keras.backend.backend()
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as listener:
        listener.bind(str(path.with_suffix(".new")))
        listener.listen(64)
        os.replace(path.with_suffix(".new"), path)  # appears ready: bound and listening
        serve(listener, alive_fd, frozenset(WARM_CHILDREN))
    return 0

if __name__ == "__main__":
    sys.exit(main())
