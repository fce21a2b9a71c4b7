"""The surface's static-arbitrage checks, its interpolation in T and its JSON form.

References: Gatheral & Jacquier (2014), "Arbitrage-free SVI volatility surfaces", §3 (Axel
Vogt's slice, butterfly arbitrage with g < 0 for k roughly between 0.6 and 1.1, their Figure 2);
closed forms of raw SVI for the calendar case.
"""

from __future__ import annotations

import numpy as np
import pytest

from optiond.surface import SVI, Slice, Surface
from optiond.surface.arbitrage import butterfly, calendar, check_slice, check_surface
from optiond.surface.svi import density_g

VOGT = SVI(-0.0410, 0.1331, 0.3060, 0.3586, 0.4153)


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
