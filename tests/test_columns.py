"""The kernels' input columns: read-only inputs (a copy-on-write DataFrame's columns, buffers
decoded from the wire) become writeable copies, so that numba compiles each kernel once for
writeable arrays instead of once more for every pattern of read-only arguments; the prices are
those of the writeable inputs, bit for bit."""

from __future__ import annotations

import numpy as np
from numba import types

from optiond.columns import as_columns, kernel_column
from optiond.kernels import black_scholes as bs
from optiond.kernels.binomial import cpu as bc
from optiond.kernels.heston import cpu as hc
from optiond.kernels.spectral import cpu as sc


def read_only(a) -> np.ndarray:
    a = np.array(a)
    a.setflags(write=False)
    return a


def read_only_signatures(dispatcher) -> list:
    return [sig for sig in dispatcher.signatures if any(isinstance(t, types.Array) and not t.mutable for t in sig)]


def test_read_only_columns_become_writeable_copies():
    ro = read_only([1.0, 2.0, 3.0])
    cols = as_columns(ro, 2.0, [1, 2, 3], (ro, np.int8))
    assert all(c.flags.writeable and c.flags.c_contiguous for c in cols)
    np.testing.assert_array_equal(cols[0], ro)
    assert cols[0] is not ro and cols[3].dtype == np.int8
    w = np.arange(3.0)
    assert kernel_column(w, np.float64) is w  # a writeable column is not copied
    kind, flat = sc.flat_columns((3,), read_only([0, 1, 0]), ro, 100.0)
    assert kind.flags.writeable and all(c.flags.writeable for c in flat)


def test_kernels_given_read_only_inputs_compile_no_read_only_specialisation():
    S, K, T = read_only([95.0, 100.0, 105.0]), read_only([100.0, 100.0, 90.0]), read_only([0.5, 1.0, 0.25])
    kind = read_only(np.array([0, 1, 0], dtype=np.int8))
    ref = bc.crr_batch(kind.copy(), 1, S.copy(), K.copy(), T.copy(), 0.03, 0.01, 0.25, 60, parallel=False)
    np.testing.assert_array_equal(bc.crr_batch(kind, 1, S, K, T, 0.03, 0.01, 0.25, 60, parallel=False), ref)
    ref = bs.bs_price_greeks(kind.copy(), S.copy(), K.copy(), T.copy(), 0.03, 0.01, 0.25)
    got = bs.bs_price_greeks(kind, S, K, T, 0.03, 0.01, 0.25)
    assert all(np.array_equal(got[k], ref[k]) for k in ref)
    ref = sc.alo_batch(kind.copy(), S.copy(), K.copy(), T.copy(), 0.03, 0.01, 0.25, "fast", greeks=False)
    np.testing.assert_array_equal(sc.alo_batch(kind, S, K, T, 0.03, 0.01, 0.25, "fast", greeks=False), ref)
    h = dict(v0=0.04, kappa=1.5, theta=0.04, xi=0.3, rho=-0.7, greeks=False)
    ref = hc.heston_batch(kind.copy(), S.copy(), K.copy(), T.copy(), 0.03, 0.01, **h)
    np.testing.assert_array_equal(hc.heston_batch(kind, S, K, T, 0.03, 0.01, **h), ref)
    for d in (bc._batch_serial, bs._bs_batch, sc.alo_batch_kernel, hc._chunks_serial):
        assert read_only_signatures(d) == [], d
