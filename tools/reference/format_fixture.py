#!/usr/bin/python3
"""Writes tests/fixtures/safetensors_dtypes/all_dtypes.safetensors: one tensor of every dtype.

The C++ reader must read this Python-written file (the cross-implementation check of the
format), and the float conversions must agree with numpy's and torch's: `f16.values` is numpy's
round-to-nearest-even float16 of `f32.values` and `f16.as_f32` its exact widening; the same for
bfloat16 through torch. The source values cover f16/bf16 normals, subnormals, rounding ties,
overflow to infinity, signed zeros, infinities and NaN. Integer tensors hold values a test can
recompute: arange(n) mapped through a formula noted next to each.
"""

import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_format import Raw, read_safetensors, write_safetensors  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_PATH = os.path.join(REPO_ROOT, "tests", "fixtures", "safetensors_dtypes",
                            "all_dtypes.safetensors")


def float_values(rng):
    special = np.array([
        0.0, -0.0, 1.0, -2.0, 65504.0, 65519.99, 65520.0, -70000.0, np.inf, -np.inf, np.nan,
        2.0 ** -14, 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -25, 1.5 * 2.0 ** -24, 2.0 ** -26,
        1023 * 2.0 ** -24, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8,
        1.0 / 3.0, 3.0e38, 1.0e-40,
    ])
    # Random values over exponents that span every f16 band, with random mantissas.
    exponents = rng.uniform(-28.0, 17.0, size=1024 - len(special))
    signs = rng.choice([-1.0, 1.0], size=exponents.shape)
    randoms = signs * 2.0 ** exponents
    return np.concatenate([special, randoms]).astype(np.float32)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=DEFAULT_PATH)
    args = parser.parse_args()
    rng = np.random.default_rng(5)
    f32 = float_values(rng)
    with np.errstate(over="ignore"):
        f16 = f32.astype(np.float16)
    bf16_bits = torch.from_numpy(f32).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    bf16_as_f32 = torch.from_numpy(f32).to(torch.bfloat16).to(torch.float32).numpy()

    n = np.arange(24)
    tensors = {
        "f32.values": f32,
        "f16.values": f16,
        "f16.as_f32": f16.astype(np.float32),
        "bf16.values": Raw("BF16", bf16_bits),
        "bf16.as_f32": bf16_as_f32,
        "f64": (n * 0.25 - 3.0).reshape(2, 3, 4),             # i/4 - 3
        "i8": (n * 11 - 128).astype(np.int8).reshape(4, 6),   # 11 i - 128 (wraps in int8)
        "u8": (n * 37 % 256).astype(np.uint8).reshape(2, 12),  # 37 i mod 256
        "i16": (n * 1000 - 12000).astype(np.int16).reshape(24),
        "u16": (n * 2800).astype(np.uint16).reshape(3, 8),
        "i32": (n * 100003 - 1000000).astype(np.int32).reshape(6, 4),
        "u32": (n * 200000000).astype(np.uint32).reshape(24),  # exceeds int32 from i = 11
        "i64": (n.astype(np.int64) * 3000000000 - 30000000000).reshape(2, 12),
        "u64": (n.astype(np.uint64) * np.uint64(7)).reshape(24),
        "bool": (n % 3 == 0).reshape(4, 6),
        "scalar": np.array(2.5, np.float32),
        "empty": np.zeros((0, 4), np.float32),
    }
    metadata = {"format": "pt", "writer": "tools/reference/format_fixture.py"}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    write_safetensors(args.out, tensors, metadata)
    read, read_metadata = read_safetensors(args.out)
    assert read_metadata == metadata and sorted(read) == sorted(tensors)
    print(f"wrote {len(tensors)} tensors, {os.path.getsize(args.out)} bytes -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
