"""Counter-based random numbers: Philox4x32-10 and Box–Muller normals (numba, CPU).

Philox4x32-R is the counter-based generator of Salmon, Moraes, Dror & Shaw (2011), "Parallel
random numbers: as easy as 1, 2, 3", Proc. SC'11, §4.2 (the S-box ``mulhilo`` round and the
Weyl key schedule), as implemented in the Random123 library (``philox.h``):

    round(c, k):  (hi0, lo0) = mulhilo32(0xD2511F53, c0)
                  (hi1, lo1) = mulhilo32(0xCD9E8D57, c2)
                  c <- (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)
    bump(k):      k <- (k0 + 0x9E3779B9, k1 + 0xBB67AE85)  (mod 2^32)
    philox(c, k) = round(bump^9 k, ... round(bump k, round(k, c)))      (R = 10 rounds)

It is a bijection of the 128-bit counter for each 64-bit key, so a random stream is addressed,
not stepped: no generator state is set up, stored or advanced, and any thread (CPU or GPU)
computes the numbers for any (seed, level, sample, step) directly. The CUDA twin is
``mlmc.cu`` (``philox4x32_10``); both are checked against the Random123 known-answer
vectors (``kat_vectors``) in the tests.

Counter layout used by the MLMC kernels (:mod:`optiond.kernels.mlmc.cpu`):

    key     = (seed & 0xFFFFFFFF, seed >> 32)                 64-bit user seed
    counter = (group, sample & 0xFFFFFFFF, sample >> 32, level)

where ``group`` indexes the 4-word block along the path (see the kernel for how a path's fine
time steps map onto groups). Every 32-bit word becomes a uniform on (0, 1) or [0, 1) by
``(x + 0.5) * 2^-32`` or ``x * 2^-32`` and a pair of uniforms two normals by Box–Muller (Box &
Muller 1958, Ann. Math. Statist. 29(2)):

    z0 = sqrt(-2 log u1) cos(2 pi u2),   z1 = sqrt(-2 log u1) sin(2 pi u2),

``u1 = (a + 0.5) 2^-32`` (never 0) and ``u2 = b 2^-32``. With 32-bit uniforms the normals are
exact draws from a distribution whose tails are cut at |z| <= sqrt(2 * 33 ln 2) = 6.77 (mass
beyond ≈ 1.3e-11): far below the Monte Carlo errors of any run here.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np
from ..warmup import announce_compiles

announce_compiles()  # one line on stderr when a kernel here compiles (a cold cache)

PHILOX_M0 = 0xD2511F53
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9
PHILOX_W1 = 0xBB67AE85
ROUNDS = 10

_M0 = np.uint64(PHILOX_M0)
_M1 = np.uint64(PHILOX_M1)
_W0 = np.uint64(PHILOX_W0)
_W1 = np.uint64(PHILOX_W1)
_MASK = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_TWO_M32 = 2.0 ** -32
TWO_PI = 2.0 * math.pi


@nb.njit(cache=True, nogil=True, inline="always")
def _round(c0, c1, c2, c3, k0, k1):
    p0 = _M0 * c0
    p1 = _M1 * c2
    return (((p1 >> _S32) ^ c1 ^ k0) & _MASK, p1 & _MASK, ((p0 >> _S32) ^ c3 ^ k1) & _MASK, p0 & _MASK)


@nb.njit(cache=True, nogil=True)
def philox4x32(c0, c1, c2, c3, k0, k1, rounds=10):
    """Philox4x32-R of one 128-bit counter under one 64-bit key.

    Args:
        c0, c1, c2, c3: counter words (integers in [0, 2^32)).
        k0, k1: key words (integers in [0, 2^32)).
        rounds: R (10 is the standard Philox4x32-10; 7 only for the known-answer check).

    Returns:
        tuple of four ``uint64`` holding the 32-bit output words.
    """
    c0 = np.uint64(c0)
    c1 = np.uint64(c1)
    c2 = np.uint64(c2)
    c3 = np.uint64(c3)
    k0 = np.uint64(k0)
    k1 = np.uint64(k1)
    for i in range(rounds):
        if i > 0:
            k0 = (k0 + _W0) & _MASK
            k1 = (k1 + _W1) & _MASK
        c0, c1, c2, c3 = _round(c0, c1, c2, c3, k0, k1)
    return c0, c1, c2, c3


@nb.njit(cache=True, nogil=True, inline="always")
def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10, arguments already ``uint64`` words < 2^32 (the kernels' inner call)."""
    c0, c1, c2, c3 = _round(c0, c1, c2, c3, k0, k1)
    k0 = (k0 + _W0) & _MASK
    k1 = (k1 + _W1) & _MASK
    c0, c1, c2, c3 = _round(c0, c1, c2, c3, k0, k1)
    k0 = (k0 + _W0) & _MASK
    k1 = (k1 + _W1) & _MASK
    c0, c1, c2, c3 = _round(c0, c1, c2, c3, k0, k1)
    k0 = (k0 + _W0) & _MASK
    k1 = (k1 + _W1) & _MASK
    c0, c1, c2, c3 = _round(c0, c1, c2, c3, k0, k1)
    k0 = (k0 + _W0) & _MASK
    k1 = (k1 + _W1) & _MASK
    c0, c1, c2, c3 = _round(c0, c1, c2, c3, k0, k1)
    k0 = (k0 + _W0) & _MASK
    k1 = (k1 + _W1) & _MASK
    c0, c1, c2, c3 = _round(c0, c1, c2, c3, k0, k1)
    k0 = (k0 + _W0) & _MASK
    k1 = (k1 + _W1) & _MASK
    c0, c1, c2, c3 = _round(c0, c1, c2, c3, k0, k1)
    k0 = (k0 + _W0) & _MASK
    k1 = (k1 + _W1) & _MASK
    c0, c1, c2, c3 = _round(c0, c1, c2, c3, k0, k1)
    k0 = (k0 + _W0) & _MASK
    k1 = (k1 + _W1) & _MASK
    c0, c1, c2, c3 = _round(c0, c1, c2, c3, k0, k1)
    k0 = (k0 + _W0) & _MASK
    k1 = (k1 + _W1) & _MASK
    c0, c1, c2, c3 = _round(c0, c1, c2, c3, k0, k1)
    return c0, c1, c2, c3


@nb.njit(cache=True, nogil=True, inline="always")
def box_muller_r(a):
    """The Box–Muller radius sqrt(-2 log u1) of one 32-bit word, u1 = (a + 0.5) 2^-32."""
    u1 = (float(a) + 0.5) * _TWO_M32
    return math.sqrt(-2.0 * math.log(u1))


@nb.njit(cache=True, nogil=True, inline="always")
def box_muller_theta(b):
    """The Box–Muller angle 2 pi u2 of one 32-bit word, u2 = b 2^-32."""
    return TWO_PI * (float(b) * _TWO_M32)


@nb.njit(cache=True, nogil=True, inline="always")
def box_muller(a, b):
    """Two independent standard normals from two 32-bit words (see module docstring)."""
    r = box_muller_r(a)
    t = box_muller_theta(b)
    return r * math.cos(t), r * math.sin(t)


@nb.njit(cache=True, nogil=True)
def _normals(k0, k1, level, sample0, n_samples, n_groups):
    key0 = np.uint64(k0)
    key1 = np.uint64(k1)
    out = np.empty((n_samples, 4 * n_groups))
    for i in range(n_samples):
        s = np.uint64(sample0 + i)
        for g in range(n_groups):
            x0, x1, x2, x3 = philox4x32_10(np.uint64(g), s & _MASK, s >> _S32, np.uint64(level), key0, key1)
            z0, z1 = box_muller(x0, x1)
            z2, z3 = box_muller(x2, x3)
            out[i, 4 * g] = z0
            out[i, 4 * g + 1] = z1
            out[i, 4 * g + 2] = z2
            out[i, 4 * g + 3] = z3
    return out


def philox_normals(seed: int, level: int, sample0: int, n_samples: int, n_groups: int) -> np.ndarray:
    """The normals the MLMC kernels draw, as an array (for tests and diagnostics).

    Args:
        seed: 64-bit non-negative seed; level: MLMC level (counter word 3);
        sample0, n_samples: the sample indices ``sample0 .. sample0 + n_samples - 1``;
        n_groups: Philox blocks per sample (counter word 0 = 0 .. n_groups - 1).

    Returns:
        float64 array, shape (n_samples, 4 * n_groups): row i holds the normals of sample
        ``sample0 + i``, four per group in the order (z0, z1) of words (0, 1), (z2, z3) of (2, 3).
    """
    if not (0 <= level < 2**32 and 0 <= sample0 and n_samples >= 0 and n_groups >= 0):
        raise ValueError("level, sample0, n_samples and n_groups must be non-negative and in range")
    k0, k1 = seed_key(seed)
    return _normals(k0, k1, level, sample0, n_samples, n_groups)


def seed_key(seed: int) -> tuple[int, int]:
    """The Philox key words (low, high) of a 64-bit seed.

    Raises:
        ValueError: seed outside [0, 2^64).
    """
    seed = int(seed)
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed must lie in [0, 2^64), got {seed}")
    return seed & 0xFFFFFFFF, seed >> 32


def philox_block(counter, key, rounds: int = ROUNDS) -> tuple[int, int, int, int]:
    """Philox4x32-R of one counter (4 ints) under one key (2 ints), as Python ints."""
    c = [int(x) & 0xFFFFFFFF for x in counter]
    k = [int(x) & 0xFFFFFFFF for x in key]
    return tuple(int(v) for v in philox4x32(c[0], c[1], c[2], c[3], k[0], k[1], rounds))


#: Known-answer vectors of Random123 (``kat_vectors``): (rounds, counter, key, expected output).
KAT_VECTORS = (
    (7, (0x00000000, 0x00000000, 0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x5F6FB709, 0x0D893F64, 0x4F121F81, 0x4F730A48)),
    (7, (0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x5207DDC2, 0x45165E59, 0x4D8EE751, 0x8C52F662)),
    (7, (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0), (0x4DFCCABA, 0x190A87F0, 0xC47362BA, 0xB6B5242A)),
    (10, (0x00000000, 0x00000000, 0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    (10, (0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (10, (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0), (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
)
