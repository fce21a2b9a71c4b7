"""What a fitted surface says about itself per expiry: a confidence, how far its wings are
extrapolated, the best inside share any arbitrage-free smile could reach there (the
yardstick, :mod:`optiond.surface.achievable`) and the warnings a desk should read.

* **Confidence** (:func:`confidence`, in [0, 1]) is the product of three parts, none of them
  the inside share: *coverage* ``min(1, n / COVER_QUOTES) x min(1, span / COVER_SD)``
  (two-sided quotes fitted, and the quoted span of ``k`` in ATM standard deviations
  ``sigma_atm sqrt(T)``), *precision* ``1 / (1 + h / SPREAD_VOL)`` (``h`` the median half-spread
  in vol points: a wide market says little) and *agreement* ``1 / (1 + r)`` (``r`` the RMS
  distance of the fit outside the quotes' bands, in half-spreads).
* **Wing cover** (:func:`wing_cover`): the quoted range's ends in ATM standard deviations; a
  side with less than :data:`EXTRAPOLATED_SD` is extrapolated far beyond the quotes.
* **Warnings** (:func:`warning_lines`): an expiry whose inside share near the money is more
  than :data:`GAP_POINTS` points below its achievable share, or whose wings are extrapolated
  far beyond the quotes.
"""

from __future__ import annotations

import math
import numpy as np
import pandas as pd

#: quotes and quoted span (ATM standard deviations) of full coverage
COVER_QUOTES = 20
COVER_SD = 4.0
#: the half-spread (vol points) at which precision is 1/2
SPREAD_VOL = 1.0
#: a wing quoted less than this many ATM standard deviations from the money is extrapolated far
EXTRAPOLATED_SD = 1.0
#: the gap (points of inside share) to the achievable share that warns
GAP_POINTS = 5.0
#: near the money (log-moneyness), as the fit's statistics
NEAR_K = 0.1


def confidence(T: float, atm: float, k: np.ndarray, bid: np.ndarray, ask: np.ndarray, fit: np.ndarray
               ) -> tuple[float, dict[str, float]]:
    """One expiry's confidence and its parts (module docstring).

    Args:
        T: time to expiry, years; atm: the fit's ATM implied volatility (decimal).
        k: log-moneyness of the fitted quotes, shape (n,); bid, ask: their IV band (NaN: open);
            fit: the surface's IV at them (decimals).

    Returns:
        ``(confidence, {"coverage", "precision", "agreement"})``, each in [0, 1] (0 without a
        two-sided quote).
    """
    two = np.isfinite(bid) & np.isfinite(ask) & np.isfinite(fit)
    if not two.any() or not (atm > 0) or not (T > 0):
        return 0.0, {"coverage": 0.0, "precision": 0.0, "agreement": 0.0}
    sd = atm * math.sqrt(T)
    span = (float(k[two].max()) - float(k[two].min())) / sd
    coverage = min(1.0, int(two.sum()) / COVER_QUOTES) * min(1.0, span / COVER_SD)
    half = 0.5 * (ask[two] - bid[two])
    precision = 1.0 / (1.0 + float(np.median(half)) * 100.0 / SPREAD_VOL)
    out = np.maximum(fit[two] - ask[two], 0.0) + np.maximum(bid[two] - fit[two], 0.0)
    r = float(np.sqrt(np.mean((out / np.maximum(half, 1e-6)) ** 2)))
    agreement = 1.0 / (1.0 + r)
    return coverage * precision * agreement, {"coverage": coverage, "precision": precision, "agreement": agreement}


def wing_cover(T: float, atm: float, k_min: float, k_max: float) -> list[float]:
    """``[-k_min, k_max]`` in ATM standard deviations ``atm sqrt(T)`` (NaN without a positive
    ATM volatility)."""
    sd = atm * math.sqrt(T) if atm > 0 and T > 0 else float("nan")
    return [-k_min / sd, k_max / sd]


def _otm_two_sided(chain_out: pd.DataFrame) -> pd.DataFrame:
    from ..chain import labels

    kind = labels(chain_out["type"])
    num = {c: pd.to_numeric(chain_out[c], errors="coerce").to_numpy(dtype=np.float64)
           for c in ("strike", "forward", "expiry_years", "iv", "iv_bid", "iv_ask")}
    K, F = num["strike"], num["forward"]
    otm = np.where(K >= F, kind == "call", kind == "put")
    ok = (otm & np.isfinite(num["iv_bid"]) & np.isfinite(num["iv_ask"]) & (num["iv_ask"] >= num["iv_bid"])
          & (chain_out["status"].to_numpy() == "ok") & np.isfinite(num["iv"]) & (K > 0) & (F > 0))
    return pd.DataFrame({"expiry": chain_out["expiry"].astype(str).to_numpy()[ok], "x": (K / F)[ok],
                         "bid": num["iv_bid"][ok], "ask": num["iv_ask"][ok], "T": num["expiry_years"][ok]})


def yardstick(surface, chain_out: pd.DataFrame, *, near_k: float = NEAR_K, time_limit: float | None = None) -> None:
    """Each slice's achievable share near the money (the most two-sided out-of-the-money quotes
    with ``|k| < near_k`` any arbitrage-free smile lies inside, :func:`optiond.surface.achievable.achievable`)
    into its ``stats`` (``achievable_near``, ``achievable_near_optimal``), and the surface's
    ``stats["achievable_near"]`` and ``stats["warnings"]`` (:func:`warning_lines`) updated.

    Args:
        surface: the fitted :class:`~optiond.surface.model.Surface` (changed in place).
        chain_out: the chain job's output the surface was fitted on.
        near_k: near the money (log-moneyness); time_limit: HiGHS's limit per expiry, seconds.
    """
    from .achievable import TIME_LIMIT, achievable

    q = _otm_two_sided(chain_out)
    q = q[np.abs(np.log(q["x"])) < near_k]
    groups = {e: g for e, g in q.groupby("expiry")}
    count = total = 0
    for s in surface.slices:
        g = groups.get(s.expiry)
        if g is None or len(g) == 0:
            continue
        g = g.drop_duplicates("x")
        r = achievable(g["x"].to_numpy(), g["bid"].to_numpy(), g["ask"].to_numpy(), s.T,
                       time_limit=TIME_LIMIT if time_limit is None else time_limit)
        s.stats["achievable_near"] = r.share
        s.stats["achievable_near_optimal"] = r.optimal
        count += r.count
        total += r.quotes
    surface.stats["achievable_near"] = count / total if total else float("nan")
    surface.stats["warnings"] = warning_lines(surface)


def warning_lines(surface) -> list[str]:
    """One line per expiry that a desk should not trust as it stands: its inside share near the
    money more than :data:`GAP_POINTS` points below its achievable share (where known), or a
    wing quoted less than :data:`EXTRAPOLATED_SD` ATM standard deviations from the money (the
    surface beyond is the prior's extrapolation)."""
    out = []
    for s in surface.slices:
        st = s.stats or {}
        inside, best = st.get("inside_share_near"), st.get("achievable_near")
        if isinstance(inside, float) and isinstance(best, float) and math.isfinite(inside) and math.isfinite(best):
            gap = 100.0 * (best - inside)
            if gap > GAP_POINTS:
                out.append(f"{s.expiry}: inside {100 * inside:.0f}% of the quotes near the money, "
                           f"{gap:.0f} points below the achievable {100 * best:.0f}%")
        cover = st.get("wing_sd")
        if cover and all(isinstance(c, (int, float)) for c in cover):
            thin = [side for side, c in zip(("put", "call"), cover) if math.isfinite(c) and c < EXTRAPOLATED_SD]
            if thin:
                rng = st.get("fit_k_range") or [float("nan"), float("nan")]
                out.append(f"{s.expiry}: quotes only over k in [{rng[0]:.3f}, {rng[1]:.3f}] "
                           f"({cover[0]:.1f} / {cover[1]:.1f} ATM standard deviations): the {' and '.join(thin)} "
                           f"wing{'s are' if len(thin) > 1 else ' is'} extrapolated")
    return out


__all__ = ["confidence", "warning_lines", "wing_cover", "yardstick"]
