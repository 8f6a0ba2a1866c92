#!/usr/bin/env python3
"""Reads a maxctx run's TensorBoard event files with TensorBoard's own reader and prints every
scalar (tag, step, value), then compares them with the run's metrics.jsonl (float32 equality).

A one-off check of io/tensorboard.cpp's records against the real consumer; tests never need it.
Setup (a venv beside this file; PyPI):
    python3 -m venv tools/reference/.venv-tensorboard
    tools/reference/.venv-tensorboard/bin/pip install tensorboard
Run:
    tools/reference/.venv-tensorboard/bin/python tools/reference/read_tensorboard.py <run dir>
Exit status 1 if a scalar is missing or differs.
"""
import json
import struct
import sys
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def main():
    run = Path(sys.argv[1])
    acc = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    print(f"TensorBoard reader: {len(tags)} scalar tags in {run / 'tensorboard'}")
    read = {}
    for tag in sorted(tags):
        events = acc.Scalars(tag)
        print(f"  {tag}: {len(events)} points, last step {events[-1].step} = {events[-1].value:.6g}")
        for e in events:
            read[(tag, e.step)] = e.value
    bad = 0
    rows = [json.loads(line) for line in open(run / "metrics.jsonl")]
    for row in rows:
        for tag, value in row.items():
            if tag in ("step", "run_name") or not isinstance(value, (int, float)):
                continue
            got = read.get((tag, row["step"]))
            if got is None or got != f32(value):
                print(f"MISMATCH {tag} step {row['step']}: jsonl {value}, tensorboard {got}")
                bad += 1
    print(f"{len(rows)} metrics.jsonl rows compared: {'all equal' if bad == 0 else f'{bad} differ'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
