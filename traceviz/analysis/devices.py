"""Peak throughput of accelerators, by a substring of ``deviceProperties``' name: dense
(no sparsity) tensor / matrix TFLOP/s per data type and memory bandwidth in TB/s, from
the vendors' data sheets. First match wins: more specific names first. ``None``: the
device has no such peak (e.g. FP8 before Hopper / CDNA3).

Data types: ``fp64``, ``fp32`` (no TF32: PyTorch's default for matmuls), ``tf32``,
``bf16`` (and FP16), ``fp8``."""
from __future__ import annotations

from dataclasses import dataclass

DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp8")


@dataclass(frozen=True)
class Device:
    """Peaks of one device (see the module doc)."""

    name: str
    tflops: dict[str, float | None]
    tbps: float

    def peak(self, dtype: str) -> float | None:
        return self.tflops.get(dtype)


def _d(name, fp64, fp32, tf32, bf16, fp8, tbps) -> Device:
    return Device(name, dict(zip(DTYPES, (fp64, fp32, tf32, bf16, fp8))), tbps)


DEVICES = (
    _d("GB200", 45.0, 90.0, 1250.0, 2500.0, 5000.0, 8.0),
    _d("B200", 40.0, 80.0, 1100.0, 2250.0, 4500.0, 8.0),
    _d("H200", 67.0, 67.0, 494.7, 989.5, 1979.0, 4.8),
    _d("H100 PCIe", 51.0, 51.0, 378.0, 756.0, 1513.0, 2.0),
    _d("H100", 67.0, 67.0, 494.7, 989.5, 1979.0, 3.35),
    _d("H800", 1.0, 67.0, 494.7, 989.5, 1979.0, 3.35),
    _d("A100-PCIE-40GB", 19.5, 19.5, 156.0, 312.0, None, 1.555),
    _d("A100-SXM4-40GB", 19.5, 19.5, 156.0, 312.0, None, 1.555),
    _d("A100", 19.5, 19.5, 156.0, 312.0, None, 2.039),
    _d("A800", 19.5, 19.5, 156.0, 312.0, None, 2.039),
    _d("L40S", 1.4, 91.6, 183.0, 362.0, 733.0, 0.864),
    _d("V100", 7.8, 15.7, None, 125.0, None, 0.9),
    _d("MI355X", 78.6, 157.3, None, 2516.6, 5033.2, 8.0),
    _d("MI325X", 163.4, 163.4, 653.7, 1307.4, 2614.9, 6.0),
    _d("MI300X", 163.4, 163.4, 653.7, 1307.4, 2614.9, 5.3),
    _d("MI250X", 95.7, 95.7, None, 383.0, None, 3.2768),
    _d("MI250", 90.5, 90.5, None, 362.1, None, 3.2768),
    _d("MI210", 45.3, 45.3, None, 181.0, None, 1.6384),
)


def device_of(name: str | None) -> Device | None:
    """The peaks of a device by its deviceProperties name (None: unknown)."""
    if not name:
        return None
    return next((d for d in DEVICES if d.name in name), None)
