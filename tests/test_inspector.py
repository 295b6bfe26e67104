"""The file inspector: untrusted model and data files read in a warm child.

Answers equal the in-process functions'; a child that hangs, crashes or is
killed mid-request costs one message naming the file and is replaced; a seeded
fuzz of damaged files ends in a result or a ModelError/DataError every time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import h5py
import pytest

from mgpu_gui.core.children.inspector import FileInspector
from mgpu_gui.core.datasets.inspection import inspect_data
from mgpu_gui.core.errors import DataError, ModelError
from mgpu_gui.core.inspect_request import InspectKind
from mgpu_gui.core.modelfiles.inspection import inspect_model_file
from tests.helpers.fuzzed_files import fuzz_cases, valid_files, zip_bomb
from tests.helpers.waiting import wait_for

FUZZ_CASES = 300


@pytest.fixture
def inspector():
    with FileInspector() as inspector:
        yield inspector


def _dense(name: str, inbound: str, units: int = 3) -> dict:
    return {"class_name": "Dense", "name": name, "config": {"name": name, "units": units},
            "inbound_nodes": [[[inbound, 0, 0, {}]]]}


def _wrapper_config() -> dict:
    """A Keras 2 multi_gpu_model wrapper: 2 slicing Lambdas, one template, a head after."""
    template = {"class_name": "Sequential", "name": "template", "config": {
        "name": "template", "layers": [
            {"class_name": "InputLayer", "config": {"name": "t_in", "batch_input_shape":
                                                    [None, 4]}},
            {"class_name": "Dense", "config": {"name": "t_out", "units": 3}}]},
        "inbound_nodes": [[["slice_0", 0, 0, {}]], [["slice_1", 0, 0, {}]]]}
    return {"class_name": "Model", "config": {"name": "wrapped", "layers": [
        {"class_name": "InputLayer", "name": "x", "config": {"name": "x",
                                                             "batch_input_shape": [None, 4]},
         "inbound_nodes": []},
        {"class_name": "Lambda", "name": "slice_0", "config": {"name": "slice_0"},
         "inbound_nodes": [[["x", 0, 0, {}]]]},
        {"class_name": "Lambda", "name": "slice_1", "config": {"name": "slice_1"},
         "inbound_nodes": [[["x", 0, 0, {}]]]},
        template,
        {"class_name": "Concatenate", "name": "merged", "config": {"name": "merged", "axis": 0},
         "inbound_nodes": [[["template", 0, 0, {}], ["template", 1, 0, {}]]]},
        _dense("head", "merged", units=3)],
        "input_layers": [["x", 0, 0]], "output_layers": [["head", 0, 0]]}}


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_answers_equal_the_in_process_functions(inspector, tmp_path):
    h5_path = tmp_path / "wrapped.h5"
    with h5py.File(h5_path, "w") as h5:
        h5.attrs["model_config"] = json.dumps(_wrapper_config())
        h5.attrs["training_config"] = json.dumps({"loss": "mse"})
        h5.create_group("model_weights")
    py_path = tmp_path / "net.py"
    py_path.write_text("def build_model(input_shape, num_classes):\n    ...\n")
    models = [h5_path, py_path, _write(tmp_path / "m.h5", valid_files(".h5", 0)[0]),
              _write(tmp_path / "m.keras", valid_files(".keras", 0)[1])]
    for path in models:
        assert inspector.inspect_model(path) == inspect_model_file(path)
    assert inspector.inspect_model(h5_path).wrapper.after_layers == (("head", "Dense"),)
    for index, data in enumerate(valid_files(".npz", 0)):
        path = _write(tmp_path / f"d{index}.npz", data)
        assert inspector.inspect_data(path, image_size=(8, 8)) == inspect_data(path)
    assert inspector.inspect_data("demo") == inspect_data("demo")
    (tmp_path / "images" / "cat").mkdir(parents=True)
    (tmp_path / "images" / "cat" / "a.png").write_bytes(b"")
    folder = inspector.inspect_data(tmp_path / "images", image_size=(8, 8))
    assert folder.class_names == ("cat",) and folder.x_shape == (8, 8, 3)
    assert inspector.starts == 1 and inspector.crashes == inspector.watchdog_kills == 0


def test_user_errors_keep_their_type_and_message(inspector, tmp_path):
    truncated = _write(tmp_path / "cut.h5", valid_files(".h5", 0)[0][:1000])
    for path in (tmp_path / "missing.keras", tmp_path / "notes.txt", truncated):
        with pytest.raises(ModelError) as in_process:
            inspect_model_file(path)
        with pytest.raises(ModelError) as in_child:
            inspector.inspect_model(path)
        assert str(in_child.value) == str(in_process.value)
    bad_npz = _write(tmp_path / "bad.npz", b"not a zip")
    with pytest.raises(DataError, match="not an .npz file"):
        inspector.inspect_data(bad_npz)
    assert inspector.starts == 1


def test_answers_are_cached_until_the_file_changes(inspector, tmp_path):
    path = _write(tmp_path / "m.h5", valid_files(".h5", 0)[0])
    broken = _write(tmp_path / "broken.keras", b"PK\x03\x04 cut short")
    first = inspector.inspect_model(path)
    with pytest.raises(ModelError, match="truncated or damaged") as error:
        inspector.inspect_model(broken)
    pid = inspector.pid
    os.kill(pid, signal.SIGKILL)  # gone while idle: cached answers need no child
    wait_for(lambda: _status(pid, "State")[:1] in ("Z", ""), 10, "the idle child to die")
    assert inspector.inspect_model(path) == first
    with pytest.raises(ModelError) as again:
        inspector.inspect_model(broken)
    assert str(again.value) == str(error.value)
    assert inspector.starts == 1
    _write(path, valid_files(".h5", 0)[1])  # another file under the same name
    assert inspector.inspect_model(path).output_units == 10 != first.output_units
    assert inspector.starts == 2 and inspector.crashes == 0  # died idle: no file's fault


def test_a_hanging_read_is_stopped_at_the_deadline(tmp_path):
    fifo = tmp_path / "stalled.npz"
    os.mkfifo(fifo)  # opening it blocks until a writer comes: a stalled drive
    valid = _write(tmp_path / "d.npz", valid_files(".npz", 0)[0])
    with FileInspector(deadline_s=0.5) as inspector:
        with pytest.raises(DataError, match=r"could not read stalled.npz within 0.5 s"):
            inspector.inspect_data(fifo)
        assert inspector.watchdog_kills == 1 and inspector.pid is None
        assert inspector.inspect_data(valid).train_samples == 40
        assert inspector.starts == 2


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV, signal.SIGABRT])
def test_a_child_killed_mid_request_costs_one_message(tmp_path, sig):
    bomb = _write(tmp_path / "bomb.npz", zip_bomb(".npz"))
    valid = _write(tmp_path / "d.npz", valid_files(".npz", 0)[0])
    # A roomy cap and deadline: the bomb keeps the child busy until the signal comes.
    with FileInspector(deadline_s=60, memory_mib=4096) as inspector:
        inspector.inspect_data(valid)
        pid = inspector.pid
        raised: list[BaseException] = []

        def ask():
            try:
                inspector.inspect_data(bomb)
            except BaseException as error:  # noqa: BLE001 - handed to the test thread
                raised.append(error)

        asker = threading.Thread(target=ask)
        asker.start()
        wait_for(lambda: _memory(pid, "VmRSS") > 200 << 20, 30, "the child to be reading")
        os.kill(pid, sig)
        asker.join(30)
        assert len(raised) == 1 and isinstance(raised[0], DataError), raised
        assert str(raised[0]) == (f"the file reader crashed while reading bomb.npz (it was "
                                  f"killed by {sig.name}); the file is probably damaged.")
        assert inspector.crashes == 1 and inspector.watchdog_kills == 0
        fresh = _write(tmp_path / "e.npz", valid_files(".npz", 0)[1])
        assert inspector.inspect_data(fresh).train_samples == 40
        assert inspector.starts == 2 and inspector.pid != pid
    assert not Path(f"/proc/{pid}").exists()


def test_a_zip_bomb_ends_in_a_memory_message(tmp_path):
    # The memory cap, not the 2 s watchdog, must stop it: a roomy deadline, so that a busy
    # machine (three test workers on two cores) cannot make the watchdog answer first.
    with FileInspector(deadline_s=30) as inspector:
        with pytest.raises(DataError, match=r"bomb.npz is too large to read.*512 MiB"):
            inspector.inspect_data(_write(tmp_path / "bomb.npz", zip_bomb(".npz")))
        with pytest.raises(ModelError, match=r"bomb.keras is too large to read"):
            inspector.inspect_model(_write(tmp_path / "bomb.keras", zip_bomb(".keras")))
        assert inspector.starts == 1  # the child survived its MemoryErrors


def test_threads_share_one_child(inspector, tmp_path):
    paths = [_write(tmp_path / f"m{i}.keras", valid_files(".keras", 0)[i % 2]) for i in range(8)]
    results: dict[int, int | None] = {}
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(
        i, inspector.inspect_model(paths[i]).output_units)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == {i: (2, 5)[i % 2] for i in range(8)} and inspector.starts == 1


def test_close_leaves_no_process(tmp_path):
    inspector = FileInspector()
    inspector.inspect_model(_write(tmp_path / "m.h5", valid_files(".h5", 0)[0]))
    pid = inspector.pid
    inspector.close()
    assert inspector.pid is None and not Path(f"/proc/{pid}").exists()
    inspector.close()


def test_client_imports_no_h5py_and_child_no_tensorflow():
    probe = ("import sys, importlib; importlib.import_module(sys.argv[1]); "
             "print(sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[2:])))")
    for module, banned in (("mgpu_gui.core.children.inspector", "h5py"),
                           ("mgpu_gui.processes.inspector", "tensorflow")):
        out = subprocess.run([sys.executable, "-c", probe, module, banned, "keras", "PySide6"],
                             capture_output=True, text=True, timeout=60, check=True)
        assert out.stdout.strip() == "[]", (module, out.stdout, out.stderr)


def test_fuzzed_files_end_in_a_result_or_a_message(tmp_path):
    """A seeded few hundred damaged files: never another exception type, >= 99 % answered
    by the child itself (no watchdog kill, no crash), its memory under the cap."""
    cases = fuzz_cases(tmp_path, FUZZ_CASES, seed=20240611)
    outcomes = {"valid": 0, "message": 0}
    peak, limit = 0, None
    # Answered by the child itself: a roomy deadline, so that a busy machine cannot turn a
    # slow answer into a watchdog kill (a hang still ends in one).
    with FileInspector(deadline_s=10) as inspector:
        for case in cases:
            ask = inspector.inspect_model if case.kind is InspectKind.MODEL else (
                inspector.inspect_data)
            try:
                ask(case.path)
                outcomes["valid"] += 1
            except (ModelError, DataError) as error:
                assert case.path.name in str(error)
                outcomes["message"] += 1
            if inspector.pid is not None:
                peak = max(peak, _memory(inspector.pid, "VmHWM"))
                limit = inspector.memory_limit
        lost = inspector.watchdog_kills + inspector.crashes
    print(f"{outcomes}, watchdog kills {inspector.watchdog_kills}, crashes "
          f"{inspector.crashes}, child peak {peak >> 20} MiB of {limit >> 20} MiB")
    assert outcomes["valid"] >= FUZZ_CASES // 10
    assert lost <= FUZZ_CASES // 100, outcomes
    assert peak < limit


def _status(pid: int, field: str) -> str:
    """A field of /proc/PID/status ("S (sleeping)", "40932 kB"); "" once the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return next((line.split(":", 1)[1].strip() for line in status
                         if line.startswith(field + ":")), "")
    except FileNotFoundError:
        return ""


def _memory(pid: int, field: str) -> int:
    """VmRSS, VmHWM...: bytes, 0 once the process is gone."""
    value = _status(pid, field)
    return int(value.split()[0]) << 10 if value else 0
