"""A child entry for tests/test_warm_start.py: says what it was given, then ends as asked.

    python -m tests.helpers.warm_child --events-fd N  < {"exit": 0, "raise": false, ...}

One JSON line on the pipe N: its argv, environment, folder, sys.path[0], pid, session,
priority, umask and open-file limits;
"out" on stdout and "err" on stderr; then it exits with "exit", raises, sleeps or is
interrupted, as the request on stdin says.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events-fd", type=int, required=True)
    args, _ = parser.parse_known_args()
    request = json.loads(sys.stdin.read() or "{}")
    with os.fdopen(args.events_fd, "w", encoding="utf-8") as pipe:
        pipe.write(json.dumps({"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd(),
                               "path0": sys.path[0], "pid": os.getpid(), "sid": os.getsid(0),
                               "sigint": signal.getsignal(signal.SIGINT) is
                               signal.default_int_handler,
                               "nice": os.getpriority(os.PRIO_PROCESS, 0),
                               "umask": os.umask(0),
                               "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)}) + "\n")
    print("out", flush=True)
    print("err", file=sys.stderr, flush=True)
    time.sleep(request.get("sleep", 0))
    if request.get("raise"):
        raise RuntimeError("asked to fail")
    if request.get("interrupt"):
        raise KeyboardInterrupt
    return request.get("exit", 0)


if __name__ == "__main__":
    sys.exit(main())
