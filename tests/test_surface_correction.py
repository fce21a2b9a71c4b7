"""The arbitrage-free correction of the surface towards the quotes (optiond.surface.correction):
synthetic SVI and SSVI recovery inside every spread, the convex curve's invariants, a bundled
chain's surface free of static arbitrage on a dense grid read back from its JSON (written out
here, not through the fit's own checks), the sparse expiry of the AAPL chain, the schema round
trip, the density and the extrapolation flags."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.special import ndtr

from optiond.surface import SVI, Surface, check_surface, fit_surface, load
from optiond.surface.correction import Curve

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "data"


def black_call(x, s):
    """Undiscounted call over the forward, written out (Black 1976)."""
    d1 = -np.log(x) / s + 0.5 * s
    return ndtr(d1) - x * ndtr(d1 - s)


def svi_w(p, k):
    return p.a + p.b * (p.rho * (k - p.m) + np.sqrt((k - p.m) ** 2 + p.sigma ** 2))


def ssvi_w(theta, k, rho=-0.5, eta=1.0):
    """SSVI (Gatheral & Jacquier 2014, eq. 4.1) with phi(theta) = eta / sqrt(theta): free of
    butterfly (theta phi^2 (1 + |rho|) = 1.5 <= 4) and calendar arbitrage."""
    phi = eta / np.sqrt(theta)
    return 0.5 * theta * (1 + rho * phi * k + np.sqrt((phi * k + rho) ** 2 + 1 - rho ** 2))


def chain(expiries, F=100.0, n=41, k_lim=0.45, seed=0):
    """A priced chain's rows: at each strike the out-of-the-money quote, a band of 0.4 to 1.2
    vol points around the truth and a mid drawn inside the band."""
    rng = np.random.default_rng(seed)
    rows = []
    k = np.linspace(-k_lim, k_lim, n)
    for expiry, T, wfun in expiries:
        iv = np.sqrt(wfun(k) / T)
        half = rng.uniform(0.002, 0.006, n)
        lo, hi = iv - half * rng.uniform(0.2, 1.0, n), iv + half * rng.uniform(0.2, 1.0, n)
        mid = lo + (hi - lo) * rng.uniform(0.1, 0.9, n)
        for kk, b, m, a in zip(k, lo, mid, hi):
            K = F * math.exp(kk)
            rows.append(dict(expiry=expiry, type="call" if K >= F else "put", strike=K, expiry_years=T, forward=F,
                             rate=0.0, iv=m, iv_bid=b, iv_ask=a, status="ok"))
    return pd.DataFrame(rows)


def inside_all(df, surface):
    got = np.concatenate([surface.vol(g["strike"].to_numpy(), float(t)) for t, g in df.groupby("expiry_years")])
    ref = pd.concat([g for _, g in df.groupby("expiry_years")])
    return (got >= ref["iv_bid"].to_numpy() - 1e-12) & (got <= ref["iv_ask"].to_numpy() + 1e-12)


SVI_TRUTH = [("e1", 0.1, lambda k: svi_w(SVI(0.004, 0.04, -0.6, 0.02, 0.08), k)),
             ("e2", 0.5, lambda k: svi_w(SVI(0.02, 0.1, -0.5, 0.03, 0.15), k)),
             ("e3", 1.0, lambda k: svi_w(SVI(0.04, 0.13, -0.4, 0.05, 0.2), k))]
SSVI_TRUTH = [(f"s{i}", T, (lambda th: (lambda k: ssvi_w(th, k)))(0.04 * T)) for i, T in enumerate((0.08, 0.3, 1.2))]


@pytest.mark.parametrize("truth", [SVI_TRUTH, SSVI_TRUTH], ids=["svi", "ssvi"])
def test_synthetic_recovery_lies_inside_every_spread(truth, tmp_path):
    df = chain(truth)
    for i in range(len(truth) - 1):  # the truth is free of calendar arbitrage: the bands admit a surface
        k = np.linspace(-1, 1, 201)
        assert np.all(truth[i + 1][2](k) >= truth[i][2](k))
    s = fit_surface(df)
    path = tmp_path / "s.json"
    s.to_json(str(path))
    back = load(str(path))
    assert inside_all(df, back).all()
    assert back.stats["inside_share_near"] == 1.0 and all(x.stats["inside_share"] == 1.0 for x in back.slices)
    assert check_surface(back)["ok"]


def test_curve_is_a_c1_convex_interpolant_of_its_nodes():
    prior = SVI(0.02, 0.1, -0.5, 0.03, 0.15)
    x = np.array([0.7, 0.8, 0.85, 0.9, 0.97, 1.0, 1.1, 1.3])
    s = np.sqrt(svi_w(prior, np.log(x)))
    c = black_call(x, s) + np.array([0, 2e-4, -1e-4, 3e-4, 0, -2e-4, 1e-4, 0])  # convex still, not the prior
    assert np.all(np.diff(np.diff(c) / np.diff(x)) > 0)
    cv = Curve(x, c, prior)
    np.testing.assert_allclose(cv.own_calls(x), c, rtol=0, atol=1e-15)  # through the nodes
    xs = np.linspace(0.71, 1.29, 5801)
    f = cv.own_calls(xs)
    h = xs[1] - xs[0]
    assert np.all(np.diff(f, 2) >= -1e-14)  # convex between the nodes
    assert np.all(np.diff(f) <= 1e-15) and np.all(np.diff(f) / h >= -1.0)  # decreasing, slope >= -1
    for xn in x[1:-1]:  # C1: the slopes on either side of a node agree
        e = 1e-7
        left = (cv.own_calls(xn) - cv.own_calls(xn - e)) / e
        right = (cv.own_calls(xn + e) - cv.own_calls(xn)) / e
        assert left == pytest.approx(right, abs=1e-5)
    assert cv.min_density() >= 0.0


@pytest.fixture(scope="module")
def aapl():
    """The AAPL chain's first six expiries, priced in process; the fourth (2026-02-25) is quoted
    only near the money (9 quotes within |k| < 0.11)."""
    from optiond.chain import price_chain, read_chain

    df = read_chain(str(EXAMPLES / "aapl_chain_2026-02-13.csv"))
    keep = sorted(df["expiry"].unique())[:6]
    out = price_chain(df[df["expiry"].isin(keep)], quote_time="10:50")[0]
    return out, fit_surface(out)


def test_bundled_chain_surface_is_free_of_static_arbitrage_on_a_dense_grid(aapl, tmp_path):
    _, fitted = aapl
    path = tmp_path / "aapl.json"
    fitted.to_json(str(path))
    s = Surface.from_json(str(path))
    k = np.linspace(-1.5, 1.0, 2501)
    x = np.exp(k)
    prev = None
    Ts = sorted({t for sl in s.slices for t in (sl.T,)} | {0.5 * (a.T + b.T) for a, b in zip(s.slices, s.slices[1:])})
    for T in Ts:
        w = s.total_variance(k, T)
        assert np.all(np.isfinite(w)) and np.all(w > 0)
        c = black_call(x, np.sqrt(w))
        if any(abs(T - sl.T) < 1e-12 for sl in s.slices):  # butterfly at each slice: convex in K
            dd = np.diff(c) / np.diff(x)
            assert np.all(np.diff(dd) >= -1e-9), T
            assert np.all(dd <= 1e-9) and np.all(dd >= -1 - 1e-9)  # to the rounding of c near intrinsic
        if prev is not None:  # calendar: w non-decreasing in T at fixed k
            assert np.all(w >= prev - 1e-14), T
        prev = w
    assert check_surface(s)["ok"]


def test_a_sparse_expiry_does_not_push_its_neighbours_wings_out_of_their_spreads(aapl):
    out, s = aapl
    sparse = next(x for x in s.slices if x.expiry == "2026-02-25")
    assert sparse.stats["fit_k_range"][0] > -0.05  # its puts are not quoted beyond 5 % out of the money
    assert any("2026-02-25" in w and "put wing is extrapolated" in w for w in s.stats["warnings"])
    for e in ("2026-02-27", "2026-03-06"):
        sl = next(x for x in s.slices if x.expiry == e)
        rows = out[(out["expiry"] == e) & (out["status"] == "ok") & (out["type"] == "put")]
        rows = rows[(rows["strike"] < 0.9 * sl.forward) & rows["iv_bid"].notna() & rows["iv_ask"].notna()]
        assert len(rows) >= 5
        fit = s.vol(rows["strike"].to_numpy(), sl.T)
        assert np.all((fit >= rows["iv_bid"].to_numpy() - 1e-9) & (fit <= rows["iv_ask"].to_numpy() + 1e-9)), e


def test_schema_round_trip_to_the_bit_and_a_1_1_document_still_reads():
    df = chain(SVI_TRUTH)
    s = fit_surface(df)
    doc = json.loads(s.to_json())
    assert doc["version"] == "2.0" and all(x["curve"] is not None for x in doc["slices"])
    assert [x["curve"]["floor"] for x in doc["slices"]] == [False, True, True]
    back = Surface.from_json(s.to_json())
    assert back.slices[2].curve.floor is back.slices[1].curve
    K = np.linspace(60.0, 160.0, 41)
    for T in (0.1, 0.3, 0.5, 0.77, 1.0):
        np.testing.assert_array_equal(back.vol(K, T), s.vol(K, T))
        np.testing.assert_array_equal(back.density(K, T), s.density(K, T))
        np.testing.assert_array_equal(back.extrapolated(K, T), s.extrapolated(K, T))
    old = dict(doc, version="1.1", slices=[{k: v for k, v in x.items() if k != "curve"} for x in doc["slices"]])
    prior = Surface.from_dict(old)  # a 1.x document: its SVI slices
    assert prior.slices[0].curve is None
    np.testing.assert_allclose(prior.total_variance(np.array([0.0]), 0.5), svi_w(s.slices[1].svi, 0.0), rtol=1e-15)


def test_density_integrates_to_one_and_prices_the_puts():
    s = fit_surface(chain(SVI_TRUTH))
    T, F = 0.5, s.forward(0.5)
    K = np.arange(5.0, 400.0, 0.0025)  # finer than the density's own step (the curve's c'' is piecewise constant)
    p = s.density(K, T)
    # non-negative to the central difference's rounding (the price through Black's inverse is
    # good to about 1e-13 F; over (1e-4 K)^2 that is 1e-6 deep in the wings, the peak is 2e-2)
    assert np.all(p[K > 20.0] >= -1e-6) and p.max() > 1e-2
    dK = K[1] - K[0]
    assert np.sum(p) * dK == pytest.approx(1.0, abs=1e-3)
    # the undiscounted put at K0 is the integral of (K0 - K)+ against the density (Breeden &
    # Litzenberger 1978; a bounded integral, unlike the call's)
    K0 = 100.0
    w0 = s.total_variance(np.array([math.log(K0 / F)]), T)[0]
    put = F * black_call(K0 / F, math.sqrt(w0)) - (F - K0)
    assert np.sum(np.maximum(K0 - K, 0.0) * p) * dK == pytest.approx(put, rel=1e-3)


def test_rows_beyond_the_quotes_fitted_are_flagged_extrapolated():
    s = fit_surface(chain(SVI_TRUTH, k_lim=0.3))
    F = 100.0
    K = F * np.exp(np.array([-0.5, -0.29, 0.0, 0.29, 0.5]))
    for T in (0.1, 0.3, 1.0):
        assert s.extrapolated(K, T).tolist() == [True, False, False, False, True]


def test_bad_curve_in_a_document_is_refused():
    doc = json.loads(fit_surface(chain(SVI_TRUTH)).to_json())
    doc["slices"][0]["curve"]["x"] = doc["slices"][0]["curve"]["x"][::-1]
    with pytest.raises(ValueError, match="increasing"):
        Surface.from_dict(doc)


def test_yardstick_and_warnings_per_expiry():
    from optiond.surface.report import confidence, warning_lines, yardstick

    df = chain(SVI_TRUTH)
    s = fit_surface(df)
    yardstick(s, df)
    # the truth lies inside every band: every near-the-money quote is achievable, and the fit is there
    assert all(x.stats["achievable_near"] == 1.0 and x.stats["achievable_near_optimal"] for x in s.slices)
    assert s.stats["achievable_near"] == 1.0 and s.stats["warnings"] == []
    s.slices[1].stats["inside_share_near"] = 0.9  # 10 points below: a warning for that expiry alone
    assert warning_lines(s) == ["e2: inside 90% of the quotes near the money, 10 points below the achievable 100%"]
    # the confidence is not the inside share: a wider market or fewer quotes lower it, all inside
    k = np.linspace(-0.3, 0.3, 31)
    iv = np.full(31, 0.2)
    c1, _ = confidence(0.5, 0.2, k, iv - 0.002, iv + 0.002, iv)
    c2, _ = confidence(0.5, 0.2, k, iv - 0.02, iv + 0.02, iv)
    c3, _ = confidence(0.5, 0.2, k[10:20], iv[10:20] - 0.002, iv[10:20] + 0.002, iv[10:20])
    assert 1.0 > c1 > c2 > 0 and c1 > c3 > 0


def test_the_programme_without_highs_own_interface_gives_the_same_surface(monkeypatch):
    """The correction's LP through ``scipy.optimize.milp`` (where HiGHS's own interface is not
    importable) and through the kept HiGHS model with hot starts: the same curves."""
    from optiond.surface import correction

    df = chain(SVI_TRUTH)
    kept = fit_surface(df)
    monkeypatch.setattr(correction, "_Highs", None)
    plain = fit_surface(df)
    assert inside_all(df, plain).all() and inside_all(df, kept).all()
    for a, b in zip(kept.slices, plain.slices):
        x = np.exp(np.linspace(-0.6, 0.6, 241))
        assert np.max(np.abs(a.curve.calls(x) - b.curve.calls(x))) < 1e-7
