"""The project's counter-based RNG (mirrors src/engine/rng.h bit for bit).

Every random number is a pure function of (seed, canvas index, step index, purpose, position,
index): a request with a seed reproduces exactly whatever else runs, on CPU and GPU alike, and the
golden-fixture script can inject the very same noise into the reference implementation.
"""
import numpy as np

MASK = (1 << 64) - 1

PURPOSE_INIT_CANVAS = 1  # the random canvas a block starts from
PURPOSE_RENOISE = 2      # fresh tokens for rejected positions after step `step`
PURPOSE_SAMPLE = 3       # Gumbel noise of the per-position sample at step `step`


def splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & MASK
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def stream_key(seed: int, canvas: int, step: int, purpose: int) -> int:
    k = splitmix64(seed & MASK)
    k = splitmix64(k ^ (canvas & MASK))
    return splitmix64(k ^ (((step & 0xFFFFFFFFFFFFFF) << 8) | purpose))


def _splitmix64_np(x):
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        z = x
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def bits(key: int, pos, idx):
    """64 random bits for (position, index) under a stream key; pos, idx < 2**32 (numpy arrays ok)."""
    pos = np.asarray(pos, dtype=np.uint64)
    idx = np.asarray(idx, dtype=np.uint64)
    inner = _splitmix64_np((pos << np.uint64(32)) | idx)
    return _splitmix64_np(np.uint64(key) ^ inner)


def uniform_tokens(key: int, n_positions: int, vocab: int) -> np.ndarray:
    """token[p] = floor(bits(key, p, 0) * vocab / 2**64), computed exactly."""
    b = bits(key, np.arange(n_positions), 0)
    return np.array([(int(v) * vocab) >> 64 for v in b], dtype=np.int64)


def gumbel(key: int, n_positions: int, vocab: int) -> np.ndarray:
    """Gumbel(0,1) noise [n_positions, vocab] in float64: -log(-log(u)), u = ((bits >> 11) + 0.5) / 2**53."""
    pos = np.repeat(np.arange(n_positions, dtype=np.uint64), vocab)
    idx = np.tile(np.arange(vocab, dtype=np.uint64), n_positions)
    b = bits(key, pos, idx)
    u = ((b >> np.uint64(11)).astype(np.float64) + 0.5) * (1.0 / 9007199254740992.0)
    return (-np.log(-np.log(u))).reshape(n_positions, vocab)


if __name__ == "__main__":
    # Reference vectors printed for the C++ unit test (tests/unit/engine/test_rng.cpp).
    for seed, canvas, step, purpose in [(0, 0, 0, 1), (42, 3, 7, 2), (2**64 - 1, 1, 47, 3)]:
        k = stream_key(seed, canvas, step, purpose)
        print(seed, canvas, step, purpose, hex(k), [hex(int(x)) for x in bits(k, np.array([0, 1, 255]), 5)],
              uniform_tokens(k, 4, 262144).tolist(), gumbel(k, 1, 3)[0].tolist())
