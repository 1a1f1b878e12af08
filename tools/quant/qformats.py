"""Number formats and safetensors I/O of dgemma's quantised-checkpoint tools (numpy only).

The codes follow docs/QUANTIZATION.md:
  * FP8 E4M3 (fn): no infinities, 0x7f / 0xff are NaN, largest finite 448;
  * E2M1 (NVFP4 values): sign bit 3, magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6; two per byte, element 2j in
    the low nibble;
  * rounding to either format is to the nearest value, ties to the even code (as ModelOpt's and
    compressed-tensors' casts do), saturating at the largest finite value.
"""
import json
import struct

import numpy as np

# ---------------------------------------------------------------------------------------------
# bf16
# ---------------------------------------------------------------------------------------------


def bf16_to_f32(u16):
    return (np.asarray(u16, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    """Round-to-nearest-even fp32 -> bf16 bits (NaN kept quiet), as torch's .to(bfloat16)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        rounded[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


def round_bf16(x):
    return bf16_to_f32(f32_to_bf16(x))


# ---------------------------------------------------------------------------------------------
# FP8 E4M3 (fn) and E2M1
# ---------------------------------------------------------------------------------------------


def _e4m3_table():
    vals = np.zeros(256, dtype=np.float32)
    for c in range(256):
        s = -1.0 if c & 0x80 else 1.0
        e = (c >> 3) & 0xF
        m = c & 7
        if e == 0xF and m == 7:
            vals[c] = np.nan
        elif e == 0:
            vals[c] = s * m * 2.0 ** -9
        else:
            vals[c] = s * (1 + m / 8) * 2.0 ** (e - 7)
    return vals


E4M3_VALUES = _e4m3_table()
E2M1_VALUES = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)


def _round_to_table(x, pos_values):
    """Index into pos_values (ascending magnitudes, index = code) of the nearest magnitude of |x|,
    ties to the even index, saturating at the last entry."""
    a = np.abs(np.asarray(x, dtype=np.float32))
    mid = ((pos_values[:-1].astype(np.float64) + pos_values[1:]) / 2)
    idx = np.searchsorted(mid, a, side="left")  # number of midpoints strictly below a
    tie = (idx < len(mid)) & (a == mid[np.minimum(idx, len(mid) - 1)])
    # On a tie a sits exactly on mid[idx]: candidates idx and idx + 1, take the even one.
    idx = np.where(tie & (idx % 2 == 1), idx + 1, idx)
    return np.minimum(idx, len(pos_values) - 1)


def f32_to_e4m3(x):
    x = np.asarray(x, dtype=np.float32)
    code = _round_to_table(x, E4M3_VALUES[:0x7F]).astype(np.uint8)
    code = np.where(np.signbit(x), code | 0x80, code).astype(np.uint8)
    return np.where(np.isnan(x), np.uint8(0x7F), code).astype(np.uint8)


def e4m3_to_f32(code):
    return E4M3_VALUES[np.asarray(code, dtype=np.uint8)]


def f32_to_e2m1(x):
    x = np.asarray(x, dtype=np.float32)
    code = _round_to_table(x, E2M1_VALUES[:8]).astype(np.uint8)
    return np.where(np.signbit(x) & (code != 0), code | 8, code).astype(np.uint8)


def pack_e2m1(codes):
    """[..., K] nibble codes -> [..., K/2] bytes, element 2j in the low nibble."""
    codes = np.asarray(codes, dtype=np.uint8)
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def unpack_e2m1(packed):
    packed = np.asarray(packed, dtype=np.uint8)
    out = np.empty(packed.shape[:-1] + (packed.shape[-1] * 2,), dtype=np.uint8)
    out[..., 0::2] = packed & 0xF
    out[..., 1::2] = packed >> 4
    return out


# ---------------------------------------------------------------------------------------------
# safetensors (the dtypes used here)
# ---------------------------------------------------------------------------------------------

_NP = {"BF16": np.uint16, "F32": np.float32, "F16": np.float16, "U8": np.uint8, "F8_E4M3": np.uint8,
       "I32": np.int32, "I64": np.int64}


class Tensor:
    """A tensor as raw storage: dtype is the safetensors name; BF16 / F8 are held as integer codes."""

    def __init__(self, dtype, array):
        self.dtype = dtype
        self.array = np.ascontiguousarray(array, dtype=_NP[dtype])

    def f32(self):
        if self.dtype == "BF16":
            return bf16_to_f32(self.array)
        if self.dtype == "F8_E4M3":
            return e4m3_to_f32(self.array)
        return self.array.astype(np.float32)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    meta = header.pop("__metadata__", None) or {}
    for name, h in header.items():
        b, e = h["data_offsets"]
        arr = np.frombuffer(data[b:e], dtype=_NP[h["dtype"]]).reshape(h["shape"])
        out[name] = Tensor(h["dtype"], arr.copy())
    return out, meta


def write_safetensors(path, tensors, metadata=None):
    header = {"__metadata__": dict(metadata or {"format": "pt"})}
    blobs = []
    off = 0
    for name in sorted(tensors):
        t = tensors[name]
        raw = t.array.tobytes()
        header[name] = {"dtype": t.dtype, "shape": list(t.array.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)
