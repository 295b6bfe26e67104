"""The devices: the NVML layer, its telemetry snapshots, the device plan of a run."""
