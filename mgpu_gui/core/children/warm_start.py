"""Start a child entry: forked from a warm starter where it can be, else a fresh interpreter.

A child that imports TensorFlow and sees no GPU (`CUDA_VISIBLE_DEVICES=""`: a run on CPU
replicas, an export's verifier, a model probe; or a test's fake GPUs) is forked from the
warm starter, a process that has imported TensorFlow and Keras once
(processes/warm_starter.py): it is at work in a tenth of a second instead of 2-3
CPU-seconds. Its streams, pipes, session, folder and environment are the same as a fresh
start's, and so is what the parent sees: a pid, a `poll()`/`wait()` exit code, `kill()`.

A process that starts such children starts a warm starter in the background at its second
one (that child starts fresh: nothing ever waits for the starter), unless its environment
names one ($MGPU_GUI_WARM_STARTER, set for every process it starts: a training worker's
export verifier, a CLI a test runs, the queue runner are forked by the same starter). The
starter ends when the process that started it has ended, and the last child it forked.
Whatever the starter refuses (another engine, a GPU, an environment that differs where
the imports read it: core/children/warm_server.py), or cannot do, starts fresh.
MGPU_GUI_WARM_START=0 starts every child fresh.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from mgpu_gui.core.children.launch import (
    CHILD_ENV,
    MODULE_FLAG,
    WARM_CHILDREN,
    Child,
    command_log,
    module_command,
)
from mgpu_gui.core.children.warm_server import Request, sees_no_gpu

STARTER_ENV = "MGPU_GUI_WARM_STARTER"
OFF_ENV = "MGPU_GUI_WARM_START"
ANSWER_TIMEOUT_S = 30.0  # a fork takes milliseconds; this is a starter that is stuck


class WarmStartRefused(Exception):
    """The starter would not fork this child (the reason is why it must start fresh)."""


class WarmChild:
    """A child forked by the warm starter: the part of `subprocess.Popen` used here.

    The starter is its parent; it sends the exit status on the request's connection."""

    def __init__(self, args: list[str], pid: int, conn: socket.socket,
                 stdin: IO[bytes] | None, stdout: IO[bytes]):
        self.args = args
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.returncode: int | None = None
        self._conn = conn
        self._lock = threading.Lock()
        self._orphaned = False  # the starter ended first: only the pid's end is known

    @classmethod
    def start(cls, address: str, command: list[str], module: str, env: dict[str, str],
              cwd: str | None, pass_fds: Sequence[int], stdin_pipe: bool) -> WarmChild:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours: list[int] = []  # this side's ends, kept only once the child runs
        theirs: list[int] = []
        try:
            conn.settimeout(ANSWER_TIMEOUT_S)
            conn.connect(address)
            out_r, out_w = os.pipe()
            ours.append(out_r)
            theirs.append(out_w)
            if stdin_pipe:
                in_r, in_w = os.pipe()
                ours.append(in_w)
            else:
                in_r = os.open(os.devnull, os.O_RDONLY)
            theirs.append(in_r)
            request = Request(module, tuple(command[3:]), env, cwd or os.getcwd(),
                              {1: 0, 2: 0, 0: 1, **{fd: 2 + i for i, fd in enumerate(pass_fds)}})
            socket.send_fds(conn, [request.to_json().encode()], [*theirs, *pass_fds])
            answer = json.loads(_answer(conn) or b'{"refused": "the starter ended"}')
            if "refused" in answer:
                raise WarmStartRefused(answer["refused"])
            conn.settimeout(None)
        except BaseException:
            conn.close()
            for fd in ours:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        stdin = open(ours[1], "wb") if stdin_pipe else None  # noqa: SIM115 (Popen's too)
        return cls(command, answer["pid"], conn, stdin, open(ours[0], "rb"))  # noqa: SIM115

    def poll(self) -> int | None:
        self._collect(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self._collect(0.1 if self._orphaned else left)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def _collect(self, timeout: float | None) -> None:
        """Take the exit status if the starter sends it within `timeout` (None: wait)."""
        if self.returncode is not None:
            return
        if self._orphaned:
            if not _alive(self.pid):
                self.returncode = -signal.SIGKILL  # its end was not seen: say killed
            return
        with contextlib.suppress(OSError, ValueError):  # closed by another thread meanwhile
            select.select([self._conn], [], [], timeout)
        with self._lock:
            if self.returncode is not None or self._orphaned:
                return
            try:
                data = self._conn.recv(4096, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            self._conn.close()
            if data:
                self.returncode = os.waitstatus_to_exitcode(json.loads(data)["status"])
            else:
                self._orphaned = True


def _answer(conn: socket.socket) -> bytes:
    """The starter's answer to a request; after ANSWER_TIMEOUT_S the request is withdrawn
    (the caller starts its child fresh), and a child forked meanwhile is killed: never
    two of one child."""
    try:
        return conn.recv(4096)
    except TimeoutError:
        with contextlib.suppress(OSError, ValueError):
            late = json.loads(conn.recv(4096, socket.MSG_DONTWAIT) or b"{}")
            if "pid" in late:
                os.kill(late["pid"], signal.SIGKILL)
        conn.shutdown(socket.SHUT_RDWR)  # a pid sent from now on fails: the starter kills it
        raise


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def spawn(command: list[str], *, env: dict[str, str], pass_fds: Sequence[int] = (),
          cwd: str | None = None, stdin_pipe: bool = True) -> subprocess.Popen | WarmChild:
    """Start `command` (a `module_command`) with `env` as its whole environment, stdout
    and stderr on one pipe, in its own session (a terminal's Ctrl-C reaches only its
    parent); stdin a pipe, or /dev/null."""
    module = _warm_module(command)
    warm = module is not None and env.get(OFF_ENV) != "0" and sees_no_gpu(env)
    address = _starter.address(start=warm)
    if address is not None:
        env = {**env, STARTER_ENV: address}
        if warm and os.path.exists(address):  # it listens: the engine is imported
            assert module is not None
            with contextlib.suppress(OSError, ValueError, WarmStartRefused):
                return WarmChild.start(address, command, module, env, cwd, pass_fds,
                                       stdin_pipe)
    return subprocess.Popen(
        command, pass_fds=tuple(pass_fds), env=env, cwd=cwd,
        stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def _warm_module(command: list[str]) -> str | None:
    flag = MODULE_FLAG if getattr(sys, "frozen", False) else "-m"
    if len(command) >= 3 and command[0] == sys.executable and command[1] == flag \
            and command[2] in WARM_CHILDREN:
        return command[2]
    return None


class _Starter:
    """This process's way to a warm starter: the one named in its environment (a parent's),
    or its own, started at its second child that could use one (a command that starts a
    single child never pays for a starter it would not use)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._socket: Path | None = None
        self._alive_w: int | None = None
        self._asked = 0

    def address(self, start: bool) -> str | None:
        """Where a warm starter will listen (None: none will): children are told, so
        that theirs use it too. `start`: this process could use one for a child now."""
        with self._lock:
            inherited = self._inherited()
            if inherited or os.environ.get(OFF_ENV) == "0":
                return inherited
            self._asked += start
            if self._proc is None and self._asked >= 2:
                self._start()
            return None if self._socket is None else str(self._socket)

    def start_now(self) -> None:
        """Start one now, unless this process has one or its parent's serves it."""
        with self._lock:
            if self._proc is None and not self._inherited() \
                    and os.environ.get(OFF_ENV) != "0":
                self._start()

    def _inherited(self) -> str | None:
        """The parent's starter, named in this process's environment and still there (its
        folder goes when it ends: the queue runner outlives the window's)."""
        named = os.environ.get(STARTER_ENV) if self._proc is None else None
        return named if named and os.path.isdir(os.path.dirname(named)) else None

    def _start(self) -> None:
        folder = Path(tempfile.mkdtemp(prefix="mgpu-warm-"))  # 0700: this user's only
        socket_path = folder / "starter.sock"
        alive_r, self._alive_w = os.pipe()  # never inherited: ends when this process does
        try:
            log = command_log("warm-starter")
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "w", encoding="utf-8") as output:
                self._proc = subprocess.Popen(
                    module_command(Child.WARM_STARTER, "--socket", str(socket_path),
                                   "--alive-fd", str(alive_r)),
                    pass_fds=(alive_r,), stdin=subprocess.DEVNULL, stdout=output,
                    stderr=subprocess.STDOUT, start_new_session=True,
                    env={**os.environ, **CHILD_ENV, "CUDA_VISIBLE_DEVICES": ""})
        except OSError:
            os.close(self._alive_w)
            folder.rmdir()
            return
        finally:
            os.close(alive_r)
        self._socket = socket_path
        # Every process this one starts (a CLI it runs, the queue runner) shares it, as
        # SSH_AUTH_SOCK shares an agent; it ends with this process.
        os.environ[STARTER_ENV] = str(socket_path)


_starter = _Starter()


def start_starter() -> None:
    """Start this process's warm starter now rather than at its second child: for a process
    whose own children, and theirs, will start many (a test session's worker, whose tests
    run CLIs that each start a worker and its export check)."""
    _starter.start_now()


__all__ = ["OFF_ENV", "STARTER_ENV", "WarmChild", "WarmStartRefused", "spawn", "start_starter"]
