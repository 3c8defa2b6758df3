"""NVML: device memory as the driver sees it, including what PyTorch does not allocate
(the CUDA context, NCCL buffers, cuDNN/cuBLAS workspaces, other libraries).

NVML's calls go through the driver and are slow next to a short training step (listing the
device's processes most of all), and what they show changes slowly: they are read on a time
budget (``nvml_budget=``, a share of the run's time, 0.2 % by default); a step without a read
writes null (`BudgetedReads`). On an H100 a step of 15.7 ms ran 1.14x slower at level counters
while NVML and the driver's free memory were read every step; on an H200 (11.2 ms steps) NVML
on a 0.5 % budget still took 67 us a step, a sixth of counters' boundary."""

from __future__ import annotations

import os
from typing import Any

import torch

from . import Probe, ProbeContext, Unavailable
from .budget import BudgetedReads


class NvmlProbe(Probe):
    name = "nvml"

    def start(self, ctx: ProbeContext) -> dict[str, Any]:
        if ctx.device.type != "cuda":
            raise Unavailable(f"NVML reports NVIDIA GPUs only and the tracked device is {ctx.device.type}")
        try:
            import pynvml
        except ImportError:
            raise Unavailable("the NVML binding is not installed: pip install nvidia-ml-py") from None
        try:
            pynvml.nvmlInit()
        except Exception as e:  # no driver, or no libnvidia-ml
            raise Unavailable(f"NVML could not start: {e}") from None
        self.nvml = pynvml
        # Match the CUDA device to the NVML one by UUID: CUDA_VISIBLE_DEVICES renumbers devices.
        uuid = str(torch.cuda.get_device_properties(ctx.device.index).uuid)
        try:
            self.handle = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
        except Exception:
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(ctx.device.index)
        self.pid = os.getpid()
        self.process_seen = True
        self.reads = BudgetedReads(float(ctx.options.get("nvml_budget", 0.002)))
        return {
            "nvml_budget": self.reads.budget.share,
            "driver_version": _text(pynvml.nvmlSystemGetDriverVersion()),
            "nvml_device_name": _text(pynvml.nvmlDeviceGetName(self.handle)),
        }

    def sample(self, step: int, step_seconds: float) -> dict[str, Any]:
        return self.reads.sample(lambda: self._read(step))

    def _read(self, step: int) -> dict[str, Any]:
        info = self.nvml.nvmlDeviceGetMemoryInfo(self.handle)
        values: dict[str, Any] = {"nvml_device_used_bytes": int(info.used)}
        if self.process_seen:
            used = self._process_bytes()
            if used is None:
                # In a container the driver may list host pids only: stop asking.
                self.process_seen = step < 2
            else:
                values["nvml_process_bytes"] = used
        return values

    def _process_bytes(self) -> int | None:
        for proc in self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle):
            if proc.pid == self.pid and proc.usedGpuMemory is not None:
                return int(proc.usedGpuMemory)
        return None

    def stop(self) -> None:
        if getattr(self, "nvml", None) is not None:
            try:
                self.nvml.nvmlShutdown()
            finally:
                self.nvml = None


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
