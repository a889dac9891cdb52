"""The peak FLOP/s that MFU is measured against: configured, the device's published figure, or measured.

In that order: `metrics.peak_flops_per_device` when set; on a GPU the vendor's dense
bf16 peak from `DEVICE_PEAKS`, matched from `torch.cuda.get_device_name()`; else
(a CPU, or a GPU the table does not know) a timed matmul, labelled as a fallback
since a single matmul is below the published peak. `run.json` records which one
the run used (`peak_flops_source`).
"""

from __future__ import annotations

import time

import torch

# Dense (no sparsity) bf16 tensor-core FLOP/s per GPU from NVIDIA's data sheets. First match wins, so the
# more specific names come first ("GB200" contains "B200"; the NVL/PCIe parts run at lower clocks).
DEVICE_PEAKS: tuple[tuple[str, float], ...] = (
    ("GB200", 2.5e15),
    ("B200", 2.25e15),
    ("H200 NVL", 835e12),
    ("H200", 989.4e12),
    ("H100 NVL", 835e12),
    ("H100 PCIe", 756.5e12),
    ("H100", 989.4e12),
)


def device_peak(device_name: str) -> tuple[str, float] | None:
    """(table entry, bf16 dense FLOP/s) for a CUDA device name such as 'NVIDIA H100 80GB HBM3', or None."""
    name = device_name.upper()
    for entry, flops in DEVICE_PEAKS:
        if entry.upper() in name:
            return entry, flops
    return None


MEASURED: dict[str, float] = {}  # device -> FLOP/s measured by this process (a fleet worker trains many runs)


def measure_matmul_flops(device: torch.device, size: int = 1024, repeats: int = 5) -> float:
    """A timed square matmul; its operands from a private generator, so the measurement leaves the global RNG
    (a run's) as it found it."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    b = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        a @ b
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 2.0 * size**3 / best


def peak_flops(configured: float, device: torch.device) -> tuple[float, str]:
    """(FLOP/s, where the figure comes from) for MFU on `device`."""
    if configured > 0:
        return configured, "config"
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        known = device_peak(name)
        if known is not None:
            return known[1], f"device table ({known[0]} bf16 dense, matched from '{name}')"
    dtype = "bf16" if device.type == "cuda" else "fp32"
    if str(device) not in MEASURED:  # once per process: half a second a run on a busy CPU
        MEASURED[str(device)] = measure_matmul_flops(device)
    return MEASURED[str(device)], f"measured fallback ({dtype} 1024x1024 matmul on {device.type})"
