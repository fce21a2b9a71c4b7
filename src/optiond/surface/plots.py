"""Pictures of a fitted surface against the chain it was fitted on (matplotlib, PNG; SVG on request).

Three figures, each written as ``<underlying>_<name>.png`` (and ``.svg``):

* ``smiles``: small multiples, one smile per expiry in log-moneyness ``k = ln(K / F_T)``: the
  bid/ask implied-vol bar (``iv_bid`` .. ``iv_ask``) of every out-of-the-money contract (puts
  below the forward, calls at or above it), the mid's implied vol (``iv``) as a dot, the fitted
  smile ``sqrt(w(k) / T)`` as a line, dashed and on a shaded ground beyond the quotes it was
  fitted on (extrapolated), the forward (``k = 0``) as a vertical line, the y-range the 2nd to
  98th percentile of the quotes' bands (an outlier does not squash the smile);
* ``term_structure``: the ATM volatility ``sqrt(w(0) / T)`` and the ATM skew
  ``d sigma / dk`` at ``k = 0``, ``w'(0) / (2 sqrt(w(0) T))``, per slice against the days to
  expiry on a log axis;
* ``heatmap``: the surface's implied volatility over ``(k, T)`` (:func:`surface_grid`; between
  slices the surface's own interpolation in total variance).

The figures are drawn on matplotlib's ``Figure`` with the Agg canvas, never through pyplot, so
writing them touches no global backend (the panel's Qt one included).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, MaxNLocator, NullLocator, StrMethodFormatter
from matplotlib.transforms import ScaledTranslation

from ..files import write_with
from .fit import otm_mask
from .model import Surface

#: the file formats a figure can be written in, and the default (SVG on request: a smile SVG of
#: a large chain is megabytes and takes most of the command's time)
FORMATS = ("png", "svg")
DEFAULT_FORMATS = ("png",)
#: the figures' names (file ``<underlying>_<name>.<format>``)
FIGURES = ("smiles", "term_structure", "heatmap")
#: default half-width of the log-moneyness range where the chain gives none
DEFAULT_K_HALF_WIDTH = 0.3


def otm_quotes(out: pd.DataFrame, forward: float, expiry: str) -> pd.DataFrame:
    """The out-of-the-money rows of one expiry of the chain job's output with ``k`` added:
    puts with ``K < F``, calls with ``K >= F``; columns ``k, iv_bid, iv, iv_ask``, sorted by
    ``k``. Empty when ``out`` has no row of that expiry."""
    rows = out[out["expiry"].astype(str) == str(expiry)]
    otm = rows[otm_mask(rows, forward)]
    k = np.log(pd.to_numeric(otm["strike"], errors="coerce").to_numpy(dtype=np.float64) / forward)
    res = pd.DataFrame({"k": k, **{c: pd.to_numeric(otm[c], errors="coerce").to_numpy(dtype=np.float64)
                                   for c in ("iv_bid", "iv", "iv_ask")}})
    return res.sort_values("k", kind="stable").reset_index(drop=True)


def _slice_quotes(out: pd.DataFrame | None, surface: Surface) -> list[pd.DataFrame | None]:
    """:func:`otm_quotes` of every slice (None without ``out``), the chain split by expiry once."""
    if out is None or not len(out):
        return [None] * len(surface.slices)
    groups = dict(tuple(out.groupby(out["expiry"].astype(str), sort=False)))
    empty = out.iloc[:0]
    return [otm_quotes(groups.get(str(s.expiry), empty), s.forward, s.expiry) for s in surface.slices]


def k_range(out: pd.DataFrame | None, surface: Surface, quotes: list | None = None) -> tuple[float, float]:
    """The log-moneyness range of the pictures: the 1st to 99th percentile of the quoted
    out-of-the-money ``k`` with a mid IV over all slices, else ``+-`` :data:`DEFAULT_K_HALF_WIDTH`.
    ``quotes``: the slices' :func:`otm_quotes` when the caller has them already."""
    ks: list[np.ndarray] = []
    for q in (quotes if quotes is not None else _slice_quotes(out, surface)):
        if q is not None:
            ks.append(q["k"].to_numpy()[np.isfinite(q["iv"].to_numpy())])
    k = np.concatenate(ks) if ks else np.empty(0)
    k = k[np.isfinite(k)]
    if k.size < 2:
        return -DEFAULT_K_HALF_WIDTH, DEFAULT_K_HALF_WIDTH
    lo, hi = np.percentile(k, [1.0, 99.0])
    return (float(lo), float(hi)) if hi > lo else (-DEFAULT_K_HALF_WIDTH, DEFAULT_K_HALF_WIDTH)


def surface_grid(surface: Surface, k: np.ndarray | None = None, T: np.ndarray | None = None, *,
                 k_lim: tuple[float, float] = (-DEFAULT_K_HALF_WIDTH, DEFAULT_K_HALF_WIDTH), n_k: int = 121,
                 n_T: int = 80) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The heatmap's data: ``(k, T, vol)`` with ``vol[i, j] = sqrt(w(k[j], T[i]) / T[i])``,
    ``w`` = :meth:`Surface.total_variance` (NaN where ``w < 0``).

    Args:
        surface: the fitted surface (at least one slice).
        k: log-moneyness points, shape ``(n_k,)``; default ``n_k`` points evenly over ``k_lim``.
        T: times to expiry in years, > 0, shape ``(n_T,)``; default ``n_T`` points evenly in
            ``log T`` from the first slice's ``T`` to the last's (the slices' own times when the
            surface has one slice).

    Returns:
        ``k`` shape ``(n_k,)``, ``T`` shape ``(n_T,)``, ``vol`` shape ``(n_T, n_k)``
        (annualised decimals).

    Raises:
        ValueError: a surface without slices, or a ``T`` that is not > 0.
    """
    if not surface.slices:
        raise ValueError("the surface has no slices")
    k = np.linspace(k_lim[0], k_lim[1], n_k) if k is None else np.asarray(k, dtype=np.float64)
    if T is None:
        t0, t1 = surface.slices[0].T, surface.slices[-1].T
        T = np.array([t0]) if t1 <= t0 else np.exp(np.linspace(math.log(t0), math.log(t1), n_T))
    T = np.asarray(T, dtype=np.float64)
    if not np.all(T > 0):
        raise ValueError("the grid's times to expiry must be > 0")
    w = np.stack([surface.total_variance(k, float(t)) for t in T])
    with np.errstate(invalid="ignore"):
        vol = np.sqrt(np.where(w >= 0, w, np.nan) / T[:, None])
    return k, T, vol


def atm_term_structure(surface: Surface) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per slice ``(T, atm_vol, atm_skew)``: ``sqrt(w(0) / T)`` and ``d sigma / dk`` at
    ``k = 0``, ``w'(0) / (2 sqrt(w(0) T))`` with ``w'(0)`` the central difference over
    ``k = +-1e-5`` of the slice's total variance (NaN where ``w(0) <= 0``); shapes ``(n_slices,)``."""
    T = np.array([s.T for s in surface.slices])
    w, w1 = np.empty_like(T), np.empty_like(T)
    for i, s in enumerate(surface.slices):
        lo, mid, hi = np.asarray(s.total_variance(np.array([-1e-5, 0.0, 1e-5])), dtype=np.float64)
        w[i], w1[i] = mid, (hi - lo) / 2e-5
    with np.errstate(invalid="ignore", divide="ignore"):
        pos = np.where(w > 0, w, np.nan)
        return T, np.sqrt(pos / T), w1 / (2.0 * np.sqrt(pos * T))


def small_multiples(n: int) -> tuple[Figure, np.ndarray]:
    """A figure of about square small multiples for ``n`` smiles: ``(fig, axes (rows, cols))``
    on the Agg canvas, an object array whose slots after the ``n``-th are None (no panel)."""
    n = max(n, 1)
    ncols = max(1, math.ceil(math.sqrt(n)))
    nrows = max(1, math.ceil(n / ncols))
    W, H = 2.6 * ncols + 0.6, 2.1 * nrows + 1.0
    fig = Figure(figsize=(W, H))
    FigureCanvasAgg(fig)
    # a fixed layout in inches (a solver's layout of many panels costs more than drawing them):
    # the y labels on the left, the x labels below, the title and the legend on top
    grid = fig.add_gridspec(nrows, ncols, left=0.55 / W, right=1.0 - 0.12 / W, bottom=0.5 / H, top=1.0 - 0.95 / H,
                            wspace=0.28, hspace=0.42)
    axes = np.full((nrows, ncols), None, dtype=object)
    for i in range(n):
        ax = axes[divmod(i, ncols)] = fig.add_subplot(grid[divmod(i, ncols)])
        ax.xaxis.set_major_locator(MaxNLocator(4))
        ax.yaxis.set_major_locator(MaxNLocator(4))
    return fig, axes


def fixed_ticks(ax, nbins: int = 3) -> None:
    """Fix both axes' ticks at the view's current limits: at most ``nbins + 1`` round values,
    only those inside the view (a tick made and not drawn costs as much as one drawn)."""
    for axis, (lo, hi) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        locs = MaxNLocator(nbins).tick_values(lo, hi)
        eps = 1e-9 * (hi - lo)
        axis.set_major_locator(FixedLocator(locs[(locs >= lo - eps) & (locs <= hi + eps)]))


def log_ticks(axis) -> None:
    """Fix a log axis's ticks at the 1-2-5 values inside its view (1-2-3-5-7 on a short range),
    written plainly (``0.05``, ``30``), no minor ticks; left as they are where fewer than two
    such values fall inside (the locator's powers of ten written in mathtext, slower to set)."""
    lo, hi = sorted(axis.get_view_interval())
    if not lo > 0:
        return
    decades = 10.0 ** np.arange(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    for mantissas in ((1, 2, 5), (1, 2, 3, 5, 7)):
        locs = np.outer(decades, mantissas).ravel()
        locs = locs[(locs >= lo) & (locs <= hi)]
        if locs.size >= 2:
            axis.set_major_locator(FixedLocator(locs))
            axis.set_major_formatter(StrMethodFormatter("{x:g}"))
            axis.set_minor_locator(NullLocator())
            return


def finish_smiles(fig: Figure, axes: np.ndarray, n: int, legend_cols: int) -> None:
    """Label the panels of :func:`small_multiples` in log-moneyness (the lowest of each column)
    and implied volatility (%), and put the first panel's legend above them."""
    for col in axes.T:
        used = [ax for ax in col if ax is not None]
        if used:
            used[-1].set_xlabel("k = ln(K / F)", fontsize=7)
    for ax in axes[:, 0]:
        if ax is not None:
            ax.set_ylabel("IV (%)", fontsize=7)
    # the axis labels at a fixed distance in inches from their panels (not placed clear of the
    # measured tick labels of every panel, which costs a text layout of each)
    for ax in axes.flat:
        if ax is not None:
            ax.xaxis.set_label_coords(0.5, 0.0, ax.transAxes + ScaledTranslation(0.0, -0.3, fig.dpi_scale_trans))
            ax.yaxis.set_label_coords(0.0, 0.5, ax.transAxes + ScaledTranslation(-0.38, 0.0, fig.dpi_scale_trans))
    handles, lbls = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, lbls, loc="upper right", bbox_to_anchor=(1.0, 1.0 - 0.4 / fig.get_figheight()),
               ncols=legend_cols, fontsize=8, frameon=False)


def smiles_figure(out: pd.DataFrame, surface: Surface, k_lim: tuple[float, float] | None = None,
                  quotes: list | None = None) -> Figure:
    """Small multiples, one smile per slice (see the module docstring); x: log-moneyness, each
    panel over its own quoted range within ``k_lim`` (default :func:`k_range`). ``quotes``: the
    slices' :func:`otm_quotes` when the caller has them already."""
    n = len(surface.slices)
    fig, axes = small_multiples(n)
    quotes = quotes if quotes is not None else _slice_quotes(out, surface)
    lo, hi = k_lim or k_range(out, surface, quotes)
    for ax, s, q in zip(axes.flat, surface.slices, quotes):
        q = q[(q["k"] >= lo) & (q["k"] <= hi)]
        quoted = q["k"][np.isfinite(q["iv"]) | np.isfinite(q["iv_ask"])]
        a, b = (quoted.min(), quoted.max()) if len(quoted) > 1 else (lo, hi)
        pad = 0.05 * (b - a)
        bars = q[np.isfinite(q["iv_bid"]) & np.isfinite(q["iv_ask"])]
        # the bars as one line broken by NaNs (one artist, not a collection of one segment each)
        xs = np.repeat(bars["k"].to_numpy(), 3)
        xs[2::3] = np.nan
        ys = np.stack([bars["iv_bid"].to_numpy(), bars["iv_ask"].to_numpy(), np.full(len(bars), np.nan)], axis=1)
        ax.plot(xs, 100 * ys.ravel(), color="0.45", linewidth=1.2, solid_capstyle="butt", label="bid/ask IV")
        ax.plot(q["k"].to_numpy(), 100 * q["iv"].to_numpy(), ".", color="C0", markersize=2, label="mid IV")
        kk = np.linspace(a - pad, b + pad, 200)
        with np.errstate(invalid="ignore"):
            fit = 100 * np.sqrt(np.maximum(s.total_variance(kk), 0.0) / s.T)
        fr = s.fitted_range() or (float(kk[0]), float(kk[-1]))
        inside = (kk >= fr[0]) & (kk <= fr[1])
        ax.plot(np.where(inside, kk, np.nan), fit, color="C3", linewidth=1.2, label="fit")
        ax.plot(np.where(inside, np.nan, kk), fit, color="C3", linewidth=1.0, linestyle="--", label="extrapolated")
        for x0, x1 in ((kk[0], fr[0]), (fr[1], kk[-1])):
            if x1 > x0:
                ax.axvspan(x0, x1, color="0.9", zorder=0)
        ax.axvline(0.0, color="k", linestyle=":", linewidth=0.8, label="forward")
        ys = np.r_[bars["iv_bid"].to_numpy(), bars["iv_ask"].to_numpy()] * 100
        ys = ys[np.isfinite(ys)]
        if ys.size >= 4:  # outliers clipped from the y-range
            y0, y1 = np.percentile(ys, [2.0, 98.0])
            m = 0.15 * max(y1 - y0, 1.0)
            ax.set_ylim(y0 - m, y1 + m)
        ax.set_xlim(kk[0], kk[-1])
        ax.set_title(f"{s.expiry}  T={s.T:.3f}", fontsize=8, y=1.0)  # y given: no search for the ticks above
        ax.tick_params(labelsize=7)
        fixed_ticks(ax)
    finish_smiles(fig, axes, n, 5)
    fig.suptitle(f"{surface.underlying} {surface.quote_time}: smiles, out-of-the-money quotes (shaded: beyond the "
                 f"quotes fitted)", fontsize=10, x=0.01, y=1.0 - 0.08 / fig.get_figheight(), ha="left", va="top")
    return fig


def term_structure_figure(surface: Surface) -> Figure:
    """The ATM volatility and ATM skew against ``T`` (:func:`atm_term_structure`)."""
    T, vol, skew = atm_term_structure(surface)
    fig = Figure(figsize=(9, 3.6))
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.14, top=0.8, wspace=0.28)  # fixed: no layout solve
    a1, a2 = fig.subplots(1, 2)
    days = 365.0 * T
    a1.plot(days, 100 * vol, "o-", markersize=3)
    a1.set(xlabel="days to expiry", ylabel="ATM IV (%)")
    a1.set_title("ATM volatility sqrt(w(0)/T)", y=1.0)  # y given: no search for the ticks above
    a2.plot(days, skew, "o-", markersize=3, color="C2")
    a2.axhline(0.0, color="k", linewidth=0.6)
    a2.set(xlabel="days to expiry", ylabel="d sigma / dk")
    a2.set_title("ATM skew at k = 0", y=1.0)
    if len(T) > 1 and T.min() > 0:
        for ax in (a1, a2):
            ax.set_xscale("log")
            log_ticks(ax.xaxis)
    fig.suptitle(f"{surface.underlying} {surface.quote_time}: term structure", fontsize=10)
    return fig


def heatmap_figure(surface: Surface, k_lim: tuple[float, float] = (-DEFAULT_K_HALF_WIDTH, DEFAULT_K_HALF_WIDTH)
                   ) -> Figure:
    """The implied volatility over ``(k, T)`` of :func:`surface_grid` as a colour map (``T`` on
    a log axis)."""
    k, T, vol = surface_grid(surface, k_lim=k_lim)
    fig = Figure(figsize=(8, 5))
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.11, top=0.92)  # fixed: no layout solve
    ax = fig.subplots()
    mesh = ax.pcolormesh(k, T, 100 * vol, shading="nearest", cmap="viridis")
    if len(T) > 1:
        ax.set_yscale("log")
        log_ticks(ax.yaxis)
    ax.set(xlabel="k = ln(K / F_T)", ylabel="T (years)")
    ax.set_title(f"{surface.underlying} {surface.quote_time}: implied volatility (%)", y=1.0)
    fig.colorbar(mesh, ax=ax, label="IV (%)")
    return fig


def plot_surface(out: pd.DataFrame, surface: Surface, directory: str | Path,
                 formats: tuple[str, ...] = DEFAULT_FORMATS) -> list[Path]:
    """Write :data:`FIGURES` in ``formats`` (of :data:`FORMATS`; default PNG) into ``directory``
    (created with its parents).

    Args:
        out: the chain job's output the surface was fitted on (columns ``expiry, type, strike,
            iv_bid, iv, iv_ask``).
        surface: the fitted surface (at least one slice).
        directory: where the files go.

    Returns:
        the paths written, ``<underlying>_<figure>.<format>`` (underlying lower-cased); each
        file is written whole or not at all (:func:`optiond.files.write_with`).

    Raises:
        OSError: ``directory`` cannot be created or written (a file of that name, no permission,
            a full disk: :class:`optiond.files.WriteError`).
        ValueError: a surface without slices.
        KeyError: ``out`` lacks a column above.
    """
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise ValueError(f"picture formats must be among {FORMATS}, got {list(formats)}")
    if not surface.slices:
        raise ValueError("the surface has no slices")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    quotes = _slice_quotes(out, surface)
    lim = k_range(out, surface, quotes)
    figs = {"smiles": smiles_figure(out, surface, lim, quotes), "term_structure": term_structure_figure(surface),
            "heatmap": heatmap_figure(surface, lim)}
    stem = "".join(c if c.isalnum() else "_" for c in (surface.underlying or "surface").lower())
    paths = []
    for name in FIGURES:
        for fmt in formats:
            p = d / f"{stem}_{name}.{fmt}"
            write_with(p, lambda f, fig=figs[name], fmt=fmt: fig.savefig(
                f, format=fmt, dpi=110, metadata={"Date": None} if fmt == "svg" else None,
                # zlib's fastest level: a few per cent larger files, a fraction of the encoding time
                **({"pil_kwargs": {"compress_level": 1}} if fmt == "png" else {})), binary=True)
            paths.append(p)
    return paths


__all__ = ["FIGURES", "FORMATS", "atm_term_structure", "heatmap_figure", "k_range", "otm_quotes", "plot_surface",
           "smiles_figure", "surface_grid", "term_structure_figure"]
