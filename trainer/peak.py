"""The peak FLOP/s that MFU is measured against: configured, or measured on this device.

On a GPU, set `metrics.peak_flops_per_device` to the vendor's dense bf16 figure
(H200: 989e12). Left at 0, the trainer times a large matmul at start-up and uses
that: on a CPU this is the honest ceiling of what the cores can do, and the run
records which of the two it used (`run.json`: `peak_flops_source`).
"""

from __future__ import annotations

import time

import torch


def measure_matmul_flops(device: torch.device, size: int = 1024, repeats: int = 5) -> float:
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
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
    if configured > 0:
        return configured, "config"
    dtype = "bf16" if device.type == "cuda" else "fp32"
    return measure_matmul_flops(device), f"measured ({dtype} 1024x1024 matmul on {device.type})"
