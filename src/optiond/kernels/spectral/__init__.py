"""The spectral American engine (Andersen, Lake & Offengenden 2016): its front door.

The engine calls :func:`price`, :func:`implied_vol` and :func:`wants_gpu` (the kernel front-door
contract of :mod:`optiond.kernels.binomial`: a :class:`~optiond.models.Result` or
:class:`~optiond.models.ImpliedVol` back).

Where the method begins and ends (this folder):

* ``__init__.py``: the front door (which rows the method prices, which go elsewhere);
* ``cpu.py``: the gold reference, the ALO fixed-point iteration, Chebyshev collocation in
  sqrt(tau) and the premium integral on the CPU (numba, ``prange`` over contracts); the
  accuracy settings (:data:`~optiond.kernels.spectral.cpu.ACCURACY`);
* ``gpu.py`` / ``spectral.cu``: the same recurrences on a CUDA GPU in FP64, one warp per solve,
  a whole batch (prices and Greeks, or implied volatilities) in one launch.

Rows and where they go (``method="spectral"``):

* American rows of the single-boundary regime (:func:`cpu.regime` 0: r > 0, or r = 0 > q, for
  a put; a call by the put–call symmetry): the ALO engine at ``method.accuracy``;
* European rows, and American rows where early exercise is never optimal (put: r <= 0 and
  q >= r; call: q <= 0 and r >= q): the Black–Scholes–Merton closed form
  (:mod:`optiond.kernels.black_scholes`), which is then the American price exactly;
* rows the method does not cover, on the CRR tree (:mod:`optiond.kernels.binomial`, CPU,
  ``method.steps`` steps): the double-boundary regime (put: q < r < 0; call: r < q < 0) and
  cash-dividend rows. ``diagnostics["spectral_tree_rows"]`` lists them (row indices) and
  ``diagnostics["spectral_tree_note"]`` says why; a tree row whose CRR probability falls
  outside [0, 1] is marked as the tree marks it.

Accuracy settings (``method.accuracy``; :data:`cpu.ACCURACY`; n Chebyshev intervals, fixed-point
rule and size, m sweeps, premium rule and size) and their measured worst absolute price error
on 240 random American puts and calls (S/K 0.7–1.3, T one week to 5 years, sigma 0.05–1.0,
r and q 0–10 %, strike 100; ``tests/test_spectral.py``) against a converged reference,
QuantLib 1.44's ``QdFpAmericanEngine`` with a tanh-sinh scheme of 64 Chebyshev nodes
(``QdFpTanhSinhIterationScheme(12, 64, 1e-12)``, the same smooth-pasting equation,
``FP_A``; it agrees with our engine at 96 nodes to 4e-10): see :data:`MEASURED_ERROR`.
QuantLib's stock high-precision scheme (30 nodes) is itself off by up to 2.9e-8 on that grid
(a put with r = 8.2 %, q = 9.1 %, sigma = 57 %, T = 2.3: the Chebyshev interpolation error
of a boundary with a layer at small tau when r is just below q), so it is not the reference.

Device: with ``device="gpu"``, or ``"auto"`` and a GPU present where :func:`wants_gpu` says so
(at least :data:`GPU_MIN_ROWS` rows for the ALO engine; the daemon places requests by the work
model's crossover of :mod:`optiond.kernels.spectral.plan`), the ALO rows are priced (or inverted) on the GPU
(``spectral.cu``, one warp per solve, FP64); the closed-form and tree rows stay on the CPU. A
GPU failure is raised as :class:`~optiond.kernels.gpu.GPUError` for the engine to price the
batch on the CPU.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from ...models import AMERICAN, GREEK_FIELDS, Batch, ImpliedVol, Method, Result
from .. import black_scholes
from ..rootfind import IV_BELOW
from .. import gpu as gpus
from . import cpu
from .cpu import ACCURACY, ACCURACY_NAMES, MAX_IV, MIN_IV, alo_batch, alo_implied_vol, regime  # noqa: F401

#: the method has a GPU path (:mod:`optiond.kernels.spectral.gpu`)
GPU = True

#: ALO rows from which ``device="auto"`` prices on the GPU (bench/american.py, section ``gpu``,
#: fast prices host to host against the CPU engine on 16 threads of an H200 host: even at 300
#: options (GPU 0.54 against CPU 0.52 ms in one run, 0.32 against 0.52 in another), the GPU
#: twice as fast at 1,000; a host with fewer cores crosses lower)
GPU_MIN_ROWS = 500

#: worst absolute price error of each setting against the converged QuantLib reference on the
#: 240-option grid of ``tests/test_spectral.py`` (currency units, strike 100)
MEASURED_ERROR = {"fast": 6.9e-6, "accurate": 1.0e-7, "high-precision": 2.7e-9}

#: why rows went to the tree
TREE_NOTE = ("rows outside the spectral method (cash dividends, the double-boundary regime: put q < r < 0, "
             "call r < q < 0, or a drift-dominated row: |r - q| sqrt(T) > volatility) priced on the CRR tree")


def wants_gpu(batch: Batch, method: Method) -> bool:
    """For ``method.device == "auto"`` with a GPU present: whether the batch has at least
    :data:`GPU_MIN_ROWS` rows for the ALO engine (American rows of the single-boundary regime;
    the crossover measured in process, against the CPU's threads). The daemon places whole
    requests by the work model's crossover (:func:`optiond.kernels.spectral.plan.choose`)."""
    return GPU and _route(batch)[0].size >= GPU_MIN_ROWS


#: what prices a row of :func:`route_rows`'s codes, by method name
ROUTE_METHODS = ("spectral", "black-scholes", "binomial")


def route_rows(kind: np.ndarray, style: np.ndarray, rate: np.ndarray, dividend_yield: np.ndarray,
               cash: np.ndarray, volatility: np.ndarray | None = None,
               expiry: np.ndarray | None = None) -> np.ndarray:
    """Where each row goes, int8 shape (n,), an index into :data:`ROUTE_METHODS`: 0 the ALO
    engine (American, single-boundary regime), 1 the closed form (European rows, and American
    rows where early exercise is never optimal), 2 the CRR tree (cash dividends, American rows
    of the double-boundary regime, and, where ``volatility`` and ``expiry`` are given, American
    rows where the drift dominates: volatility under :func:`cpu.drift_volatility`). ``kind``,
    ``style``: codes of :mod:`optiond.models`; ``rate``, ``dividend_yield``, ``volatility``:
    annualised decimals; ``expiry``: years; ``cash``: bool, the row has a cash dividend."""
    reg = regime(kind, rate, dividend_yield)
    american = np.asarray(style) == AMERICAN
    tree = np.asarray(cash, dtype=bool) | (american & (reg == cpu.DOUBLE_BOUNDARY))
    if volatility is not None and expiry is not None:
        with np.errstate(invalid="ignore"):
            drift = np.asarray(volatility) < cpu.drift_volatility(rate, dividend_yield, expiry)
        tree |= american & (reg == cpu.SINGLE) & drift
    closed = ~tree & (~american | (reg == cpu.EUROPEAN_EQUIVALENT))
    return np.where(tree, 2, np.where(closed, 1, 0)).astype(np.int8)


def _route(batch: Batch, by_volatility: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row indices for (the ALO kernel, the closed form, the tree); ``by_volatility``: the
    drift-dominated rows to the tree too (not for an implied volatility, whose volatility is
    the unknown: :func:`implied_vol` splits those rows by price)."""
    t = batch.market.dividend_times
    cash = np.zeros(len(batch), dtype=bool) if t is None else (~np.isnan(t)).any(axis=1)
    where = route_rows(batch.kind, batch.style, batch.rate, batch.dividend_yield, cash,
                       batch.volatility if by_volatility else None, batch.expiry)
    return np.flatnonzero(where == 0), np.flatnonzero(where == 1), np.flatnonzero(where == 2)


#: an implied volatility under the drift-dominated volatility v* is sought on the tree in
#: [lo, DRIFT_BRACKET v*]
DRIFT_BRACKET = 1.25


def _tree_method(method: Method, n: int, rows: np.ndarray) -> Method:
    return dataclasses.replace(method, name="binomial", device="cpu", steps=method.steps_for(n)[rows]
                               if np.ndim(method.steps) else method.steps)


def price(batch: Batch, method: Method, device: str = "cpu") -> Result:
    """Price a validated batch: the ALO engine on American single-boundary rows, the closed
    form on European(-equivalent) rows, the CRR tree on the rest (see the module docstring).
    ``device``: ``"gpu"`` prices the ALO rows on the GPU (:func:`gpu.alo_batch_gpu`), the
    others stay on the CPU.

    Returns:
        :class:`~optiond.models.Result`: price, delta, gamma, theta (the method's own), vega
        rho and dividend rho (bumped) when ``method.greeks``; ``diagnostics``: ``spectral_accuracy``, and
        ``spectral_tree_rows`` / ``spectral_tree_note`` where rows went to the tree.

    Raises:
        GPUError: ``device="gpu"`` and the GPU failed (the engine prices on the CPU instead).
        InvalidInputError: tree rows with an invalid ``method.steps``.
    """
    from .. import binomial

    n = len(batch)
    res = Result.empty(n)
    res.diagnostics["spectral_accuracy"] = method.accuracy
    alo, closed, tree = _route(batch)
    if alo.size:
        b = batch.take(alo)
        run = alo_batch
        if device != "cpu":
            from . import gpu

            run = functools.partial(gpu.alo_batch_gpu, dividend_rho=True)  # seven rows, as the CPU's
            res.device = gpus.device_label()
        out = run(b.kind, b.spot, b.strike, b.expiry, b.rate, b.dividend_yield, b.volatility, method.accuracy,
                  greeks=method.greeks)
        for k, name in enumerate(("price",) + GREEK_FIELDS):
            getattr(res, name)[alo] = out[k]
    if closed.size:
        b = batch.take(closed)
        out = black_scholes.bs_price_greeks(b.kind, b.spot, b.strike, b.expiry, b.rate, b.dividend_yield, b.volatility)
        for name in ("price",) + GREEK_FIELDS:
            getattr(res, name)[closed] = out[name] if (method.greeks or name == "price") else np.nan
    if tree.size:
        binomial.price(batch.take(tree), _tree_method(method, n, tree), "cpu").scatter(res, tree)
        res.device = "cpu"
        res.diagnostics.update(spectral_tree_rows=tree.tolist(), spectral_tree_note=TREE_NOTE)
    return res


def implied_vol(prices: np.ndarray, batch: Batch, method: Method, device: str = "cpu", lo=MIN_IV,
                hi=MAX_IV) -> ImpliedVol:
    """Implied volatilities, each row on the price that :func:`price` gives it: one ALO solve a
    step (a Newton step with the European vega, then secant steps, kept inside the bracket
    that the signs give, bisection where a step leaves it: :func:`cpu.alo_implied_vol`) on
    single-boundary American rows, a price under the exercise value there ``below-intrinsic``
    (as on the tree); Brent on the closed form on
    European(-equivalent) rows; the tree's Brent on tree rows. ``lo``, ``hi``: the bracket
    (scalars or shape (n,)); ``device="gpu"``: the ALO rows on the GPU
    (:func:`gpu.alo_implied_vol_gpu`, the same search).

    Returns:
        :class:`~optiond.models.ImpliedVol` (statuses ``ok``, ``below-intrinsic``,
        ``no-solution``, ``not-converged``, ``invalid``).

    Raises:
        GPUError: ``device="gpu"`` and the GPU failed (the engine solves on the CPU instead).
    """
    from .. import binomial

    n = len(batch)
    prices = np.broadcast_to(np.asarray(prices, dtype=np.float64), (n,))
    lo_a = np.broadcast_to(np.asarray(lo, dtype=np.float64), (n,))
    hi_a = np.broadcast_to(np.asarray(hi, dtype=np.float64), (n,))
    iv = ImpliedVol.empty(n, status="ok")
    where = "cpu"
    alo, closed, tree = _route(batch, by_volatility=False)
    hi_a = hi_a.copy()
    if alo.size:  # a price under the ALO price at the drift-dominated volatility: its root is there, on the tree
        b = batch.take(alo)
        vstar = cpu.drift_volatility(b.rate, b.dividend_yield, b.expiry)
        check = np.flatnonzero(vstar > lo_a[alo])
        low = np.zeros(alo.size, dtype=bool)
        if check.size:
            c = b.take(check)
            split = alo_batch
            if device != "cpu":  # the GPU rows' split on the GPU too
                from . import gpu

                split = gpu.alo_batch_gpu
            pstar = split(c.kind, c.spot, c.strike, c.expiry, c.rate, c.dividend_yield, vstar[check],
                          method.accuracy, greeks=False)[0]
            low[check] = (prices[alo][check] < pstar) | (vstar[check] >= hi_a[alo][check])
            up = check[~low[check]]  # the ALO search starts at the switch
            lo_a = lo_a.copy()
            lo_a[alo[up]] = np.maximum(lo_a[alo[up]], vstar[up])
        # the tree's bracket ends a little above the switch (the two methods differ there by the tree's error)
        hi_a[alo[low]] = np.minimum(hi_a[alo[low]], DRIFT_BRACKET * vstar[low])
        tree = np.sort(np.concatenate([tree, alo[low]]))
        alo = alo[~low]
    if alo.size:
        b = batch.take(alo)
        # under the exercise value no American price exists (the tree's "below-intrinsic"); the
        # ALO price at a volatility near 0 can fall under it, so such a price is not inverted
        exercise = np.maximum(np.where(b.kind == 1, b.spot - b.strike, b.strike - b.spot), 0.0)
        with np.errstate(invalid="ignore"):
            below = prices[alo] < exercise - 1e-13 * np.maximum(1.0, prices[alo])
        run = alo_implied_vol
        if device != "cpu":
            from . import gpu

            run = gpu.alo_implied_vol_gpu
            where = gpus.device_label()
        vol, code = run(prices[alo], b.kind, b.spot, b.strike, b.expiry, b.rate, b.dividend_yield, method.accuracy,
                        lo_a[alo], hi_a[alo], method.iv_tolerance)
        vol[below], code[below] = np.nan, IV_BELOW
        ImpliedVol.from_codes(vol, code).scatter(iv, alo)
    if closed.size:
        b = batch.take(closed)
        vol, code = black_scholes.bs_implied_vol(prices[closed], b.kind, b.spot, b.strike, b.expiry, b.rate,
                                                 b.dividend_yield)
        ImpliedVol.from_codes(vol, code).scatter(iv, closed)
    if tree.size:
        binomial.implied_vol(prices[tree], batch.take(tree), _tree_method(method, n, tree), "cpu",
                             lo_a[tree], hi_a[tree]).scatter(iv, tree)
        iv.diagnostics.update(spectral_tree_rows=tree.tolist(), spectral_tree_note=TREE_NOTE)
        where = "cpu"
    iv.device = where  # (each part's scatter wrote its own)
    return iv
