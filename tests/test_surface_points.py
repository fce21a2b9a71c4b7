"""Volatilities and prices at points (K, T) of a surface (optiond.surface.points), the
surface's rate and spot in T, its schema (spots since 1.1) and the check of a surface document.

References are written out here, independent of the package: raw SVI (Gatheral 2004) with
the total variance linear in T between slices at fixed log-moneyness, the forward and the
discount factor log-linear in T, Black-76 (Black 1976) for European prices and a plain NumPy
CRR tree (Cox, Ross & Rubinstein 1979) for American ones.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from optiond.surface import SVI, Slice, Surface
from optiond.surface import points

T1, T2 = 0.25, 1.0
F1, F2 = 100.5, 101.6
R1, R2 = 0.03, 0.045
S0 = 100.0
P1 = SVI(0.01, 0.05, -0.4, 0.0, 0.2)
P2 = SVI(0.03, 0.10, -0.5, 0.05, 0.3)


def surface(spot: float | None = S0) -> Surface:
    return Surface("TEST", "2026-01-02T10:00", [Slice("2026-04-03", T1, F1, R1, P1, {}, spot),
                                                 Slice("2027-01-02", T2, F2, R2, P2, {}, spot)])


def w_svi(p: SVI, k: float) -> float:
    return p.a + p.b * (p.rho * (k - p.m) + math.sqrt((k - p.m) ** 2 + p.sigma ** 2))


def ref_market(T: float) -> tuple[float, float]:
    """(F_T, r_T): ln F and r T linear in T between the two slices."""
    t = (T - T1) / (T2 - T1)
    lnF = (1 - t) * math.log(F1) + t * math.log(F2)
    rT = (1 - t) * R1 * T1 + t * R2 * T2
    return math.exp(lnF), rT / T


def ref_vol(K: float, T: float) -> float:
    F, _ = ref_market(T)
    k = math.log(K / F)
    t = (T - T1) / (T2 - T1)
    return math.sqrt(((1 - t) * w_svi(P1, k) + t * w_svi(P2, k)) / T)


def black76(kind: str, F: float, K: float, T: float, r: float, vol: float) -> float:
    sq = vol * math.sqrt(T)
    d1 = (math.log(F / K) + 0.5 * sq * sq) / sq
    d2 = d1 - sq
    D = math.exp(-r * T)
    if kind == "call":
        return D * (F * norm.cdf(d1) - K * norm.cdf(d2))
    return D * (K * norm.cdf(-d2) - F * norm.cdf(-d1))


def crr_american_put(S: float, K: float, T: float, r: float, q: float, vol: float, N: int) -> float:
    dt = T / N
    u = math.exp(vol * math.sqrt(dt))
    d = 1.0 / u
    p = (math.exp((r - q) * dt) - d) / (u - d)
    disc = math.exp(-r * dt)
    V = np.maximum(K - S * u ** (2.0 * np.arange(N + 1) - N), 0.0)
    for t in range(N - 1, -1, -1):
        V = np.maximum(disc * (p * V[1:] + (1 - p) * V[:-1]), K - S * u ** (2.0 * np.arange(t + 1) - t))
    return float(V[0])


POINTS = [(90.0, T1), (100.0, 0.4), (115.0, 0.7), (80.0, T2), (101.0, 0.55)]


def test_forward_rate_and_spot_in_t():
    s = surface()
    for T in (T1, 0.4, 0.7, T2):
        F, r = ref_market(T)
        assert s.forward(T) == pytest.approx(F, rel=1e-14)
        assert s.rate(T) == pytest.approx(r, rel=1e-13)
    assert s.rate(T1) == pytest.approx(R1, rel=1e-15) and s.rate(T2) == pytest.approx(R2, rel=1e-15)
    assert s.spot(0.5) == S0
    two = Surface("X", "t", [Slice("a", T1, F1, R1, P1, {}, 100.0), Slice("b", T2, F2, R2, P2, {}, 102.0)])
    assert two.spot(0.625) == pytest.approx(101.0, rel=1e-15)  # linear in T between slices
    assert surface(spot=None).spot(0.5) is None


def test_schema_keeps_the_spot_and_a_1_0_document_reads_without_one():
    s = surface()
    doc = json.loads(s.to_json())
    assert doc["version"] == "2.0" and [x["spot"] for x in doc["slices"]] == [S0, S0]
    assert Surface.from_json(s.to_json()).slices[0].spot == S0
    old = dict(doc, version="1.0", slices=[{k: v for k, v in x.items() if k != "spot"} for x in doc["slices"]])
    back = Surface.from_dict(old)
    assert all(x.spot is None for x in back.slices) and back.forward(0.5) == s.forward(0.5)


def test_vols_are_the_written_out_surface_and_bad_rows_say_why():
    K = [k for k, _ in POINTS] + [-5.0, float("nan"), 100.0, 100.0, 100.0]
    T = [t for _, t in POINTS] + [0.5, 0.5, 0.1, 1.5, 0.0]
    iv = points.vols(surface(), K, T)
    for i, (k, t) in enumerate(POINTS):
        assert iv.status[i] == "ok" and iv.vol[i] == pytest.approx(ref_vol(k, t), rel=1e-12)
    bad = iv.error[len(POINTS):].tolist()
    assert (iv.status[len(POINTS):] == "invalid").all() and np.isnan(iv.vol[len(POINTS):]).all()
    assert bad[0] == "strike=-5.0: must be > 0" and bad[1] == "strike=nan: not a finite number"
    assert bad[2].startswith("expiry=0.1: must lie within the surface's expiries, 0.25 to 1 years")
    assert bad[3].startswith("expiry=1.5: must lie within") and bad[4] == "expiry=0.0: must be > 0"


def test_european_prices_are_black76_on_the_forward_and_rate_at_t():
    K, T = [k for k, _ in POINTS], [t for _, t in POINTS]
    for kind in ("call", "put"):
        for spot in (S0, None):  # the spot does not matter to a European price
            res = points.prices(surface(spot), K, T, kind, "european")
            assert (res.status == "ok").all(), res.error
            for i, (k, t) in enumerate(POINTS):
                F, r = ref_market(t)
                assert res.price[i] == pytest.approx(black76(kind, F, k, t, r, ref_vol(k, t)), rel=1e-10, abs=1e-12)


def test_american_prices_are_a_tree_on_the_spot_and_carry_and_need_a_spot():
    K, T = [k for k, _ in POINTS], [t for _, t in POINTS]
    am = points.prices(surface(), K, T, "put", "american", steps=200)
    eu = points.prices(surface(), K, T, "put", "european")
    assert (am.status == "ok").all() and (am.price >= eu.price - 1e-12).all() and (am.price > eu.price).any()
    for i, (k, t) in enumerate(POINTS):
        F, r = ref_market(t)
        q = r - math.log(F / S0) / t  # S exp((r - q) T) = F_T
        assert am.price[i] == pytest.approx(crr_american_put(S0, k, t, r, q, ref_vol(k, t), 200), rel=1e-10)
    none = points.prices(surface(spot=None), K, T, "put", ["american", "european", "american", "european", "e"])
    assert none.status.tolist() == ["error", "ok", "error", "ok", "ok"]
    assert "has no spot" in none.error[0] and np.isnan(none.price[0])


def test_price_rows_with_a_bad_kind_style_or_point_are_marked_alone():
    res = points.prices(surface(), [100.0, 100.0, -1.0, 100.0], [0.5, 0.5, 0.5, 3.0], ["call", "swap", "put", "put"],
                        ["american", "american", "european", "bermudan"])
    assert res.status.tolist() == ["ok", "error", "error", "error"]
    assert res.error[1].startswith("kind='swap': unknown kind") and res.error[2] == "strike=-1.0: must be > 0"
    assert res.error[3].startswith("expiry=3.0: must lie within")  # the first problem of the row
    assert np.isfinite(res.price[0]) and np.isfinite(res.delta[0]) and np.isnan(res.price[1:]).all()


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: "{not json", "not JSON"),
    (lambda d: dict(d, schema="other"), "not an optiond.surface"),
    (lambda d: dict(d, version="3.0"), "not an optiond.surface"),
    (lambda d: {k: v for k, v in d.items() if k != "slices"}, "missing field 'slices'"),
    (lambda d: dict(d, slices=[]), "no slice"),
    (lambda d: dict(d, slices=[dict(d["slices"][0], T=-0.5)]), "T must be a finite number > 0"),
    (lambda d: dict(d, slices=[dict(d["slices"][0], forward=None)]), "wrong type"),
    (lambda d: dict(d, slices=[dict(d["slices"][0], svi=dict(d["slices"][0]["svi"], rho=1.0))]), "|rho| < 1"),
    (lambda d: dict(d, slices=[dict(d["slices"][0], spot=-1.0)]), "spot must be"),
    (lambda d: [1, 2], "JSON object"),
])
def test_a_malformed_surface_document_is_refused_with_the_reason(mutate, needle):
    doc = json.loads(surface().to_json())
    with pytest.raises(ValueError) as e:
        points.checked_surface(mutate(doc))
    assert needle in str(e.value)
    assert points.checked_surface(surface().to_json()).to_json() == surface().to_json()


def test_fit_chain_keeps_each_expiry_spot():
    k = np.linspace(-0.3, 0.3, 25)
    rows = []
    for expiry, T, p, F, S in (("2026-04-03", T1, P1, F1, 100.0), ("2027-01-02", T2, P2, F2, 100.4)):
        for kk in k:
            K = F * math.exp(kk)
            iv = math.sqrt(w_svi(p, kk) / T)
            rows.append(dict(expiry=expiry, type="call" if K >= F else "put", strike=K, expiry_years=T, forward=F,
                             rate=0.03, iv=iv, iv_bid=iv - 0.002, iv_ask=iv + 0.002, status="ok", spot=S))
    chain_out = pd.DataFrame(rows)
    fitted = points.fit_chain(chain_out)
    assert [s.spot for s in fitted.slices] == [100.0, 100.4]
    assert all(s.spot is None for s in points.fit_chain(chain_out.drop(columns=["spot"])).slices)


def _many_slices(m: int = 7) -> Surface:
    Ts = np.linspace(0.05, 2.0, m)
    return Surface("TEST", "2026-01-02T10:00",
                   [Slice(f"e{i}", float(T), 100.0 * math.exp(0.02 * T), 0.03,
                          SVI(0.02 * T, 0.1 * math.sqrt(T), -0.5 + 0.05 * i, 0.01 * i, 0.2), {}, S0)
                    for i, T in enumerate(Ts)])


def test_vols_at_many_expiries_equal_each_point_alone_with_one_evaluation_per_slice(monkeypatch):
    """Issue 32, item 12: the volatilities of 3,000 points with 3,000 distinct T (and points on
    the slices, before the first and after the last) equal each point evaluated alone
    (Surface.vol at its own T), and every slice's smile is evaluated once for all of them
    (the old code evaluated two slices per distinct T, and scanned every point per T)."""
    s = _many_slices()
    rng = np.random.default_rng(7)
    T = np.concatenate([rng.uniform(0.01, 2.5, 3000), [x.T for x in s.slices]])
    K = rng.uniform(60.0, 150.0, T.size)
    want = np.array([float(s.vol(k, t)) for k, t in zip(K, T)])
    calls = []
    evaluate = Slice.total_variance
    monkeypatch.setattr(Slice, "total_variance", lambda self, k: calls.append(np.size(k)) or evaluate(self, k))
    got = s.vols(K, T)
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=0.0)
    assert len(calls) == len(s.slices) and sum(calls) <= 2 * T.size, calls
    calls.clear()
    inside = (T >= s.slices[0].T) & (T <= s.slices[-1].T)
    iv = points.vols(s, K[inside], T[inside])
    assert (iv.status == "ok").all() and len(calls) == len(s.slices)
    np.testing.assert_allclose(iv.vol, want[inside], rtol=1e-14, atol=0.0)


def test_vols_stop_at_their_deadline():
    import time

    s = _many_slices()
    with pytest.raises(TimeoutError, match="deadline"):
        points.vols(s, [90.0, 100.0], [0.3, 1.2], deadline=time.monotonic() - 1.0)
    assert points.vols(s, [100.0], [0.3], deadline=time.monotonic() + 60.0).status.tolist() == ["ok"]
