"""GPU inventory through a fake NVML module, device planning, and the real pynvml."""

from __future__ import annotations

import ctypes.util
import importlib
import json
import os
import subprocess
import sys
import threading

import pytest

from mgpu_gui.core.config import DeviceKind, DeviceSelection
from mgpu_gui.core.devices.nvml import (
    FAKE_GPUS_VAR,
    GpuInfo,
    GpuInventory,
    MigInstance,
    NvmlSession,
    NvmlState,
    default_session,
    format_inventory,
    query_inventory,
)
from mgpu_gui.core.devices.plan import DevicePlan, cpu_replicas_warning, plan_devices
from mgpu_gui.core.devices.telemetry import ProcessInfo, take_snapshots
from mgpu_gui.core.errors import DeviceError
from mgpu_gui.testing.fake_pynvml import UUID0, UUID1, FakeGpu, GiB, fake_nvml

MIG_A = "MIG-aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa"
MIG_B = "MIG-bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb"


def h100(uuid: str = UUID0, bus: bytes = b"00000000:17:00.0",
         broken: set[str] = frozenset(), **kw) -> FakeGpu:
    """An H100 whose `broken` functions raise NotSupported."""
    return FakeGpu(uuid=uuid, bus=bus, errors=dict.fromkeys(broken, "NVMLError_NotSupported"),
                   **kw)


def two_gpus() -> list[FakeGpu]:
    return [h100(), h100(UUID1, b"00000000:65:00.0")]


def mig_gpu(uuid: str = UUID0) -> FakeGpu:
    return h100(uuid, mig=[(MIG_A, "NVIDIA H100 80GB HBM3 MIG 3g.40gb", 40 * GiB), None,
                           (MIG_B, "NVIDIA H100 80GB HBM3 MIG 1g.10gb", 10 * GiB)])


# -- inventory -------------------------------------------------------------------


def test_two_gpus_are_listed_in_nvml_order():
    nvml = fake_nvml(two_gpus())
    inv = query_inventory(nvml)
    assert inv.state is NvmlState.OK
    assert inv.message == ""
    assert (inv.driver_version, inv.cuda_driver_version) == ("550.54.15", "12.4")
    assert [g.index for g in inv.gpus] == [0, 1]
    gpu = inv.gpus[1]
    assert gpu == GpuInfo(1, "NVIDIA H100 80GB HBM3", UUID1, "00000000:65:00.0", 80 * GiB,
                          (9, 0), (), False)
    # an injected module gets a session of its own, closed afterwards
    assert (nvml.inits, nvml.shutdowns) == (1, 1)


def test_mig_instances_are_listed_and_empty_slots_skipped():
    inv = query_inventory(fake_nvml([mig_gpu(), h100(UUID1)]))
    mig, plain = inv.gpus
    assert mig.mig_enabled and not plain.mig_enabled
    assert mig.mig_instances == (
        MigInstance(0, MIG_A, "NVIDIA H100 80GB HBM3 MIG 3g.40gb", 40 * GiB),
        MigInstance(2, MIG_B, "NVIDIA H100 80GB HBM3 MIG 1g.10gb", 10 * GiB),
    )


@pytest.mark.parametrize(
    ("error", "state", "words"),
    [
        ("NVMLError_LibraryNotFound", NvmlState.NO_DRIVER,
         "No NVIDIA driver found (libnvidia-ml not available): training will run on CPU "
         "replicas. To train on GPUs, install the NVIDIA driver"),
        ("NVMLError_DriverNotLoaded", NvmlState.DRIVER_ERROR,
         "The NVIDIA driver is installed but not running (DriverNotLoaded): training will "
         "run on CPU replicas. Check nvidia-smi; rebooting or loading the nvidia kernel"),
        ("NVMLError_LibRmVersionMismatch", NvmlState.DRIVER_ERROR,
         "differ in version (LibRmVersionMismatch): training will run on CPU replicas. "
         "This follows a driver update: reboot"),
        ("NVMLError_NoPermission", NvmlState.DRIVER_ERROR, "permissions of /dev/nvidia*"),
        ("NVMLError_Unknown", NvmlState.DRIVER_ERROR,
         "The NVIDIA driver could not be started (Unknown)"),
    ],
)
def test_init_failures_become_states_with_a_message(error, state, words):
    nvml = fake_nvml(two_gpus(), init_error=error)
    inv = query_inventory(nvml)
    assert inv.state is state
    assert inv.gpus == ()
    assert words in inv.message
    assert inv.message.startswith(inv.reason) and inv.message.endswith(inv.advice)
    assert nvml.shutdowns == 0  # never initialised, nothing to shut down


def test_zero_gpus_is_no_gpu():
    inv = query_inventory(fake_nvml([]))
    assert inv.state is NvmlState.NO_GPU
    assert inv.driver_version == "550.54.15"
    assert inv.message.startswith("The NVIDIA driver 550.54.15 is running but reports no GPU: "
                                  "training will run on CPU replicas.")


def test_failing_count_is_a_driver_error():
    inv = query_inventory(fake_nvml(two_gpus(), count_error="NVMLError_Unknown"))
    assert inv.state is NvmlState.DRIVER_ERROR
    assert "cannot count its GPUs" in inv.message


def test_unsupported_fields_become_not_available():
    gpu = h100(broken={"nvmlDeviceGetCudaComputeCapability", "nvmlDeviceGetMemoryInfo"})
    inv = query_inventory(fake_nvml([gpu]))
    assert inv.state is NvmlState.OK
    assert inv.gpus[0].compute_capability is None
    assert inv.gpus[0].memory_total is None
    assert inv.gpus[0].uuid == UUID0
    row = format_inventory(inv).splitlines()[2]
    assert row.split()[:7] == ["0", "NVIDIA", "H100", "80GB", "HBM3", "N/A", "N/A"]


def test_lost_gpu_keeps_its_index():
    gpus = two_gpus()
    gpus[0].lost = True
    inv = query_inventory(fake_nvml(gpus))
    assert inv.gpus[0] == GpuInfo(0, None, None, None, None, None)
    assert inv.gpus[1].uuid == UUID1


def test_function_missing_from_an_old_pynvml_is_not_available():
    nvml = fake_nvml(two_gpus())
    del nvml.nvmlSystemGetCudaDriverVersion
    del nvml.nvmlDeviceGetMigMode
    inv = query_inventory(nvml)
    assert inv.state is NvmlState.OK
    assert inv.cuda_driver_version is None
    assert not inv.gpus[0].mig_enabled


def test_missing_pynvml_module_is_no_driver():
    session = NvmlSession(load=lambda: importlib.import_module("mgpu_gui_no_such_pynvml"))
    inv = query_inventory(session)
    assert inv.state is NvmlState.NO_DRIVER
    assert "pynvml module is missing" in inv.message
    assert "training will run on CPU replicas" in inv.message


def test_fake_gpus_file_is_the_machine_every_nvml_path_sees(tmp_path, monkeypatch):
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps({"gpus": [
        {"index": 0, "uuid": "GPU-fake-0"},
        {"index": 1, "uuid": "GPU-fake-1", "name": "Big", "compute_capability": [8, 0],
         "memory_total": 8 * GiB, "processes": [{"pid": 4242, "used_memory": GiB}]}]}))
    before = query_inventory()  # this process used NVML without the variable first
    monkeypatch.setenv(FAKE_GPUS_VAR, str(path))
    inv = query_inventory()
    assert inv == query_inventory(default_session()) != before
    assert (inv.state, inv.driver_version, inv.cuda_driver_version) == (NvmlState.OK, "fake",
                                                                        "12.4")
    assert inv.gpus == (GpuInfo(0, "Fake GPU", "GPU-fake-0", None, None, None),
                        GpuInfo(1, "Big", "GPU-fake-1", None, 8 * GiB, (8, 0)))
    (busy,) = take_snapshots(default_session(), inv.gpus[1:])
    assert busy.processes == (ProcessInfo(4242, GiB),) and busy.memory_used == GiB


def test_the_testing_package_loads_only_when_fake_gpus_are_asked_for():
    code = ("import sys; from mgpu_gui.core.devices.nvml import query_inventory; "
            "query_inventory(); print(any(m.startswith('mgpu_gui.testing') for m in sys.modules))")
    env = {k: v for k, v in os.environ.items() if k != FAKE_GPUS_VAR}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.stdout.strip() == "False", done.stderr


def test_session_initialises_once_and_shuts_down(monkeypatch):
    registered = []
    monkeypatch.setattr("atexit.register", registered.append)
    monkeypatch.setattr("atexit.unregister", registered.remove)
    nvml = fake_nvml(two_gpus())
    session = NvmlSession(nvml)
    threads = [threading.Thread(target=query_inventory, args=(session,)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert nvml.inits == 1
    assert registered == [session.shutdown]  # NVML is shut down at exit
    session.shutdown()
    assert (nvml.shutdowns, registered) == (1, [])
    assert session.query("nvmlDeviceGetCount") == 2  # fake ignores shutdown; real says N/A
    query_inventory(session)
    assert nvml.inits == 2  # started again on demand


def test_init_failure_is_remembered_until_shutdown():
    nvml = fake_nvml([], init_error="NVMLError_LibraryNotFound")
    session = NvmlSession(nvml)
    query_inventory(session)
    query_inventory(session)
    assert nvml.inits == 1  # a poller must not retry dlopen every tick
    session.shutdown()
    query_inventory(session)
    assert nvml.inits == 2


def test_real_pynvml_never_raises():
    inv = query_inventory()
    assert inv == query_inventory()  # the second call reuses the session
    assert "pynvml" in sys.modules
    if ctypes.util.find_library("nvidia-ml") is None:
        assert inv.state is NvmlState.NO_DRIVER
        assert inv.message == (
            "No NVIDIA driver found (libnvidia-ml not available): training will run on CPU "
            "replicas. To train on GPUs, install the NVIDIA driver and check that "
            "nvidia-smi works."
        )
        assert format_inventory(inv) == inv.message
    else:
        assert inv.state is NvmlState.OK or inv.message


# -- planning --------------------------------------------------------------------


def inventory(*gpus: FakeGpu) -> GpuInventory:
    return query_inventory(fake_nvml(list(gpus)))


NO_DRIVER = query_inventory(fake_nvml([], init_error="NVMLError_LibraryNotFound"))


def test_auto_takes_all_gpus_by_uuid():
    plan = plan_devices(DeviceSelection(), inventory(*two_gpus()))
    assert plan.kind is DeviceKind.GPU
    assert plan.replicas == 2
    assert [g.index for g in plan.gpus] == [0, 1]
    assert plan.env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                        "CUDA_VISIBLE_DEVICES": f"{UUID0},{UUID1}"}
    assert plan.names == [f"GPU 0: NVIDIA H100 80GB HBM3 ({UUID0})",
                          f"GPU 1: NVIDIA H100 80GB HBM3 ({UUID1})"]
    assert plan.note == ""


def test_replicas_take_the_first_gpus():
    plan = plan_devices(DeviceSelection(kind=DeviceKind.GPU, replicas=1),
                        inventory(*two_gpus()))
    assert plan.env["CUDA_VISIBLE_DEVICES"] == UUID0
    assert plan.replicas == 1


def test_gpus_chosen_by_index_or_uuid_keep_the_given_order():
    sel = DeviceSelection(gpus=("1", UUID0.upper()))
    plan = plan_devices(sel, inventory(*two_gpus()))
    assert plan.env["CUDA_VISIBLE_DEVICES"] == f"{UUID1},{UUID0}"
    assert [g.index for g in plan.gpus] == [1, 0]


def test_auto_without_gpu_trains_on_two_cpu_replicas():
    plan = plan_devices(DeviceSelection(), NO_DRIVER)
    assert plan.kind is DeviceKind.CPU
    assert plan.replicas == 2
    assert plan.gpus == ()
    assert plan.env == {"CUDA_VISIBLE_DEVICES": ""}
    assert plan.names == ["CPU replica 0 (logical device CPU:0)",
                          "CPU replica 1 (logical device CPU:1)"]
    assert plan.note == NO_DRIVER.message


def test_auto_without_gpu_honours_replicas():
    assert plan_devices(DeviceSelection(replicas=4), NO_DRIVER).replicas == 4


def test_cpu_kind_ignores_gpus_that_exist():
    plan = plan_devices(DeviceSelection(kind=DeviceKind.CPU, replicas=3),
                        inventory(*two_gpus()))
    assert (plan.kind, plan.replicas, plan.env) == (
        DeviceKind.CPU, 3, {"CUDA_VISIBLE_DEVICES": ""})
    assert plan.note == ""
    assert plan_devices(DeviceSelection(kind=DeviceKind.CPU), NO_DRIVER).replicas == 2


def test_more_cpu_replicas_than_cores_are_planned_with_a_warning(monkeypatch):
    monkeypatch.setattr("mgpu_gui.core.devices.plan.usable_cores", lambda: 2)
    assert plan_devices(DeviceSelection(kind=DeviceKind.CPU, replicas=2), NO_DRIVER).warning == ""
    plan = plan_devices(DeviceSelection(kind=DeviceKind.CPU, replicas=64), NO_DRIVER)
    assert plan.warning.startswith("64 CPU replicas on 2 cores: the replicas take turns on "
                                   "the cores (no speed-up beyond 2)")
    assert "Use at most 2" in plan.warning
    assert DevicePlan.from_json(plan.to_json()) == plan
    assert DevicePlan.from_json('{"kind": "cpu", "replicas": 1}').warning == ""  # older runs
    assert cpu_replicas_warning(3, cores=1).startswith("3 CPU replicas on 1 core:")


def error(selection: DeviceSelection, inv: GpuInventory) -> str:
    with pytest.raises(DeviceError) as info:
        plan_devices(selection, inv)
    return str(info.value)


def test_gpu_kind_without_driver_says_why_and_what_to_do():
    assert error(DeviceSelection(kind=DeviceKind.GPU), NO_DRIVER) == (
        "Cannot train on GPUs: No NVIDIA driver found (libnvidia-ml not available). "
        "To train on GPUs, install the NVIDIA driver and check that nvidia-smi works. "
        "Or train on CPU replicas instead (--cpu, or device 'CPU' in the app)."
    )


def test_gpu_kind_without_gpu_says_why():
    msg = error(DeviceSelection(kind=DeviceKind.GPU), inventory())
    assert msg.startswith("Cannot train on GPUs: The NVIDIA driver 550.54.15 is running but "
                          "reports no GPU.")
    assert "--cpu" in msg


def test_chosen_gpus_without_driver_is_an_error_even_in_auto():
    assert "No NVIDIA driver found" in error(DeviceSelection(gpus=("0",)), NO_DRIVER)


def test_too_many_gpus_names_what_exists():
    assert error(DeviceSelection(replicas=3), inventory(*two_gpus())) == (
        "3 GPUs asked for, but this machine has 2 GPUs. GPUs found: "
        f"0 = NVIDIA H100 80GB HBM3 ({UUID0}); 1 = NVIDIA H100 80GB HBM3 ({UUID1}). "
        "Ask for at most 2, or train on CPU replicas instead (--cpu, or device 'CPU' in "
        "the app)."
    )


def test_unknown_index_and_uuid_name_what_exists():
    inv = inventory(*two_gpus())
    msg = error(DeviceSelection(gpus=("0", "7")), inv)
    assert msg.startswith("There is no GPU with index '7' on this machine. GPUs found: 0 = ")
    assert msg.endswith("Choose GPUs by these indices or UUIDs.")
    assert "There is no GPU with UUID 'GPU-nope'" in error(DeviceSelection(gpus=("GPU-nope",)),
                                                           inv)


def test_same_gpu_twice_is_an_error():
    assert error(DeviceSelection(gpus=("0", UUID0)), inventory(*two_gpus())) == (
        f"GPU 0 is chosen twice (as '0' and '{UUID0}'); each GPU can hold one replica, "
        "so list it once."
    )


def test_inconsistent_selections_are_errors():
    inv = inventory(*two_gpus())
    assert "3 replicas asked for but 2 GPUs chosen" in error(
        DeviceSelection(gpus=("0", "1"), replicas=3), inv)
    assert "At least 1 replica" in error(DeviceSelection(replicas=0), inv)
    assert "device kind is CPU" in error(DeviceSelection(kind=DeviceKind.CPU, gpus=("0",)),
                                         inv)


def test_mig_gpu_uses_its_mig_instance_uuid():
    inv = inventory(mig_gpu(), h100(UUID1))
    plan = plan_devices(DeviceSelection(gpus=("0",)), inv)
    assert plan.env["CUDA_VISIBLE_DEVICES"] == MIG_A
    assert plan.names == [f"GPU 0 MIG 0: NVIDIA H100 80GB HBM3 MIG 3g.40gb ({MIG_A})"]
    plan = plan_devices(DeviceSelection(gpus=(MIG_B,)), inv)
    assert plan.env["CUDA_VISIBLE_DEVICES"] == MIG_B
    assert plan.gpus[0].index == 0


def test_mig_with_another_device_is_an_error():
    msg = error(DeviceSelection(gpus=("0", "1")), inventory(mig_gpu(), h100(UUID1)))
    assert msg.startswith("GPU 0 is in MIG mode, and CUDA shows a process only one MIG "
                          "instance, so it cannot train together with other devices.")
    assert "nvidia-smi -i 0 -mig 0" in msg


def test_auto_leaves_mig_gpus_out_and_says_so():
    plan = plan_devices(DeviceSelection(), inventory(mig_gpu(), h100(UUID1)))
    assert plan.env["CUDA_VISIBLE_DEVICES"] == UUID1
    assert "GPU 0 left out: in MIG mode" in plan.note
    msg = error(DeviceSelection(replicas=2), inventory(mig_gpu(), h100(UUID1)))
    assert msg.startswith("2 GPUs asked for, but this machine has 1 GPU not in MIG mode.")


def test_all_mig_machine_trains_on_one_instance():
    inv = inventory(mig_gpu(), mig_gpu(UUID1))
    plan = plan_devices(DeviceSelection(), inv)
    assert (plan.replicas, plan.env["CUDA_VISIBLE_DEVICES"]) == (1, MIG_A)
    assert "one MIG instance" in plan.note
    assert "MIG mode" in error(DeviceSelection(replicas=2), inv)


def test_mig_without_instances_is_an_error():
    msg = error(DeviceSelection(gpus=("0",)), inventory(h100(mig=[])))
    assert "has MIG enabled but no MIG instance created" in msg


def test_unknown_uuid_falls_back_to_pci_ordered_indices():
    inv = inventory(h100(broken={"nvmlDeviceGetUUID"}), h100(UUID1))
    plan = plan_devices(DeviceSelection(), inv)
    assert plan.env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0,1"}


def test_plan_and_inventory_round_trip_through_json():
    inv = inventory(mig_gpu(), h100(UUID1))
    for plan in (plan_devices(DeviceSelection(gpus=("0",)), inv),
                 plan_devices(DeviceSelection(), inv), plan_devices(DeviceSelection(), NO_DRIVER)):
        assert DevicePlan.from_json(plan.to_json()) == plan
    data = json.loads(inv.to_json())
    assert data["state"] == "ok"
    assert data["gpus"][0]["mig_instances"][0]["uuid"] == MIG_A


# -- text ------------------------------------------------------------------------


def test_format_inventory_is_a_table_with_mig_lines():
    text = format_inventory(inventory(mig_gpu(), h100(UUID1, b"00000000:65:00.0")))
    assert text.splitlines() == [
        "NVIDIA driver 550.54.15, CUDA 12.4, 2 GPUs",
        "#  Name                   Memory    CC   PCI bus           UUID",
        f"0  NVIDIA H100 80GB HBM3  80.0 GiB  9.0  00000000:17:00.0  {UUID0}",
        f"   MIG 0: NVIDIA H100 80GB HBM3 MIG 3g.40gb, 40.0 GiB, {MIG_A}",
        f"   MIG 2: NVIDIA H100 80GB HBM3 MIG 1g.10gb, 10.0 GiB, {MIG_B}",
        f"1  NVIDIA H100 80GB HBM3  80.0 GiB  9.0  00000000:65:00.0  {UUID1}",
    ]


def test_format_inventory_without_gpus_prints_the_message():
    inv = inventory()
    assert format_inventory(inv) == "NVIDIA driver 550.54.15, CUDA 12.4\n" + inv.message
    assert "MIG mode on, no MIG instance" in format_inventory(inventory(h100(mig=[])))
