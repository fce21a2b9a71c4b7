"""The surface's static-arbitrage checks, its interpolation in T and its JSON form.

References: Gatheral & Jacquier (2014), "Arbitrage-free SVI volatility surfaces", §3 (Axel
Vogt's slice, butterfly arbitrage with g < 0 for k roughly between 0.6 and 1.1, their Figure 2);
closed forms of raw SVI for the calendar case.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from optiond.surface import SVI, Slice, Surface, fit_surface
from optiond.surface.arbitrage import butterfly, calendar, check_slice, check_surface
from optiond.surface.fit import fit_slice, outliers
from optiond.surface.svi import density_g

VOGT = SVI(-0.0410, 0.1331, 0.3060, 0.3586, 0.4153)
VOGT_RMS_BOUND = 0.8  # measured 0.662 vol points (constrained fit, k in [-1, 1.5])


def test_vogt_slice_flagged_with_min_g_where_brute_force_puts_it():
    k = np.linspace(-1.5, 2.5, 400001)  # independent reference: a brute-force grid, step 1e-5
    g = density_g(VOGT, k)
    neg = k[g < 0]
    assert neg.min() < 0.7 and neg.max() > 1.1  # G&J Figure 2: g < 0 over about [0.6, 1.1]
    c = butterfly(VOGT)
    assert not c.ok
    assert c.value == pytest.approx(g.min(), abs=1e-9)
    assert c.where == pytest.approx(k[np.argmin(g)], abs=2e-5)
    assert c.value == pytest.approx(-0.0328636, abs=1e-6) and c.where == pytest.approx(0.87926, abs=1e-4)
    # Lee and minimum variance hold for this slice: b (1 + rho) = 0.1738, min w = a + b s sqrt(1 - rho^2)
    chk = check_slice(VOGT)
    assert chk["lee"].ok and chk["lee"].value == pytest.approx(0.1331 * 1.306, rel=1e-12)
    assert chk["min_variance"].value == pytest.approx(-0.0410 + 0.1331 * 0.4153 * np.sqrt(1 - 0.306**2), rel=1e-12)


P1, P2 = SVI(0.02, 0.1, -0.5, 0.0, 0.1), SVI(0.025, 0.05, -0.5, 0.0, 0.1)  # T = 0.5 and 1


def test_crossing_slices_flagged_at_the_closed_form_minimum():
    # w2 - w1 = 0.005 - 0.05 (-0.5 k + sqrt(k^2 + 0.01)): decreasing as k -> -inf, so the worst
    # point on the grid [-1.5, 1.5] is its left end
    c = calendar(P1, P2)
    ref = 0.005 - 0.05 * (0.75 + np.sqrt(2.25 + 0.01))
    assert not c.ok and c.value == pytest.approx(ref, abs=1e-14) and c.where == pytest.approx(-1.5)
    surf = Surface("X", "t", [Slice("a", 0.5, 100.0, 0.0, P1), Slice("b", 1.0, 100.0, 0.0, P2)])
    assert not check_surface(surf)["ok"]



def test_an_ordered_pair_passes_and_the_surface_between_them_is_free_of_calendar_arbitrage():
    lo, hi = SVI(0.02, 0.1, -0.5, 0.0, 0.1), SVI(0.045, 0.12, -0.5, 0.0, 0.12)  # w2 - w1 >= 0.025 - 0.02 k-free
    surf = Surface("X", "t", [Slice("a", 0.5, 100.0, 0.0, lo), Slice("b", 1.0, 101.0, 0.0, hi)])
    chk = check_surface(surf)
    assert chk["ok"] and chk["calendar"][0].ok
    k = np.linspace(-1.5, 1.5, 301)  # linear interpolation in T keeps w non-decreasing in T at every k
    ws = np.array([surf.total_variance(k, T) for T in np.linspace(0.5, 1.0, 11)])
    assert (np.diff(ws, axis=0) >= -1e-15).all()


def test_json_round_trip_to_the_last_bit():
    surf = Surface("X", "2026-01-02T10:50-05:00",
                   [Slice("e1", 0.5, 100.0, 0.03, SVI(0.02, 0.1, -0.5, 0.0, 0.1), {"rms_pts": np.float64(0.1)}),
                    Slice("e2", 1.0, 100.5, 0.03, SVI(0.045, 0.12, -0.5, 0.0, 0.12), {"rms_pts": float("nan")})])
    back = Surface.from_json(surf.to_json())
    assert back.to_json() == surf.to_json()
    for a, b in zip(surf.slices, back.slices):
        assert tuple(a.svi) == tuple(b.svi) and a.T == b.T and a.forward == b.forward
    assert back.slices[1].stats["rms_pts"] is None  # NaN is written as null
    with pytest.raises(ValueError, match="not an optiond.surface"):
        Surface.from_dict({"schema": "other", "version": "1.0", "slices": []})


# ---------------------------------------------------------------------------- the fit

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "data"
A, B = SVI(0.02, 0.1, -0.5, 0.0, 0.1), SVI(0.045, 0.12, -0.5, 0.0, 0.12)  # T = 0.5 and 1, ordered (above)


def svi_iv(p: SVI, k: np.ndarray, T: float) -> np.ndarray:
    """Raw SVI written out (Gatheral 2004), independent of optiond.surface.svi."""
    return np.sqrt((p.a + p.b * (p.rho * (k - p.m) + np.sqrt((k - p.m) ** 2 + p.sigma ** 2))) / T)


def chain_of(slices: list[tuple[str, float, SVI]], k: np.ndarray, F: float = 100.0) -> pd.DataFrame:
    """A priced chain's rows for the fit: the out-of-the-money contract of each strike, zero-width band."""
    rows = []
    for expiry, T, p in slices:
        iv = svi_iv(p, k, T)
        for kk, v in zip(k, iv):
            K = F * math.exp(kk)
            rows.append(dict(expiry=expiry, type="call" if K >= F else "put", strike=K, expiry_years=T,
                             forward=F, rate=0.0, iv=v, iv_bid=v, iv_ask=v, status="ok"))
    return pd.DataFrame(rows)


def test_synthetic_recovery_of_two_arbitrage_free_slices_to_1e_6():
    k = np.linspace(-0.4, 0.4, 41)
    for p, T in ((A, 0.5), (B, 1.0)):  # the slices are free of butterfly arbitrage with room to spare
        assert check_slice(p, -0.4, 0.4)["butterfly"].value > 0.1
    assert calendar(A, B, -0.4, 0.4).value > 0.02
    surf = fit_surface(chain_of([("e1", 0.5, A), ("e2", 1.0, B)], k))
    for s, ref in zip(surf.slices, (A, B)):
        np.testing.assert_allclose(np.array(s.svi), np.array(ref), rtol=0, atol=1e-6)
        assert s.stats["max_vol_pts"] < 1e-6
    assert check_surface(surf)["ok"] and surf.stats["arbitrage_free"]


def test_fit_to_vogts_slice_has_no_butterfly_arbitrage_and_stays_close():
    k = np.linspace(-1.0, 1.5, 51)  # covers Vogt's g < 0 on about [0.6, 1.1]
    iv = svi_iv(VOGT, k, 1.0)
    p, info = fit_slice(k, iv, T=1.0)
    chk = check_slice(p, -1.0, 1.5)
    assert all(c.ok for c in chk.values()) and info["ok"]
    assert butterfly(p, -1.0, 1.5).value >= 0.0
    rms = 100.0 * np.sqrt(np.mean((svi_iv(p, k, 1.0) - iv) ** 2))
    assert rms < VOGT_RMS_BOUND


def test_crossing_slices_give_a_fitted_surface_without_calendar_arbitrage():
    k = np.linspace(-0.5, 0.5, 41)
    assert not calendar(P1, P2, -0.5, 0.5).ok  # the quotes' own slices cross (left wing)
    surf = fit_surface(chain_of([("e1", 0.5, P1), ("e2", 1.0, P2)], k))
    chk = check_surface(surf)
    assert chk["ok"] and chk["calendar"][0].ok and chk["calendar"][0].value >= 0.0
    w = np.array([surf.total_variance(np.linspace(-2, 2, 401), T) for T in (0.5, 0.75, 1.0)])
    assert (np.diff(w, axis=0) >= 0).all()


def test_outliers_flag_the_one_quote_far_from_its_neighbours():
    k = np.linspace(-0.3, 0.3, 25)
    iv = svi_iv(A, k, 0.5)
    assert not outliers(k, iv).any()  # a smooth smile has none (neighbours within a few %)
    for j in (0, 11, 24):  # at either end and inside
        bad = iv.copy()
        bad[j] *= 1.5
        assert np.flatnonzero(outliers(k, bad, np.full(25, 0.002))).tolist() == [j]
    assert not outliers(k, np.where(np.arange(25) == 11, iv * 1.5, iv), np.full(25, 1.0)).any()  # within 3 spreads


def test_fit_rejects_bad_input():
    k = np.linspace(-0.1, 0.1, 4)
    with pytest.raises(ValueError, match="at least"):
        fit_slice(k, np.full(4, 0.2), T=0.5)
    with pytest.raises(ValueError, match="time to expiry"):
        fit_slice(np.linspace(-0.1, 0.1, 9), np.full(9, 0.2), T=0.0)
    with pytest.raises(ValueError, match="contain its mid"):
        fit_slice(np.linspace(-0.1, 0.1, 9), np.full(9, 0.2), np.full(9, 0.25), np.full(9, 0.3), T=0.5)
    with pytest.raises(ValueError, match="missing columns"):
        fit_surface(pd.DataFrame({"expiry": ["e"]}))


CHAINS = {"spy": ("spy_chain_2026-02-13.csv", "10:50"), "qqq": ("qqq_chain_2026-02-13.csv", "10:50"),
          "spx": ("spx_chain_2025-10-01.csv", None)}
#: near-the-money (|k| < 0.1) two-sided quotes inside the fitted spread: measured SPX 62.6 %,
#: QQQ 49.2 %, SPY 21.7 % (the bounds a few points under); the quotes of SPY and QQQ carry
#: butterfly arbitrage themselves (12.2 % and 5.0 % of consecutive-strike triplets at bid/ask),
#: so no arbitrage-free smile lies inside every spread
INSIDE_BOUND = {"spx": 0.58, "qqq": 0.45, "spy": 0.19}


@pytest.fixture(scope="module")
def priced():
    from optiond.chain import price_chain, read_chain
    return {name: price_chain(read_chain(str(EXAMPLES / f)), quote_time=qt)[0] for name, (f, qt) in CHAINS.items()}


@pytest.fixture(scope="module")
def fitted(priced):
    return {name: fit_surface(df) for name, df in priced.items()}


@pytest.mark.parametrize("name", ["spx", "qqq", "spy"])
def test_bundled_chain_surface_passes_every_check_and_fits_near_the_money(fitted, name):
    surf = fitted[name]
    chk = check_surface(surf, tol=0.0)
    bad = [(s.expiry, n) for s, d in zip(surf.slices, chk["slices"]) for n, c in d.items() if not c.ok]
    bad += [(surf.slices[i + 1].expiry, "calendar") for i, c in enumerate(chk["calendar"]) if not c.ok]
    assert chk["ok"] and not bad, bad
    assert all(s.stats["arbitrage_free"] for s in surf.slices)
    assert surf.stats["inside_share_near"] >= INSIDE_BOUND[name]
    assert len(surf.slices) >= 10 and not surf.stats["skipped"]


def test_bundled_fit_is_reproducible(priced, fitted):
    again = fit_surface(priced["spy"])
    assert again.to_json() == fitted["spy"].to_json()


def test_out_of_the_money_rows_read_the_labels_as_the_chain_job_does():
    from optiond.surface.fit import otm_mask

    rows = pd.DataFrame({"type": [" Put", "put", "CALL", "call", "put", "call", "straddle"],
                         "strike": [90.0, 100.0, 100.0, 110.0, 110.0, 90.0, 120.0]})
    # F = 100: puts below the forward, calls at or above it; a label that is neither is never out of the money
    assert otm_mask(rows, 100.0).tolist() == [True, False, True, True, False, False, False]


def test_in_the_money_error_reads_the_itm_contracts_own_ivs_over_the_fitted_range():
    k = np.linspace(-0.3, 0.3, 31)
    otm = chain_of([("e1", 0.5, A)], k)
    itm = otm.assign(type=np.where(otm["type"] == "call", "put", "call"))  # the other contract at each strike
    shift = 0.01  # ITM IVs one vol point above the OTM ones: what a put-call IV disagreement looks like
    itm[["iv", "iv_bid", "iv_ask"]] += shift
    s = fit_surface(pd.concat([otm, itm], ignore_index=True)).slices[0]
    assert s.stats["rms_vol_pts"] < 1e-6  # the OTM quotes are one SVI slice, recovered
    assert s.stats["itm_quotes"] == 31  # every strike's ITM contract lies in the fitted range
    assert s.stats["rms_vol_pts_itm"] == pytest.approx(100 * shift, abs=1e-6)
