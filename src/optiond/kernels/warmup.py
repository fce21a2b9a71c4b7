"""The one list of what to compile ahead: every CPU kernel the product calls, through the
front doors that call it (:data:`TARGETS`), and the run that compiles them (:func:`warm`).

``optiond warmup`` (run by ``make venv``, ``make demo`` and the installers) and the daemon's
warm-up at start both call :func:`warm` over this list, so a new method joins both by one line
here. Each target prices a few tiny batches through :mod:`optiond.engine` (and the chain job's
surface fit) with inputs chosen so that every variant its method can reach is compiled: one row
(the scalar paths) and a batch past each kernel's threshold for its threaded (``prange``) loop,
prices, Greeks and implied volatilities.

numba's cache rules, as they apply here:

* every ``@njit`` the product calls has ``cache=True``; a kernel compiled once is written to
  disk and a later process loads it instead of compiling it again;
* the cache lives beside the source (``__pycache__``) when that directory is writable, else in
  the user's cache directory (numba's: ``~/.cache/numba`` on Linux), or under
  ``$NUMBA_CACHE_DIR`` when that is set; a read-only (system-wide) install thus
  compiles once per user, on that user's ``optiond warmup`` or first run;
* an entry is keyed by the source file's modification time and size and by the CPU's name and
  features: a new release, or a cache carried to another CPU model, compiles again (once);
* the files are named after the function's qualified name and line, and an entry does not
  record the compile options: one body compiled twice (a threaded and a serial loop) needs two
  names (:func:`cache_variant`), else a process loads whichever was saved last for both.

While a kernel of this package compiles (a cache miss), :func:`announce_compiles` prints one
line on stderr, once per process: the first run after an install without ``optiond warmup``
says why it waits instead of a silent stall.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from typing import Any, Callable, Iterable, Sequence

#: about how long compiling every kernel takes on a 2-core CPU (``bench/startup.py``,
#: ``optiond warmup`` from an empty cache), seconds; the cold-cache line quotes it
COLD_COMPILE_S = 180

#: the line printed (once per process) when a kernel of this package compiles
COMPILING_LINE = (f"optiond: compiling the pricing kernels once (up to about {COLD_COMPILE_S} s; "
                  "'optiond warmup' does it ahead); later runs start at once")


@dataclasses.dataclass(frozen=True)
class Target:
    """One entry of the warm-up list: ``name`` (the selector of ``optiond warmup --only``),
    ``what`` (one line) and ``run`` (prices through the front doors; raises on a failure)."""

    name: str
    what: str
    run: Callable[[], None]


@dataclasses.dataclass
class Outcome:
    """What warming one target did: kernel signatures ``compiled`` (cache misses, now on
    disk) and ``cached`` (loaded from the disk cache), wall ``seconds``, and ``error`` (the
    failure in one line, or None)."""

    name: str
    compiled: int = 0
    cached: int = 0
    seconds: float = 0.0
    error: str | None = None


def cache_variant(fn: Callable, name: str) -> Callable:
    """A copy of the Python function ``fn`` named ``name`` (same code, globals, defaults and
    closure), for a second ``numba.njit`` of one body with other options (``parallel=True``
    and not): numba names its disk-cache files after the function and keys an entry by the
    signature and the CPU, not by the options, so two compilations under one name overwrite
    each other's entry and a later process loads the wrong one for both."""
    import types

    copy = types.FunctionType(fn.__code__, fn.__globals__, name, fn.__defaults__, fn.__closure__)
    copy.__qualname__ = name
    copy.__doc__ = fn.__doc__
    return copy


# ---------------------------------------------------------------------------- the inputs


def _contracts(n: int, *, style: str = "american", seed: int = 0) -> dict[str, Any]:
    """``n`` puts and calls around the money (spot 100, strikes 80-120, expiries a month to two
    years, rates and yields 0-6 %, volatilities 15-45 %), deterministic."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return {"kind": np.where(np.arange(n) % 2 == 0, "put", "call").astype(object),
            "style": style, "spot": 100.0, "strike": rng.uniform(80.0, 120.0, n),
            "expiry": rng.uniform(1 / 12, 2.0, n), "rate": rng.uniform(0.0, 0.06, n),
            "dividend_yield": rng.uniform(0.0, 0.04, n), "volatility": rng.uniform(0.15, 0.45, n)}


def _one(style: str = "american", kind: str = "put") -> dict[str, Any]:
    return {"kind": kind, "style": style, "spot": 100.0, "strike": 105.0, "expiry": 0.5, "rate": 0.04,
            "dividend_yield": 0.01, "volatility": 0.25}


def _price_and_invert(cols: dict[str, Any], method: Any, *, invert: bool = True) -> None:
    """Price ``cols`` with ``method`` (Greeks on and off), then invert the prices found."""
    import numpy as np

    from .. import engine

    res = engine.price_table(cols, method)
    engine.price_table(cols, dataclasses.replace(method, greeks=False))
    if invert:
        prices = np.where(np.isfinite(res.price), res.price, 5.0)
        engine.implied_vol_table(prices if prices.size > 1 else float(prices[0]), cols, method)


def _both_sizes(method: Any, *, rows: int = 48, invert: bool = True) -> None:
    """One American put, one European call, and a batch of ``rows`` American contracts (past
    the threaded loops' thresholds), priced and inverted."""
    _price_and_invert(_one(), method, invert=invert)
    _price_and_invert(_one("european", "call"), method, invert=invert)
    _price_and_invert(_contracts(rows), method, invert=invert)


# ---------------------------------------------------------------------------- the targets


def _black_scholes() -> None:
    from ..models import Method

    _both_sizes(Method(name="black-scholes"))
    _price_and_invert(_contracts(48, style="european"), Method(name="black-scholes"))


def _binomial() -> None:
    from ..models import Method

    for extrapolate in (False, True):  # the CRR tree, and BBSR (smoothed, Richardson)
        _both_sizes(Method(name="binomial", steps=300, extrapolate=extrapolate))
    _time_cpu_kernel_once()


def _time_cpu_kernel_once() -> None:
    """The serial batch loop the daemon times for its cost model (no Greeks)."""
    import numpy as np

    from .binomial import cpu

    n = 2
    cpu.crr_batch(np.zeros(n, np.int8), np.ones(n, np.int8), np.full(n, 100.0), np.full(n, 100.0), np.full(n, 1.0),
                  np.full(n, 0.03), np.zeros(n), np.full(n, 0.2), np.full(n, 16, np.int64), greeks=False,
                  parallel=False, check=False)


def _dividends() -> None:
    """Cash dividends: the tree with dividend steps, by ``binomial``, ``spectral`` and ``auto``."""
    import numpy as np

    from ..models import Method

    for n in (1, 48):
        cols = _contracts(n) if n > 1 else _one()
        cols = {**cols, "dividend_times": np.tile([[0.1, 0.35]], (n, 1)),
                "dividend_amounts": np.tile([[0.8, 0.8]], (n, 1))}
        for name in ("binomial", "spectral", "auto"):
            _price_and_invert(cols, Method(name=name, steps=300))


def _spectral(accuracy: str) -> Callable[[], None]:
    def run() -> None:
        from ..models import Method

        m = Method(name="spectral", accuracy=accuracy, steps=100)
        _both_sizes(m)
        _price_and_invert({**_one(), "rate": -0.01, "dividend_yield": -0.02}, m)  # a double-boundary row: the tree
        _price_and_invert(_contracts(48), dataclasses.replace(m, name="auto"))

    return run


def _heston() -> None:
    """The semi-analytic European engine: one contract, and more chunks than its threaded
    loop's threshold (one expiry each); the Heston fit's pricing of a whole chain."""
    import numpy as np

    from ..models import Method
    from .heston import cpu as heston_cpu

    params = {"v0": 0.04, "kappa": 1.5, "long_run_variance": 0.05, "xi": 0.5, "correlation": -0.6}
    m = Method(name="heston")
    _price_and_invert({**_one("european"), **params}, m, invert=False)
    n = heston_cpu.PARALLEL_MIN_CHUNKS * heston_cpu.CHUNK + 1
    cols = {**_contracts(n, style="european"), **params,
            "expiry": np.repeat(np.linspace(0.05, 2.0, heston_cpu.PARALLEL_MIN_CHUNKS + 1), heston_cpu.CHUNK)[:n]}
    _price_and_invert(cols, m, invert=False)


def _adi() -> None:
    """Heston ADI (American and European) on a small grid, every scheme."""
    from ..models import ADI_SCHEMES, Method

    params = {"v0": 0.04, "kappa": 1.5, "long_run_variance": 0.05, "xi": 0.5, "correlation": -0.6}
    for scheme in ADI_SCHEMES:
        m = Method(name="adi", scheme=scheme, grid=(24, 12), time_steps=8, steps_per_year=8.0)
        _price_and_invert({**_one(), **params}, m, invert=False)
    cols = {**_contracts(8), **params}
    _price_and_invert(cols, Method(name="adi", grid=(24, 12), time_steps=8, steps_per_year=8.0), invert=False)


def _mlmc() -> None:
    """Multilevel Monte Carlo, every payoff family, to a loose accuracy."""
    from ..models import PAYOFFS, Method

    for payoff in PAYOFFS:
        m = Method(name="mlmc", eps=0.2, payoff=payoff, seed=1)
        _price_and_invert(_one("european"), m, invert=False)
        _price_and_invert(_contracts(4, style="european"), m, invert=False)


def _surface() -> None:
    """The chain job's volatility surface: the SVI fit of two slices (the second against the
    first: the calendar terms), their arbitrage-free corrections towards the quotes, the
    corrected curves' call prices, and the fit's objective (its constrained fall-back)."""
    import numpy as np

    from ..surface import correction, fit, solver

    k = np.linspace(-0.3, 0.3, 21)
    prev_svi = prev_curve = None
    for T, level in ((0.25, 0.2), (0.5, 0.21)):
        iv = level + 0.15 * k * k - 0.05 * k
        prior, _ = fit.fit_slice(k, iv, iv - 0.01, iv + 0.01, T, prev=prev_svi)
        curve, _ = correction.correct_slice(prior, T, np.exp(k), iv - 0.01, iv + 0.01, iv, prev=prev_curve)
        curve.calls(np.exp(k))
        curve.total_variance(k)
        prev_svi, prev_curve = prior, curve
    none = np.empty(0)
    x = np.array([0.04, 0.1, -0.3, 0.0, 0.2])
    solver.objective(x, 0.25, k, iv - 0.01, iv + 0.01, iv, none, none, none, 0.0, fit.MID_PULL, fit.G_MARGIN,
                     fit.CAL_MARGIN, fit.LEE_MAX)


def _gpu() -> None:
    """With a GPU: its modules for each method that has one (one small batch each)."""
    import numpy as np

    from . import gpu as gpus

    if not gpus.available():
        return
    from .. import engine
    from ..models import Method

    for name in ("binomial", "spectral", "heston", "adi", "mlmc"):
        door = engine.front_door(name)
        if getattr(door, "GPU", False):
            cols = _contracts(64, style="european" if name in ("heston", "mlmc") else "american")
            if name in ("heston", "adi"):
                cols.update({"v0": 0.04, "kappa": 1.5, "long_run_variance": 0.05, "xi": 0.5, "correlation": -0.6})
            m = Method(name=name, device="gpu", steps=100, eps=0.2, grid=(24, 12), time_steps=8)
            res = engine.price_table(cols, m)
            if name in engine.IV_METHODS:  # the GPU implied volatilities (and their CPU root-finding steps)
                engine.implied_vol_table(np.where(np.isfinite(res.price), res.price, 5.0), cols, m)


#: every kernel the product calls, by method (the selectors of ``optiond warmup --only``: a
#: name, or its part before a dash: ``spectral`` selects the three accuracy settings)
TARGETS: tuple[Target, ...] = (
    Target("black-scholes", "closed form: prices, Greeks, implied volatilities", _black_scholes),
    Target("binomial", "CRR tree and BBSR: one option, batches, implied volatilities", _binomial),
    Target("dividends", "cash dividends on the tree (binomial, spectral, auto)", _dividends),
    Target("spectral-fast", "spectral American engine, accuracy fast (and its implied volatilities)",
           _spectral("fast")),
    Target("spectral-accurate", "spectral American engine, accuracy accurate", _spectral("accurate")),
    Target("spectral-high-precision", "spectral American engine, accuracy high-precision", _spectral("high-precision")),
    Target("heston", "Heston semi-analytic European engine", _heston),
    Target("adi", "Heston ADI finite differences (schemes do, cs, mcs, hv)", _adi),
    Target("mlmc", "multilevel Monte Carlo (vanilla, digital, Asian)", _mlmc),
    Target("surface", "volatility surface fit (SVI and the arbitrage-free correction)", _surface),
    Target("gpu", "GPU modules (only where a GPU is present)", _gpu),
)


def select(only: Iterable[str] | None = None) -> list[Target]:
    """The targets named by ``only`` (each a target name or the part before its dash), in the
    list's order; None: all.

    Raises:
        ValueError: a name that selects nothing (the message lists the names).
    """
    if only is None:
        return list(TARGETS)
    wanted = [w.strip().lower() for w in only if w.strip()]
    unknown = [w for w in wanted if not any(t.name == w or t.name.startswith(w + "-") for t in TARGETS)]
    if unknown or not wanted:
        raise ValueError(f"no warm-up target {', '.join(unknown) or '(none given)'}; "
                         f"expected one of {', '.join(t.name for t in TARGETS)}")
    return [t for t in TARGETS if any(t.name == w or t.name.startswith(w + "-") for w in wanted)]


# ---------------------------------------------------------------------------- the counts


def _dispatchers() -> list[Any]:
    """Every numba dispatcher with a disk cache in the loaded modules of this package."""
    from numba.core.caching import NullCache
    from numba.core.dispatcher import Dispatcher

    seen: dict[int, Any] = {}
    for name, mod in list(sys.modules.items()):
        if mod is None or not (name == "optiond" or name.startswith("optiond.")):
            continue
        for value in list(vars(mod).values()):
            if isinstance(value, Dispatcher) and not isinstance(getattr(value, "_cache", None), NullCache):
                seen.setdefault(id(value), value)
    return list(seen.values())


def cache_counts() -> tuple[int, int]:
    """``(compiled, cached)``: kernel signatures this process compiled (disk-cache misses)
    and loaded from the disk cache (hits), over the package's cached kernels loaded so far
    (numba's dispatcher statistics)."""
    compiled = cached = 0
    for d in _dispatchers():
        compiled += sum(d._cache_misses.values())
        cached += sum(d._cache_hits.values())
    return compiled, cached


def cache_dirs() -> list[str]:
    """Where the package's kernels are cached (one directory per source folder, or
    ``$NUMBA_CACHE_DIR``'s), for the summary."""
    out = []
    for d in _dispatchers():
        path = getattr(getattr(d, "_cache", None), "cache_path", None)
        if path and path not in out:
            out.append(path)
    return sorted(out)


def warm(targets: Sequence[Target] | None = None, on_target: Callable[[Target, Outcome], None] | None = None,
         on_start: Callable[[Target], None] | None = None) -> list[Outcome]:
    """Run each target (default: :data:`TARGETS`), counting what it compiled and loaded.

    Args:
        targets: what to warm (:func:`select`).
        on_start, on_target: called before and after each target (progress).

    Returns:
        One :class:`Outcome` per target, in order. A target that fails is recorded with its
        error (one line) and the rest still run: a warm-up never stops the caller.
    """
    out = []
    for t in (TARGETS if targets is None else targets):
        if on_start is not None:
            on_start(t)
        c0, h0 = cache_counts()
        t0 = time.perf_counter()
        o = Outcome(t.name)
        try:
            t.run()
        except Exception as e:  # noqa: BLE001 (recorded; the other targets still warm)
            o.error = f"{type(e).__name__}: {' '.join(str(e).split())}"[:300]
        o.seconds = time.perf_counter() - t0
        c1, h1 = cache_counts()
        o.compiled, o.cached = c1 - c0, h1 - h0
        out.append(o)
        if on_target is not None:
            on_target(t, o)
    return out


# ---------------------------------------------------------------------------- the cold-cache line


_announce_lock = threading.Lock()
_announce = {"installed": False, "said": False}


def announce_compiles(stream: Any = None) -> None:
    """From now on, print :data:`COMPILING_LINE` on ``stream`` (default: stderr at the time)
    when a kernel of this package is compiled rather than loaded from the disk cache: once
    per process. Installs a numba event listener (``numba:compile`` fires on a cache miss
    only); calling it again does nothing. ``OPTIOND_QUIET_COMPILE=1`` keeps it silent."""
    with _announce_lock:
        if _announce["installed"]:
            return
        _announce["installed"] = True
    from numba.core import event

    class _Listener(event.Listener):
        def on_start(self, ev: Any) -> None:
            if _announce["said"]:
                return
            d = (ev.data or {}).get("dispatcher")
            module = getattr(getattr(d, "py_func", None), "__module__", "") or ""
            if not module.startswith("optiond."):
                return
            _announce["said"] = True
            if os.environ.get("OPTIOND_QUIET_COMPILE", "") not in ("", "0"):
                return
            try:
                print(COMPILING_LINE, file=stream or sys.stderr, flush=True)
            except (OSError, ValueError, AttributeError):  # no console (a GUI process): nothing to say
                pass

        def on_end(self, ev: Any) -> None:
            pass

    event.register("numba:compile", _Listener())


def silence_announcement() -> None:
    """No :data:`COMPILING_LINE` in this process (``optiond warmup`` reports for itself)."""
    _announce["said"] = True
