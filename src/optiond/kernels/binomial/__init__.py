"""The binomial method (CRR trees, Cox, Ross & Rubinstein 1979): its front door.

The engine calls :func:`price`, :func:`implied_vol` and :func:`wants_gpu` (the kernel front-door
contract: a :class:`~optiond.models.Result` or :class:`~optiond.models.ImpliedVol` back, any GPU
failure raised as :class:`optiond.kernels.gpu.GPUError` for the engine to fall back on the CPU).

Where the method begins and ends (this folder):

* ``__init__.py``: the front door (probability checks, the GPU batch-or-pipeline choice, the
  FP32 rule, the CPU path);
* ``cpu.py``: the gold reference, CRR trees on the CPU (numba): prices, Greeks, implied vols;
* ``gpu.py``: the GPU batch kernels' host side, the trees' parameters, the compiled module;
* ``variants.py``: the kernel instances compiled from ``binomial.cu``;
* ``pipeline.py``: the single-option pipeline (one large tree over the whole GPU), run side;
* ``plan.py``: the pipeline's plan (phases, pruned windows) and the calibrated choice of engine;
* ``calibrate.py``: ``optiond calibrate``'s measurements;
* ``iv_gpu.py``: implied volatilities on the GPU (Brent's root find on the device or as a host loop);
* ``timer.py``: device time by CUDA events behind a stream gate (``timing`` dicts, benchmarks);
* ``_bench.py``: host code only the benchmark uses (the CPU-GPU split, the naive baseline);
* ``binomial.cu``: the CUDA kernels; ``gate.cu``: the stream gate of ``timer.py``.

Shared with the other methods, outside this folder: ``kernels/gpu.py`` (the GPU probe, the
device label, the compiled-module cache) and ``kernels/rootfind.py`` / ``brent.py`` (Brent's
root find).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from ...models import GREEK_FIELDS, Batch, ImpliedVol, Method, Result
from .. import gpu as gpus
from . import cpu
from .cpu import MAX_IV, MIN_IV, CRRProbabilityError, crr_batch, crr_implied_vol, crr_price  # noqa: F401 (re-exported)

#: the method has a GPU path
GPU = True


def wants_gpu(batch: Batch, method: Method) -> bool:
    """For ``method.device == "auto"`` with a GPU present: whether the calibrated dispatch
    (:func:`optiond.kernels.binomial.plan.choose`) finds the request big enough to pay for the
    transfers.

    Raises:
        InvalidInputError: ``method.steps`` has the wrong length or an out-of-range value.
    """
    from . import plan

    n = len(batch)
    return plan.choose(n, method.steps_for(n), greeks=method.greeks, gpu=True) != "cpu"


def _on_gpu(fn: Callable[..., Any], *a: Any, **kw: Any) -> Any:
    """``fn(*a, **kw)``, any failure raised as :class:`optiond.kernels.gpu.GPUError` (chained)."""
    try:
        return fn(*a, **kw)
    except gpus.GPUError:
        raise
    except Exception as e:  # noqa: BLE001 (CUDA error, out of memory, compile error: the engine uses the CPU)
        raise gpus.GPUError(f"{type(e).__name__}: {e}") from e


def price(batch: Batch, method: Method, device: str) -> Result:
    """Price a validated batch on CRR trees of ``method.steps`` steps.

    Rows whose CRR probability falls outside [0, 1] are marked ``status="error"`` with the
    reason; the rest are priced with Greeks (``method.greeks``). On the GPU (``device="gpu"``)
    the calibrated dispatch picks the batch kernel or the single-option pipeline
    (``diagnostics["path"]``); FP32 beyond ``gpu.FP32_MAX_STEPS`` steps is priced in FP64
    (``diagnostics["precision_note"]``; ``diagnostics["precision"]`` says which ran).
    ``method.extrapolate`` (``diagnostics["extrapolate"] = "BBSR"``): the converged value of
    ``cpu.crr_batch(extrapolate=True)``; on the GPU the smoothed warp kernel (FP64, path
    ``gpu-bbsr-warp``, equal to the CPU to about 1e-13 relative) takes the rows without cash
    dividends and with N <= ``gpu.BBS_MAX_STEPS``, the CPU the others
    (``diagnostics["extrapolate_note"]``).

    Args:
        batch: n contracts with market inputs.
        method: steps (scalar or one per row), greeks, precision, extrapolate.
        device: ``"cpu"`` or ``"gpu"``.

    Returns:
        :class:`~optiond.models.Result` with ``device`` ``"cpu"`` or the GPU's label.

    Raises:
        GPUError: ``device="gpu"`` and the GPU failed (the engine prices on the CPU instead).
        InvalidInputError: ``method.steps`` has the wrong length or an out-of-range value.
    """
    n = len(batch)
    steps = method.steps_for(n)
    res = Result.empty(n, device="cpu" if device == "cpu" else gpus.device_label())
    bad = cpu.probability_errors(batch.expiry, batch.rate, batch.dividend_yield, batch.volatility, steps)
    if bad.size:
        p = cpu.probabilities(batch.expiry[bad], batch.rate[bad], batch.dividend_yield[bad], batch.volatility[bad], steps[bad])
        res.mark_error(bad, [cpu.probability_message(float(x)) for x in p])
    good = np.flatnonzero(res.ok)
    if good.size == 0:
        return res
    sub = batch if good.size == len(batch) else batch.take(good)
    cash = dividend_rows(sub)
    if method.extrapolate:
        res.diagnostics["extrapolate"] = "BBSR"
    if device == "cpu":
        out = _price_cpu(sub, method, steps[good])
    elif method.extrapolate:
        out = _price_bbsr(sub, method, steps[good], cash, res)
    elif not cash.any():
        out = _price_gpu(sub, method, steps[good], res)
    else:  # cash-dividend rows on their own kernel (FP64), the rest as usual
        from . import gpu

        st = steps[good]
        out = np.empty((1 + len(GREEK_FIELDS), len(sub)))
        parts = {"rest": np.flatnonzero(~cash), "gpu": np.flatnonzero(cash & (st <= gpu.DIV_MAX_STEPS)),
                 "cpu": np.flatnonzero(cash & (st > gpu.DIV_MAX_STEPS))}
        if parts["rest"].size:
            out[:, parts["rest"]] = _price_gpu(sub.take(parts["rest"]), method, st[parts["rest"]], res)
        if parts["gpu"].size:
            d = sub.take(parts["gpu"])
            out[:, parts["gpu"]] = _with_dividend_rho(
                lambda q, greeks: _on_gpu(gpu.crr_batch_gpu, d.kind, d.style, d.spot, d.strike, d.expiry, d.rate, q,
                                          d.volatility, st[parts["gpu"]], greeks=greeks,
                                          dividend_times=d.market.dividend_times,
                                          dividend_amounts=d.market.dividend_amounts), d, st[parts["gpu"]],
                method.greeks)
            res.diagnostics["dividends_path"] = "gpu-dividend-warp (fp64)"
        if parts["cpu"].size:
            out[:, parts["cpu"]] = _price_cpu(sub.take(parts["cpu"]), method, st[parts["cpu"]])
            res.diagnostics["dividends_note"] = DIVIDENDS_ON_CPU
    for k, name in enumerate(("price",) + GREEK_FIELDS):
        getattr(res, name)[good] = out[k]
    return res


#: why cash-dividend rows are priced on the CPU when the GPU was chosen
DIVIDENDS_ON_CPU = ("cash-dividend rows with more steps than the GPU's dividend kernel holds "
                    "(gpu.DIV_MAX_STEPS) priced on the CPU")


def dividend_rows(batch: Batch) -> np.ndarray:
    """Which rows carry a cash dividend (any ex-date in the schedule, shape (n,), bool)."""
    t = batch.market.dividend_times
    if t is None:
        return np.zeros(len(batch), dtype=bool)
    return (~np.isnan(t)).any(axis=1)


#: why extrapolated (BBSR) rows run on the CPU when the GPU was chosen
EXTRAPOLATE_ON_CPU = ("extrapolate (BBSR) rows with cash dividends or more steps than the GPU's smoothed warp "
                      "kernel holds (gpu.BBS_MAX_STEPS) on the CPU")


def _bbsr_rows(cash: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Which extrapolated rows the GPU takes (shape (n,), bool): no cash dividend (BBSR with
    dividends is the CPU's) and N <= ``gpu.BBS_MAX_STEPS``."""
    from . import gpu

    return ~cash & (steps <= gpu.BBS_MAX_STEPS)


def _price_bbsr(sub: Batch, method: Method, steps: np.ndarray, cash: np.ndarray, res: Result) -> np.ndarray:
    """The (7, n) BBSR values of ``sub`` with the GPU chosen: the rows of :func:`_bbsr_rows` on
    the GPU (FP64), the rest on the CPU (``res.diagnostics["extrapolate_note"]``; ``res.device``
    ``"cpu"`` when no row is left for the GPU); fills ``res.diagnostics``."""
    from . import gpu

    on_gpu = _bbsr_rows(cash, steps)
    out = np.empty((1 + len(GREEK_FIELDS), len(sub)))
    g, c = np.flatnonzero(on_gpu), np.flatnonzero(~on_gpu)
    if g.size:
        d = sub.take(g)
        out[:, g] = _with_dividend_rho(
            lambda q, greeks: _on_gpu(gpu.crr_batch_gpu, d.kind, d.style, d.spot, d.strike, d.expiry, d.rate, q,
                                      d.volatility, steps[g], greeks=greeks, extrapolate=True), d, steps[g],
            method.greeks)
        res.diagnostics.update(path="gpu-bbsr-warp", precision="fp64")
        if method.precision != "fp64":
            res.diagnostics["precision_note"] = "extrapolate (BBSR) runs in fp64"
    if c.size:
        out[:, c] = _price_cpu(sub.take(c), method, steps[c])
        res.diagnostics["extrapolate_note"] = EXTRAPOLATE_ON_CPU
        if not g.size:
            res.device = "cpu"
    return out


def _price_cpu(sub: Batch, method: Method, steps: np.ndarray) -> np.ndarray:
    return cpu.crr_batch(sub.kind, sub.style, sub.spot, sub.strike, sub.expiry, sub.rate, sub.dividend_yield,
                         sub.volatility, steps, greeks=method.greeks, check=False,
                         dividend_times=sub.market.dividend_times, dividend_amounts=sub.market.dividend_amounts,
                         extrapolate=method.extrapolate)


def _price_gpu(sub: Batch, method: Method, steps: np.ndarray, res: Result) -> np.ndarray:
    """The (7, n) values of ``sub`` from the GPU batch kernel or the single-option pipeline (the
    calibrated choice); fills ``res.diagnostics``."""
    from . import gpu, pipeline, plan

    path = plan.choose(len(sub), steps, greeks=method.greeks, gpu=True, force_gpu=True)
    precision = method.precision
    if precision == "fp32" and int(steps.max()) > gpu.FP32_MAX_STEPS:
        precision = "fp64"
        res.diagnostics["precision_note"] = f"fp32 is for N <= {gpu.FP32_MAX_STEPS}; priced in fp64"
    fn = pipeline.crr_pipeline_gpu if path == "gpu-pipeline" else gpu.crr_batch_gpu
    out = _with_dividend_rho(lambda q, greeks: _on_gpu(fn, sub.kind, sub.style, sub.spot, sub.strike, sub.expiry,
                                                       sub.rate, q, sub.volatility, steps, greeks=greeks,
                                                       precision=precision), sub, steps, method.greeks)
    res.diagnostics.update(path=path, precision=precision)
    return out


def _with_dividend_rho(run: Callable[[np.ndarray, bool], np.ndarray], sub: Batch, steps: np.ndarray,
                       greeks: bool) -> np.ndarray:
    """The (7, n) values of a GPU kernel that returns (6, n): ``run(q, greeks)`` prices ``sub``
    at dividend yields ``q``. With ``greeks``, the dividend rho (per 1.00 of dividend yield) is
    the central difference of the price over ``q +- cpu.RHO_BUMP`` (two more launches, without
    Greeks), one-sided where a bump takes p outside [0, 1], NaN where both do: the CPU
    kernel's rule (``cpu._bumped_diff``)."""
    q = sub.dividend_yield
    out = run(q, greeks)
    full = np.full((1 + len(GREEK_FIELDS), out.shape[1]), np.nan)
    full[:out.shape[0]] = out
    if not greeks or out.shape[1] == 0:
        return full
    h = cpu.RHO_BUMP
    ok = []
    for sign in (1.0, -1.0):
        good = np.ones(q.shape[0], dtype=bool)
        good[cpu.probability_errors(sub.expiry, sub.rate, q + sign * h, sub.volatility, steps)] = False
        ok.append(good)
    up = np.where(ok[0], run(np.where(ok[0], q + h, q), False)[0], out[0])
    dn = np.where(ok[1], run(np.where(ok[1], q - h, q), False)[0], out[0])
    width = h * ok[0] + h * ok[1]
    with np.errstate(invalid="ignore", divide="ignore"):
        full[len(GREEK_FIELDS)] = np.where(width > 0, (up - dn) / width, np.nan)
    return full


def _rows(method: Method, steps: np.ndarray, rows: np.ndarray) -> Method:
    return dataclasses.replace(method, steps=steps[rows])


def _at(x: Any, rows: np.ndarray) -> Any:
    return x if np.ndim(x) == 0 else np.asarray(x)[rows]


def implied_vol(prices: np.ndarray, batch: Batch, method: Method, device: str, lo: Any = MIN_IV,
                hi: Any = MAX_IV) -> ImpliedVol:
    """Implied volatilities by Brent's root find on the CRR tree price with the row's exercise
    style, in the bracket ``[lo, hi]`` (scalars or one per row); the GPU solves the whole chain
    together (:mod:`optiond.kernels.binomial.iv_gpu`, FP64 where the trees fit a warp).
    ``method.extrapolate``: the BBSR value is inverted, on the device root find for the rows
    :func:`price` gives the GPU, on the CPU for the others (``diagnostics["extrapolate_note"]``).

    Args:
        prices: option prices, shape (n,), currency units.
        batch: the contracts and market (its ``volatility`` column is ignored).
        method: steps, ``iv_tolerance``, precision, extrapolate.
        device: ``"cpu"`` or ``"gpu"``.

    Returns:
        :class:`~optiond.models.ImpliedVol` with ``device`` ``"cpu"`` or the GPU's label.

    Raises:
        GPUError: ``device="gpu"`` and the GPU failed (the engine solves on the CPU instead).
    """
    n = len(batch)
    steps = method.steps_for(n)
    cash = dividend_rows(batch)
    if device != "cpu" and method.extrapolate:
        # BBSR on the device root find where its trees fit a warp and carry no cash dividend
        from . import iv_gpu

        full = ImpliedVol.empty(n)
        on_gpu = _bbsr_rows(cash, steps)
        rows = np.flatnonzero(~on_gpu)
        if rows.size:
            implied_vol(prices[rows], batch.take(rows), _rows(method, steps, rows), "cpu", _at(lo, rows),
                        _at(hi, rows)).scatter(full, rows)
            full.diagnostics["extrapolate_note"] = EXTRAPOLATE_ON_CPU
        rows = np.flatnonzero(on_gpu)
        if rows.size:  # last: the result's device is the GPU's where it solved any row
            d = batch.take(rows)
            vol, code = _on_gpu(iv_gpu.crr_implied_vol_gpu, prices[rows], d.kind, d.style, d.spot, d.strike, d.expiry,
                                d.rate, d.dividend_yield, steps[rows], lo=_at(lo, rows), hi=_at(hi, rows),
                                xtol=method.iv_tolerance, extrapolate=True)
            ImpliedVol.from_codes(vol, code, device=gpus.device_label()).scatter(full, rows)
        return full
    if device == "cpu" or method.extrapolate:
        vol, code = cpu.crr_implied_vol(prices, batch.kind, batch.style, batch.spot, batch.strike, batch.expiry,
                                        batch.rate, batch.dividend_yield, steps, lo=lo, hi=hi, xtol=method.iv_tolerance,
                                        dividend_times=batch.market.dividend_times,
                                        dividend_amounts=batch.market.dividend_amounts,
                                        extrapolate=method.extrapolate)
        return ImpliedVol.from_codes(vol, code)
    if cash.any():
        # cash-dividend rows on the device root find's dividend trees (N <= DIV_MAX_STEPS), wider
        # ones on the CPU, the rest as without dividends
        from . import gpu, iv_gpu

        fits = steps <= gpu.DIV_MAX_STEPS
        full = ImpliedVol.empty(n, device=gpus.device_label())
        for rows, where in ((np.flatnonzero(~cash), device), (np.flatnonzero(cash & ~fits), "cpu")):
            if rows.size:
                implied_vol(prices[rows], batch.take(rows), _rows(method, steps, rows), where, _at(lo, rows),
                            _at(hi, rows)).scatter(full, rows)
        rows = np.flatnonzero(cash & fits)
        if rows.size:
            d = batch.take(rows)
            vol, code = _on_gpu(iv_gpu.crr_implied_vol_gpu, prices[rows], d.kind, d.style, d.spot, d.strike, d.expiry,
                                d.rate, d.dividend_yield, steps[rows], lo=_at(lo, rows), hi=_at(hi, rows),
                                xtol=method.iv_tolerance, dividend_times=d.market.dividend_times,
                                dividend_amounts=d.market.dividend_amounts)
            ImpliedVol.from_codes(vol, code, device=full.device).scatter(full, rows)
        return full
    from . import gpu, iv_gpu

    label = gpus.device_label()
    precision = method.precision if int(steps.max(initial=0)) <= gpu.FP32_MAX_STEPS else "fp64"
    vol, code = _on_gpu(iv_gpu.crr_implied_vol_gpu, prices, batch.kind, batch.style, batch.spot, batch.strike,
                        batch.expiry, batch.rate, batch.dividend_yield, steps, lo=lo, hi=hi, xtol=method.iv_tolerance,
                        precision=precision)
    return ImpliedVol.from_codes(vol, code, device=label)
