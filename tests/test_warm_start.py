"""Children forked by the warm starter are started as a fresh interpreter would start them.

The fast tests serve tests/helpers/warm_child.py from a starter that preloads nothing; the
slow one starts the app's own starter (TensorFlow and Keras imported) and forks an export
verifier from it.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from mgpu_gui.core.children import runner, warm_start
from mgpu_gui.core.children.launch import Child, module_command
from mgpu_gui.core.children.runner import ChildProcesses
from mgpu_gui.core.children.warm_server import early_difference, sees_no_gpu
from mgpu_gui.core.children.warm_start import (
    OFF_ENV,
    STARTER_ENV,
    WarmChild,
    WarmStartRefused,
    spawn,
)
from tests.helpers.waiting import wait_for

ROOT = Path(__file__).resolve().parents[1]
MODULE = "tests.helpers.warm_child"
SERVER = """
import socket, sys
from mgpu_gui.core.children.warm_server import serve
listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
listener.bind(sys.argv[1])
listener.listen(8)
print("ready", flush=True)
serve(listener, int(sys.argv[2]), frozenset({"tests.helpers.warm_child"}))
"""


class Starter:
    def __init__(self, folder: Path, nofile: tuple[int, int] | None = None):
        """`nofile`: the starter's own open-file limits (soft, hard), where not this
        process's."""
        alive_r, self.alive_w = os.pipe()
        self.address = str(folder / "starter.sock")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, self.address, str(alive_r)], pass_fds=(alive_r,),
            stdout=subprocess.PIPE, cwd=ROOT, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
            preexec_fn=nofile and (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, nofile)))
        os.close(alive_r)
        assert self.proc.stdout is not None and self.proc.stdout.readline() == b"ready\n"
        self.proc.stdout.close()


@pytest.fixture
def starter(tmp_path):
    made = Starter(tmp_path)
    yield made
    if made.proc.poll() is None:
        os.close(made.alive_w)
        made.proc.wait(timeout=20)


def child_env(**changes: str) -> dict[str, str]:
    return {**os.environ, "CUDA_VISIBLE_DEVICES": "", **changes}


def start(starter: Starter, request: dict, env: dict[str, str] | None = None,
          cwd: str | None = None) -> tuple[WarmChild, dict]:
    events_r, events_w = os.pipe()
    command = [sys.executable, "-m", MODULE, "--events-fd", str(events_w), "--flag"]
    try:
        child = WarmChild.start(starter.address, command, MODULE, env or child_env(), cwd,
                                (events_w,), stdin_pipe=True)
    except BaseException:
        os.close(events_r)
        raise
    finally:
        os.close(events_w)
    assert child.stdin is not None
    child.stdin.write(json.dumps(request).encode())
    child.stdin.close()
    with os.fdopen(events_r, encoding="utf-8") as events:
        report = json.loads(events.readline() or "{}")
    return child, report


def output(child: WarmChild) -> bytes:
    with child.stdout:
        return child.stdout.read()


def test_a_warm_child_gets_its_arguments_environment_folder_streams_and_session(
        starter, tmp_path):
    env = child_env(MGPU_GUI_SOMETHING="late")
    child, report = start(starter, {"exit": 3}, env=env, cwd=str(tmp_path))
    assert child.wait(timeout=20) == 3
    assert report["argv"] == ["--events-fd", report["argv"][1], "--flag"]
    assert report["env"] == env  # the whole environment, not the starter's
    assert report["cwd"] == report["path0"] == str(tmp_path)  # as `python -m` has it
    assert report["pid"] == report["sid"] == child.pid  # its own session
    assert report["sigint"]  # Ctrl-C raises KeyboardInterrupt, as in a fresh interpreter
    assert output(child).split() == [b"out", b"err"]  # stdout and stderr on one pipe


CLIENT = """
import json, os, resource, sys
from mgpu_gui.core.children.warm_start import WarmChild, WarmStartRefused
address, how = sys.argv[1], sys.argv[2]
if how == "nice":
    os.nice(3)
    os.umask(0o027)
elif how == "limits":
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft - 1, hard))
events_r, events_w = os.pipe()
command = [sys.executable, "-m", "tests.helpers.warm_child", "--events-fd", str(events_w)]
env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
try:
    child = WarmChild.start(address, command, command[2], env, None, (events_w,), False)
except WarmStartRefused as refused:
    print(json.dumps({"refused": str(refused)}))
    sys.exit()
os.close(events_w)
report = json.loads(os.fdopen(events_r).readline())
child.wait()
print(json.dumps({key: report[key] for key in ("nice", "umask", "nofile")}))
"""


def client(starter: Starter, how: str, *prefix: str) -> dict:
    """What a request from another process (`how` it differs, run under `prefix`) got."""
    done = subprocess.run([*prefix, sys.executable, "-c", CLIENT, starter.address, how],
                          capture_output=True, text=True, cwd=ROOT, timeout=60, check=True)
    return json.loads(done.stdout)


def test_a_warm_child_has_its_requesters_priority_umask_and_lower_limits(starter):
    """A process may lower its limits (test_faults' crashes allow no core file): its
    child has them, forked or not."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert client(starter, "nice") == {"nice": os.getpriority(os.PRIO_PROCESS, 0) + 3,
                                       "umask": 0o027, "nofile": [soft, hard]}
    assert client(starter, "limits")["nofile"] == [soft - 1, hard]


@pytest.mark.parametrize(("how", "prefix", "why"), [
    ("limits", (), "a higher resource limit"),
    ("namespace", ("unshare", "--user", "--map-root-user", "--mount"), "namespace")])
def test_a_request_from_a_process_a_fork_would_not_be_like_is_refused(tmp_path, how, prefix,
                                                                       why):
    """A child started by a process in a container, under `unshare` (test_faults' full
    disk), allowed more than the starter..., must be that process's child: the starter's
    fork would see the starter's mounts (a folder that was not there: CI 20), and could
    not raise its own hard limits."""
    if prefix and subprocess.run([*prefix, "true"], capture_output=True).returncode:
        pytest.skip("unshare is not allowed here")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    starter = Starter(tmp_path, nofile=(soft - 2, hard - 2) if how == "limits" else None)
    try:
        assert why in client(starter, how, *prefix)["refused"]
    finally:
        os.close(starter.alive_w)
        starter.proc.wait(timeout=20)


@pytest.mark.parametrize(("request_", "code", "said"), [
    ({}, 0, b""), ({"exit": 7}, 7, b""), ({"raise": True}, 1, b"RuntimeError: asked to fail"),
    ({"interrupt": True}, -signal.SIGINT, b"")])
def test_a_warm_child_ends_with_the_code_a_fresh_one_would(starter, request_, code, said):
    child, _ = start(starter, request_)
    assert child.wait(timeout=20) == code
    assert said in output(child)
    assert child.poll() == code


def test_a_killed_warm_child_says_so_and_wait_can_time_out(starter):
    child, _ = start(starter, {"sleep": 60})
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0.2)
    assert child.poll() is None
    child.kill()
    assert child.wait(timeout=20) == -signal.SIGKILL
    child.kill()  # ended: nothing to do
    output(child)


def test_the_starter_refuses_what_a_fork_would_get_wrong(starter):
    refusals = {
        "another engine's environment": child_env(TF_ENABLE_ONEDNN_OPTS="0"),
        "a GPU": {**os.environ, "CUDA_VISIBLE_DEVICES": "0"},
    }
    for env in refusals.values():
        with pytest.raises(WarmStartRefused):
            start(starter, {}, env=env)
    events_r, events_w = os.pipe()
    try:
        with pytest.raises(WarmStartRefused, match="not served"):
            WarmChild.start(starter.address, [sys.executable, "-m", "json.tool"], "json.tool",
                            child_env(), None, (events_w,), stdin_pipe=False)
    finally:
        os.close(events_r)
        os.close(events_w)
    child, _ = start(starter, {})  # and goes on serving
    assert child.wait(timeout=20) == 0
    output(child)
    # A test's fake GPUs (their made-up ids in CUDA_VISIBLE_DEVICES) are no GPU: forked.
    fake = child_env(CUDA_VISIBLE_DEVICES="GPU-fake-0", MGPU_GUI_FAKE_GPUS="gpus.json")
    child, _ = start(starter, {}, env=fake)
    assert child.wait(timeout=20) == 0
    output(child)


def test_only_an_empty_device_list_or_fake_gpus_see_no_gpu():
    assert sees_no_gpu({"CUDA_VISIBLE_DEVICES": ""})
    assert sees_no_gpu({"CUDA_VISIBLE_DEVICES": "GPU-1", "MGPU_GUI_FAKE_GPUS": "gpus.json"})
    assert not sees_no_gpu({})  # every GPU
    assert not sees_no_gpu({"CUDA_VISIBLE_DEVICES": "0"})
    assert not sees_no_gpu({"CUDA_VISIBLE_DEVICES": "0", "MGPU_GUI_FAKE_GPUS": ""})


def test_the_starter_ends_after_its_owner_and_its_last_child(starter):
    child, _ = start(starter, {"sleep": 1})
    os.close(starter.alive_w)  # the owner ended
    wait_for(lambda: not listening(starter.address), 10, "the starter to stop listening")
    assert starter.proc.poll() is None  # while its child runs
    assert child.wait(timeout=20) == 0  # which still reports its end
    assert starter.proc.wait(timeout=20) == 0
    output(child)


def listening(address: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn:
        try:
            conn.connect(address)
        except OSError:
            return False
        return True


def test_spawn_forks_what_the_starter_serves_and_starts_the_rest_fresh(starter, monkeypatch):
    monkeypatch.delenv(OFF_ENV)  # off in fast tests (conftest); this starter has no engine
    monkeypatch.setattr(warm_start._starter, "address", lambda start: starter.address)
    monkeypatch.setattr(warm_start, "WARM_CHILDREN", frozenset({MODULE}))
    started = []
    for env in (child_env(), child_env(TF_ENABLE_ONEDNN_OPTS="0"), child_env(
            MGPU_GUI_WARM_START="0")):
        events_r, events_w = os.pipe()
        proc = spawn([sys.executable, "-m", MODULE, "--events-fd", str(events_w)], env=env,
                     pass_fds=(events_w,), cwd=str(ROOT))
        os.close(events_w)
        proc.stdin.write(b"{}")
        proc.stdin.close()
        with os.fdopen(events_r, encoding="utf-8") as events:
            report = json.loads(events.readline())
        assert proc.wait(timeout=60) == 0
        proc.stdout.close()
        assert report["env"][STARTER_ENV] == starter.address  # for its own children
        started.append(type(proc))
    assert started == [WarmChild, subprocess.Popen, subprocess.Popen]


def test_a_process_shares_its_parents_starter_and_starts_its_own_at_its_second_child(
        monkeypatch, tmp_path):
    monkeypatch.delenv(OFF_ENV)
    started = []
    monkeypatch.setattr(warm_start._Starter, "_start", lambda self: started.append(self))
    folder = tmp_path / "parents"
    folder.mkdir()
    monkeypatch.setenv(STARTER_ENV, str(folder / "starter.sock"))
    inherited = warm_start._Starter()
    assert [inherited.address(start=True) for _ in range(3)] == [str(folder / "starter.sock")] * 3
    folder.rmdir()  # the parent's starter ended (the queue runner outlived the window)
    assert [inherited.address(start=True) for _ in range(2)] == [None, None]
    assert started == [inherited]  # at its second child
    monkeypatch.delenv(STARTER_ENV)
    own = warm_start._Starter()
    assert own.address(start=False) is None and own.address(start=True) is None
    assert started == [inherited]  # a child that could not use it does not count
    own.address(start=True)
    assert started == [inherited, own]


def test_only_what_imports_read_must_match():
    mine = {"PYTHONPATH": "/a:/b", "HOME": "/h", "KERAS_BACKEND": "tensorflow", "X": "1"}
    assert early_difference(mine, {"PYTHONPATH": "/b:/a:/b", "HOME": "/h", "Y": "2"}) is None
    assert early_difference(mine, {**mine, "KERAS_BACKEND": "jax"}) == "KERAS_BACKEND"
    assert early_difference(mine, {**mine, "HOME": "/elsewhere"}) == "HOME"
    assert early_difference(mine, {**mine, "TF_CONFIG": "{}", "XLA_FLAGS": "x",
                                   "CUDA_VISIBLE_DEVICES": "", "MGPU_GUI_STORE": "s"}) is None
    assert early_difference(mine, {**mine, "OMP_NUM_THREADS": "4"}) == "OMP_NUM_THREADS"


@pytest.mark.slow
def test_the_apps_starter_forks_engine_children_once_it_is_ready(monkeypatch, tmp_path):
    """The first two children start fresh (the second starts the starter, which imports
    the engine meanwhile); the next ones are forked, answer the same, and start in a
    fraction of the time."""
    own = warm_start._Starter()
    monkeypatch.setattr(warm_start, "_starter", own)
    monkeypatch.delenv(STARTER_ENV, raising=False)
    request = {"format": "keras", "path": str(tmp_path / "missing.keras"),
               "x": str(tmp_path / "missing.npy"), "y": str(tmp_path / "y.npz"),
               "safe_mode": True, "custom_objects": None}
    kinds, answers, seconds = [], [], []

    def recording(*args, **kwargs):
        proc = spawn(*args, **kwargs)
        kinds.append(type(proc))
        return proc

    monkeypatch.setattr(runner, "spawn", recording)

    def verify():
        children = ChildProcesses()
        began = time.monotonic()
        ended = children.run(
            lambda fd: module_command(Child.EXPORT_VERIFIER, "--events-fd", str(fd)),
            request, {"CUDA_VISIBLE_DEVICES": ""}, lambda message: message["message"])
        seconds.append(time.monotonic() - began)
        answers.append(ended.result)

    try:
        verify()
        verify()
        assert os.environ[STARTER_ENV] == own.address(start=False)  # for what it starts
        wait_for(lambda: os.path.exists(os.environ[STARTER_ENV]), 120, "the starter")
        verify()
        verify()
    finally:
        if own._proc is not None:
            os.close(own._alive_w)
            own._proc.wait(timeout=30)
    assert len(set(answers)) == 1 and "missing.npy" in answers[0]
    assert kinds == [subprocess.Popen, subprocess.Popen, WarmChild, WarmChild]
    assert max(seconds[2:]) < min(seconds[:2]) / 3


@pytest.mark.slow
def test_the_apps_starter_leaves_no_folder_when_it_is_terminated(tmp_path):
    folder = Path(tempfile.mkdtemp(prefix="mgpu-warm-", dir=tmp_path))
    alive_r, alive_w = os.pipe()
    starter = subprocess.Popen(
        module_command(Child.WARM_STARTER, "--socket", str(folder / "starter.sock"),
                       "--alive-fd", str(alive_r)), pass_fds=(alive_r,),
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    os.close(alive_r)
    try:
        wait_for(lambda: (folder / "starter.sock").exists(), 120, "the starter")
        starter.terminate()
        assert starter.wait(timeout=30) == 0
    finally:
        os.close(alive_w)
        if starter.poll() is None:
            starter.kill()
            starter.wait()
    assert not folder.exists()
