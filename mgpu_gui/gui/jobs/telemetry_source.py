"""The Qt side of GPU telemetry: a QObject that turns the core poller into signals.

`TelemetryPoller` (core, a plain thread) does every NVML call, the inventory
included, so the GUI thread never waits on the driver (nvmlInit alone can take
seconds while a GPU wakes up). Its callbacks emit this object's signals from the
poller thread; Qt queues them to the GUI thread, where this object lives.
"""

from __future__ import annotations

from types import ModuleType

from PySide6.QtCore import QObject, Qt, Signal

from mgpu_gui.core.devices.nvml import GpuInventory, NvmlSession, NvmlState, default_session
from mgpu_gui.core.devices.telemetry import DEFAULT_INTERVAL_S, GpuSnapshot, TelemetryPoller


class TelemetrySource(QObject):
    """Live GPU snapshots for the GUI.

    `inventory_changed(GpuInventory)` comes once, when the GPUs are listed (at
    once on `start()` when an inventory was given); `snapshots(list[GpuSnapshot])`
    every `interval_s` while GPUs are there.
    """

    snapshots = Signal(object)  # list[GpuSnapshot]
    inventory_changed = Signal(object)  # GpuInventory
    # The poller thread emits these; queued, they re-emit on the GUI thread.
    _polled = Signal(object)
    _listed = Signal(object)

    def __init__(
        self,
        nvml: NvmlSession | ModuleType | None = None,
        inventory: GpuInventory | None = None,
        interval_s: float = DEFAULT_INTERVAL_S,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        # A module (a fake in tests) gets a session of its own, shut down by stop().
        self._owns_session = isinstance(nvml, ModuleType)
        if isinstance(nvml, ModuleType):
            self._session = NvmlSession(nvml)
        else:
            self._session = nvml if nvml is not None else default_session()
        self._inventory = inventory
        self.interval_s = interval_s
        self._poller: TelemetryPoller | None = None
        self._latest: list[GpuSnapshot] = []
        queued = Qt.ConnectionType.QueuedConnection
        self._polled.connect(self._deliver_snapshots, queued)
        self._listed.connect(self._deliver_inventory, queued)

    @property
    def inventory(self) -> GpuInventory | None:
        """The GPUs being watched; None until they are listed."""
        return self._inventory

    @property
    def latest(self) -> list[GpuSnapshot]:
        return self._latest

    def is_running(self) -> bool:
        return self._poller is not None and self._poller.running

    def start(self) -> None:
        if self._poller is not None:
            return
        gpus = None
        if self._inventory is not None:
            self._listed.emit(self._inventory)
            if self._inventory.state is not NvmlState.OK:
                return
            gpus = self._inventory.gpus
        self._poller = TelemetryPoller(
            self._session, self._polled.emit, gpus=gpus, interval_s=self.interval_s,
            on_inventory=self._listed.emit,
        )
        self._poller.start()

    def stop(self) -> None:
        """End polling and wait for the thread (no signal is emitted after this)."""
        poller, self._poller = self._poller, None
        if poller is not None:
            poller.stop()
        if self._owns_session:
            self._session.shutdown()

    def _deliver_inventory(self, inventory: GpuInventory) -> None:
        self._inventory = inventory
        self.inventory_changed.emit(inventory)

    def _deliver_snapshots(self, snapshots: list[GpuSnapshot]) -> None:
        if self._poller is None:  # queued before stop(): the caller no longer wants it
            return
        self._latest = snapshots
        self.snapshots.emit(snapshots)
