"""The warm starter's side: fork children from a process that has already imported the engine.

Importing TensorFlow and Keras takes 2-3 CPU-seconds, more than the whole job of many
children (an export's verifier, a model probe, an evaluation of a small set). A warm
starter imports them once (processes/warm_starter.py) and then serves requests on a Unix
socket: each request is a child entry's module, its arguments, environment and folder,
and its standard streams and inherited pipes as file descriptors (SCM_RIGHTS). It forks;
the fork becomes that child (its own session, the requested descriptors at the requested
numbers, the environment replaced, the module run as `__main__`), and the starter reports
its pid, and later its exit status, on the request's connection (the client side is
core/children/warm_start.py).

A fork is only like a fresh start where the environment the preloaded modules read while
they were imported is the same: a request whose environment differs from the starter's
in an early variable (`early`) is refused (the client then starts the child fresh). So is
one from a process a fork would not be a child of: in other namespaces (a container,
`unshare`: the fork would see the starter's mounts), another cgroup, user, groups,
capabilities or higher resource limits (`peer_of`); the fork takes its umask, priority and
limits. Forking is safe here because the starter has run nothing: no engine op, no device
query, no CUDA (it sees no GPU), only imports; its single extra native thread is
OpenBLAS's, which re-creates its pool after a fork.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import resource
import selectors
import signal
import socket
import struct
import sys
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path

from mgpu_gui.core.children.launch import run_as_main
from mgpu_gui.core.devices.nvml import FAKE_GPUS_VAR

# What Python, NumPy's BLAS, TensorFlow and Keras read from the environment while they are
# imported (prefixes, and names); the rest (CUDA_VISIBLE_DEVICES, TF_CONFIG, XLA_FLAGS,
# the app's own MGPU_GUI_* settings) is read when a child uses it, after the fork.
EARLY_PREFIXES = ("PYTHON", "LD_", "KERAS_", "TF_", "OMP_", "OPENBLAS_", "MKL_", "GOTO")
EARLY_NAMES = frozenset({"HOME"})  # Keras reads ~/.keras/keras.json
LATE_NAMES = frozenset({"TF_CONFIG", "TF_XLA_FLAGS", "TF_GPU_ALLOCATOR",
                        "TF_FORCE_GPU_ALLOW_GROWTH"})
MAX_REQUEST_BYTES = 1 << 20
MAX_FDS = 16
REQUEST_TIMEOUT_S = 5.0
EVENT = "mgpu_gui.warm_start"  # audited in each warm child: (module, engines already imported)


# What a child inherits from the process that starts it, beyond its environment: a request
# from a process that differs in any of these is refused (a fork would get the starter's).
NAMESPACES = ("mnt", "pid", "net", "user", "ipc", "uts", "cgroup")
STATUS_FIELDS = ("Groups", "NoNewPrivs", "Seccomp", "CapInh", "CapPrm", "CapEff", "CapBnd")


# Each resource once (RLIMIT_OFILE is RLIMIT_NOFILE), in a fixed order.
LIMITS = tuple(sorted({getattr(resource, name) for name in dir(resource)
                       if name.startswith("RLIMIT_")}))


@dataclass(frozen=True)
class Peer:
    """What the fork takes from the requesting process: its umask, priority and resource
    limits (soft, hard: one pair per LIMITS entry)."""

    umask: int
    nice: int
    limits: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Identity:
    """What a process passes on to the children it starts, besides its environment."""

    uid: int
    gid: int
    namespaces: tuple[str, ...]
    cgroup: str
    limits: tuple[tuple[int, int], ...]
    status: dict[str, str]
    nice: int

    @classmethod
    def of(cls, pid: int | str, uid: int, gid: int) -> Identity:
        """`pid`'s, from /proc ("self": this process's); OSError if it cannot be read."""
        proc = Path("/proc", str(pid))
        fields = (line.partition(":") for line in (proc / "status").read_text().splitlines())
        status = {name: value.strip() for name, _, value in fields}
        number = os.getpid() if pid == "self" else int(pid)
        return cls(uid, gid, tuple(os.readlink(proc / "ns" / n) for n in NAMESPACES),
                   (proc / "cgroup").read_text(),
                   tuple(resource.prlimit(number, limit) for limit in LIMITS), status,
                   os.getpriority(os.PRIO_PROCESS, number))

    def difference(self, theirs: Identity) -> str | None:
        """Why a fork of this process would not be like a child of `theirs`, if it would
        not (a process may lower its priority and its limits, never raise them)."""
        if (theirs.uid, theirs.gid) != (self.uid, self.gid):
            return "it runs as another user"
        pairs = zip(NAMESPACES, self.namespaces, theirs.namespaces, strict=True)
        for namespace, mine, its in pairs:
            if mine != its:
                return f"it runs in another {namespace} namespace (a container, or unshare)"
        if theirs.cgroup != self.cgroup:
            return "it runs with another cgroup"
        if any(_above(hard, my_hard) or _above(soft, my_hard) for (soft, hard), (_, my_hard)
               in zip(theirs.limits, self.limits, strict=True)):
            return "it runs with a higher resource limit than the warm process"
        for field in STATUS_FIELDS:
            if theirs.status.get(field) != self.status.get(field):
                return f"its {field} differ from the warm process's"
        if theirs.nice < self.nice:
            return "it runs at a higher priority than the warm process"
        return None


def _above(limit: int, other: int) -> bool:
    return other != resource.RLIM_INFINITY and (limit == resource.RLIM_INFINITY
                                               or limit > other)


def peer_of(conn: socket.socket, own: Identity) -> Peer | str:
    """The requesting process's umask, priority and limits, or why a fork of this process (whose
    identity is `own`) would not be like a child of that one."""
    pid, uid, gid = struct.unpack("3i", conn.getsockopt(
        socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    try:
        theirs = Identity.of(pid, uid, gid)
    except OSError as error:
        return f"its process could not be looked at ({error.strerror})"
    return own.difference(theirs) or Peer(int(theirs.status["Umask"], 8), theirs.nice,
                                          theirs.limits)


def sees_no_gpu(env: dict[str, str]) -> bool:
    """A child with this environment never starts CUDA, like the warm process: its
    CUDA_VISIBLE_DEVICES is empty, or its GPUs are fake (tests: the training worker turns
    them into CPU replicas, and no GPU matches their made-up ids)."""
    return env.get("CUDA_VISIBLE_DEVICES") == "" or bool(env.get(FAKE_GPUS_VAR))


def early(name: str) -> bool:
    return name not in LATE_NAMES and (name in EARLY_NAMES or name.startswith(EARLY_PREFIXES))


def early_difference(mine: dict[str, str], theirs: dict[str, str]) -> str | None:
    """The first early variable set differently in `theirs` (None: a fork is like a start).

    `mine` holds the KERAS_BACKEND that Keras chose in the warm process, which a child
    without one would have chosen too. PYTHONPATH counts by its entries: a child that
    names the same folders in another order or twice finds the same modules."""
    if "KERAS_BACKEND" in mine:
        theirs = {"KERAS_BACKEND": mine["KERAS_BACKEND"], **theirs}
    for name in sorted(n for n in {*mine, *theirs} if early(n)):
        if name == "PYTHONPATH":
            if _entries(mine.get(name)) != _entries(theirs.get(name)):
                return name
        elif mine.get(name) != theirs.get(name):
            return name
    return None


def _entries(path: str | None) -> set[str]:
    return {entry for entry in (path or "").split(os.pathsep) if entry}


@dataclass(frozen=True)
class Request:
    """One child to start: `fds` maps each number the child gets to the index of the
    descriptor sent with the request."""

    module: str
    args: tuple[str, ...]
    env: dict[str, str]
    cwd: str
    fds: dict[int, int]

    @classmethod
    def from_json(cls, text: str) -> Request:
        data = json.loads(text)
        return cls(data["module"], tuple(data["args"]), dict(data["env"]), data["cwd"],
                   {int(k): int(v) for k, v in data["fds"].items()})

    def to_json(self) -> str:
        return json.dumps({"module": self.module, "args": list(self.args), "env": self.env,
                           "cwd": self.cwd, "fds": self.fds})


def serve(listener: socket.socket, alive_fd: int, modules: frozenset[str]) -> None:
    """Start the children asked for on `listener` until `alive_fd` (the owner's pipe)
    ends, then until the last of them has ended."""
    Server(listener, alive_fd, modules).loop()


class Server:
    def __init__(self, listener: socket.socket, alive_fd: int, modules: frozenset[str]):
        self.listener = listener
        self.alive_fd = alive_fd
        self.modules = modules
        self.env = dict(os.environ)
        self.identity = Identity.of("self", os.getuid(), os.getgid())  # what forks inherit
        self.children: dict[int, socket.socket] = {}
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        self.selector = selectors.DefaultSelector()

    def loop(self) -> None:
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the selector
        self.selector.register(self.listener, selectors.EVENT_READ, "listener")
        self.selector.register(self.alive_fd, selectors.EVENT_READ, "alive")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "wake")
        serving = True
        while serving or self.children:
            for key, _ in self.selector.select():
                if key.data == "listener":
                    with contextlib.suppress(OSError):
                        conn, _ = self.listener.accept()
                        conn.settimeout(REQUEST_TIMEOUT_S)  # a client that says nothing
                        self.start(conn)
                elif key.data == "alive":
                    self.selector.unregister(self.alive_fd)
                    self.selector.unregister(self.listener)
                    self.listener.close()
                    serving = False
                else:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.wake_r, 512)
            self.reap()

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.send(json.dumps({"status": status}).encode())
                conn.close()

    def start(self, conn: socket.socket) -> None:
        """Fork the child `conn` asks for; answer its pid, or why not."""
        fds: list[int] = []
        try:
            message, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST_BYTES, MAX_FDS)
            request = Request.from_json(message.decode())
            peer = peer_of(conn, self.identity)
            refused = peer if isinstance(peer, str) else self.refusal(request, fds, conn)
            if refused:
                with contextlib.suppress(OSError):  # its log is for a curious user only
                    print(f"not forked: {request.module} ({refused})", flush=True)
                conn.send(json.dumps({"refused": refused}).encode())
                conn.close()
                return
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(OSError):
                    stream.flush()
            pid = os.fork()
            if pid == 0:
                assert isinstance(peer, Peer)
                self.become(request, peer, fds, conn)  # never returns
            self.children[pid] = conn
            try:
                conn.send(json.dumps({"pid": pid}).encode())
            except OSError:  # the client gave up waiting: it starts its child fresh
                os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError, KeyError) as error:
            with contextlib.suppress(OSError):
                conn.send(json.dumps({"refused": f"{type(error).__name__}: {error}"}).encode())
            conn.close()
        finally:
            for fd in fds:
                os.close(fd)

    def refusal(self, request: Request, fds: list[int], conn: socket.socket) -> str | None:
        if request.module not in self.modules:
            return f"{request.module} is not served here"
        if set(request.fds.values()) != set(range(len(fds))):
            return "the descriptors sent are not the ones named"
        held = self.held_fds() - {*fds, conn.fileno()}  # what a preloaded module opened
        clash = sorted(held & set(request.fds))
        if clash:
            return f"descriptor {clash[0]} is in use in the warm process"
        if not sees_no_gpu(request.env):
            return "it may use a GPU (CUDA is only ever started in a fresh process)"
        name = early_difference(self.env, request.env)
        if name is not None:
            return f"{name} differs from the warm process's"
        return None

    def held_fds(self) -> set[int]:
        """Descriptors open here beyond the standard three and the starter's own (which
        the fork closes)."""
        own = {self.listener.fileno(), self.selector.fileno(), self.alive_fd, self.wake_r,
               self.wake_w, *(conn.fileno() for conn in self.children.values())}
        with os.scandir("/proc/self/fd") as entries:
            listed = {int(entry.name) for entry in entries}
        return {fd for fd in listed - own - {0, 1, 2} if _is_open(fd)}  # less the listing's

    def become(self, request: Request, peer: Peer, fds: list[int],
               conn: socket.socket) -> None:
        """In the fork: drop the starter's own descriptors and signal handling, take the
        request's, and run its module as a fresh interpreter would."""
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
                signal.signal(signum, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self.selector.close()
            for sock in (self.listener, conn, *self.children.values()):
                sock.close()
            for fd in (self.alive_fd, self.wake_r, self.wake_w):
                with contextlib.suppress(OSError):
                    os.close(fd)
            _place_fds(request.fds, fds)
            os.setsid()
            os.umask(peer.umask)
            if peer.nice != os.getpriority(os.PRIO_PROCESS, 0):
                os.setpriority(os.PRIO_PROCESS, 0, peer.nice)
            for limit, pair in zip(LIMITS, peer.limits, strict=True):
                if resource.getrlimit(limit) != pair:
                    resource.setrlimit(limit, pair)
            os.chdir(request.cwd)
            os.environ.clear()
            os.environ.update(request.env)
            sys.path[0] = request.cwd  # as `python -m` has it
            if "numpy" in sys.modules:  # a fresh process seeds it from the OS
                sys.modules["numpy"].random.seed()
            sys.argv = [request.module, *request.args]
            sys.audit(EVENT, request.module,
                      tuple(m for m in ("tensorflow", "keras", "jax") if m in sys.modules))
            code = _run_to_exit_code(request.module)
        finally:
            if code < 0:
                signal.signal(-code, signal.SIG_DFL)
                os.kill(os.getpid(), -code)
            os._exit(code if code >= 0 else 1)


def _place_fds(targets: dict[int, int], fds: list[int]) -> None:
    """Put the descriptor sent at index i at the number the child expects."""
    above = max([*targets, *fds]) + 1  # so that no move overwrites a target
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, above) for fd in fds]
    for fd in fds:
        os.close(fd)
    for number, index in targets.items():
        os.dup2(moved[index], number)
    for fd in moved:
        if fd not in targets:
            os.close(fd)


def _is_open(fd: int) -> bool:
    try:
        fcntl.fcntl(fd, fcntl.F_GETFD)
    except OSError:
        return False
    return True


def _run_to_exit_code(module: str) -> int:
    """Run `module` as `python -m` would, to the same exit code: SystemExit's, 1 after an
    uncaught exception (its traceback on stderr), and the same end (threads, atexit)."""
    code = 0
    try:
        run_as_main(module)
    except SystemExit as done:
        if done.code is None:
            code = 0
        elif isinstance(done.code, int):
            code = done.code
        else:
            print(done.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:  # Python ends killed by the SIGINT it did not handle
        code = -signal.SIGINT
    except BaseException:
        traceback.print_exc()
        code = 1
    with contextlib.suppress(BaseException):
        threading._shutdown()  # type: ignore[attr-defined]  # what interpreter exit does
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    return code


__all__ = ["EVENT", "Identity", "Peer", "Request", "early_difference", "peer_of",
           "sees_no_gpu", "serve"]
