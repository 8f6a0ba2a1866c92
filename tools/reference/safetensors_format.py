"""safetensors written and read by hand (struct + json): the Python half of the format check.

There is no `safetensors` package on this machine, and the point is a second, independent
implementation of the format: the C++ reader in src/maxctx/io/ reads what this module writes.
Layout: u64 little-endian header length, JSON header padded with spaces to 8 bytes, raw data.
Tensors are numpy arrays; bfloat16 has no numpy dtype, so it travels as a uint16 array of the raw
bits wrapped in `Raw("BF16", bits)`. Test-only code; nothing here is imported by the engine.
"""

import json
import os
import struct

import numpy as np

_NUMPY_TO_ST = {
    np.dtype(np.bool_): "BOOL",
    np.dtype(np.uint8): "U8",
    np.dtype(np.int8): "I8",
    np.dtype(np.uint16): "U16",
    np.dtype(np.int16): "I16",
    np.dtype(np.float16): "F16",
    np.dtype(np.uint32): "U32",
    np.dtype(np.int32): "I32",
    np.dtype(np.float32): "F32",
    np.dtype(np.uint64): "U64",
    np.dtype(np.int64): "I64",
    np.dtype(np.float64): "F64",
}
_ST_TO_NUMPY = {name: dtype for dtype, name in _NUMPY_TO_ST.items()}
_ST_TO_NUMPY["BF16"] = np.dtype(np.uint16)  # raw bits


def _contiguous(value):
    # Not np.ascontiguousarray: it turns a 0-d array (a scalar tensor, shape []) into shape [1].
    return np.array(value, copy=False, order="C")


class Raw:
    """An array whose bytes are stored under an explicit safetensors dtype (used for BF16)."""

    def __init__(self, dtype, array):
        self.dtype = dtype
        self.array = _contiguous(array)


def _dtype_and_array(value):
    if isinstance(value, Raw):
        return value.dtype, value.array
    array = _contiguous(value)
    return _NUMPY_TO_ST[array.dtype], array


def write_safetensors(path, tensors, metadata=None):
    """Writes {name: ndarray | Raw} with data in name order; atomically via <path>.tmp."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        dtype, array = _dtype_and_array(tensors[name])
        blob = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {
            "dtype": dtype,
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = str(path) + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)


def read_safetensors(path):
    """Returns ({name: ndarray}, metadata); BF16 comes back as uint16 bits."""
    with open(path, "rb") as f:
        data = f.read()
    (header_size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_size].decode("utf-8"))
    metadata = header.pop("__metadata__", {})
    base = 8 + header_size
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        dtype = _ST_TO_NUMPY[entry["dtype"]].newbyteorder("<")
        array = np.frombuffer(data[base + begin : base + end], dtype=dtype)
        tensors[name] = array.reshape(entry["shape"])
    return tensors, metadata
