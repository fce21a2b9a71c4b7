"""HESTON_FIT: the European Heston calibration of a pasted chain, kept as a ``heston`` object
whose handle HESTON_CALL/PUT take as v0, in the daemon (the ``heston_fit`` request) and, without
one, in the add-in's own store (``@local``).

Reference: a synthetic European chain made by the semi-analytic engine
(:func:`optiond.kernels.heston.cpu.heston_batch`) from known parameters on a known spot, rate and
yield, each contract's T the chain job's own (:func:`optiond.market.clock.expiry_years`), the
quotes one cent either side of the model price: the chain job recovers the forwards and discount
factors from parity, and the fit the parameters (as ``tests/test_heston_fit.py`` does on quotes
built directly); invariants (the same quotes keep the version, the daemon's and the local fit
agree).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

from optiond.addin import functions as F
from optiond.addin import cells, objects, pricing, table
from optiond.daemon import heston_op, object_kinds
from optiond.daemon.objects import ObjectStore
from optiond.kernels.heston import cpu
from optiond.market import clock
from optiond.models import InvalidInputError

from addin_support import _fresh_cache, as_range, is_error, no_daemon, with_daemon  # noqa: F401

TRUE = {"v0": 0.035, "kappa": 2.5, "theta": 0.05, "xi": 0.7, "rho": -0.65}
S0, R, Q = 100.0, 0.03, 0.01
QUOTE_DATE = "2025-10-01"
EXPIRIES = ("2025-11-21", "2026-01-16", "2026-04-17", "2026-10-16", "2027-10-15")
HALF_SPREAD = 0.01


def years(expiries) -> np.ndarray:
    """T of each expiry as the chain job counts it (quote date's 16:00 close to the expiry's)."""
    T, _, errors = clock.expiry_years(pd.Series([QUOTE_DATE] * len(expiries)), pd.Series(list(expiries)))
    assert not any(errors)
    return T


def engine_price(kind: int, K, T, params=TRUE) -> np.ndarray:
    K = np.atleast_1d(np.asarray(K, dtype=np.float64))
    return cpu.heston_batch(np.full(K.size, kind, np.int8), S0, K, T, R, Q,
                            *(params[p] for p in object_kinds.HESTON_PARAMETERS), greeks=False)[0]


def synthetic_chain(style: str = "european", expiries=EXPIRIES) -> pd.DataFrame:
    """Calls and puts at 14 strikes per expiry (1.6 ATM standard deviations below the forward to
    1.0 above), quoted one cent either side of the engine's price at :data:`TRUE`."""
    rows = []
    for e, t in zip(expiries, years(expiries)):
        fwd = S0 * math.exp((R - Q) * t)
        K = np.round(fwd * np.exp(np.linspace(-1.6, 1.0, 14) * 0.19 * math.sqrt(t)), 2)
        for kind, name in ((1, "call"), (0, "put")):
            for k, p in zip(K, engine_price(kind, K, t)):
                rows.append({"underlying": "SYN", "quote_date": QUOTE_DATE, "expiry": e, "type": name, "strike": k,
                             "bid": p - HALF_SPREAD, "ask": p + HALF_SPREAD, "last": None, "implied_vol": None,
                             "underlying_price": S0, "style": style})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def chain_range():
    return as_range(synthetic_chain())


def as_range_frame(rng) -> pd.DataFrame:
    """The pasted range back as the chain table the add-in sends."""
    return cells._chain_fit(table.BY_NAME["HESTON_FIT"], ("X", rng, None, None, None))[1]


def assert_recovers(params: dict) -> None:
    for p, v in TRUE.items():
        assert params[p] == pytest.approx(v, rel=1e-3), p


def assert_prices_at_the_known_set(handle: str) -> None:
    """HESTON_PUT/CALL (European) on the handle: the engine's prices at the known parameters."""
    K = [80.0, 100.0, 115.0]
    for T in (0.25, 1.0):
        got = F.HESTON_PUT(S0, [[k] for k in K], T, R, Q, handle, None, None, None, None, False)
        assert [g for (g,) in got] == pytest.approx(engine_price(0, K, T).tolist(), abs=1e-6)
        call = F.HESTON_CALL(S0, 100.0, T, R, Q, handle, None, None, None, None, False)
        assert call == pytest.approx(float(engine_price(1, 100.0, T)[0]), abs=1e-6)


# ---- with the daemon -------------------------------------------------------------------------

def test_a_fit_in_the_daemon_recovers_the_parameters_and_prices_on_its_handle(with_daemon, chain_range):
    h = F.HESTON_FIT("XL-HFIT", chain_range)
    assert re.fullmatch(r"XL-HFIT#\d{4}", h), h
    c = with_daemon.client()
    try:
        got = c.get_object(h)
    finally:
        c.close()
    assert got["kind"] == "heston"
    assert_recovers(got["document"])
    fit = got["document"]["fit"]
    assert fit["quotes"] == 5 * 14 and fit["expiries"] == 5  # every out-of-the-money quote of each expiry
    assert 0.0 <= fit["rms_vol_pts"] < 1e-4 and fit["sse"] == pytest.approx(fit["quotes"] * fit["rms_vol_pts"] ** 2)
    assert_prices_at_the_known_set(h)
    rows = {r[0]: r for r in F.OPTIOND_OBJECTS()[1:]}
    assert rows[h][1] == "heston" and re.search(r"; fit RMS \S+ vol pts, SSE \S+ over 70 quotes, 5 expiries$",
                                                rows[h][2])


def test_the_same_quotes_keep_the_version_and_other_quotes_bump_it(with_daemon, chain_range):
    first = F.HESTON_FIT("XL-HREFIT", chain_range)
    assert F.HESTON_FIT("XL-HREFIT", chain_range) == first  # the same document: the same handle
    fewer = as_range(synthetic_chain(expiries=EXPIRIES[1:]))
    second = F.HESTON_FIT("XL-HREFIT", fewer)
    name, version = first.split("#")
    assert second == f"{name}#{int(version) + 1:04d}"
    stale = F.HESTON_PUT(S0, 100.0, 1.0, R, Q, first, None, None, None, None, False)
    assert is_error(stale) and f"stale handle {first}" in stale and second in stale
    assert_prices_at_the_known_set(second)


def test_the_daemon_refuses_an_american_chain_and_a_bad_request_and_carries_on(with_daemon):
    c = with_daemon.client()
    try:
        with pytest.raises(InvalidInputError) as e:
            c.fit_heston("XL-HAM", synthetic_chain("american").head(40))
        assert e.value.field == "chain" and "optiond heston-fit --american" in e.value.reason
        with pytest.raises(InvalidInputError) as e:
            c._request("heston_fit", {"name": "XL-HAM", "feller": "yes", "chain": {}}, retries=0)
        assert e.value.field == "feller"
        with pytest.raises(InvalidInputError) as e:  # one expiry under a week: nothing the fit can use
            c.fit_heston("XL-HSHORT", synthetic_chain(expiries=("2025-10-06",)))
        assert e.value.field == "chain" and "usable quotes" in e.value.reason
        assert c.ping()["pid"] == with_daemon.daemon_pid
        assert "XL-HAM" not in [o["name"] for o in c.objects()]
    finally:
        c.close()


# ---- without a daemon: the add-in's own store ---------------------------------------------------

def test_without_a_daemon_the_fit_is_kept_here(no_daemon, monkeypatch, chain_range):
    h = F.HESTON_FIT("XL-HLOCAL", chain_range)
    assert re.fullmatch(r"XL-HLOCAL#0001@local", h), h
    entry = objects.local_store().get("XL-HLOCAL")
    assert entry.kind == "heston" and entry.payload.fit.quotes == 70
    assert_recovers(object_kinds.document("heston", entry.payload))
    assert_prices_at_the_known_set(h)
    listed = [r for r in F.OPTIOND_OBJECTS() if r[0] == h]
    assert listed and "fit RMS" in listed[0][2]
    assert F.HESTON_FIT("XL-HLOCAL", chain_range) == h  # the same quotes: the same handle
    monkeypatch.setenv("OPTIOND_FALLBACK", "0")
    assert F.HESTON_FIT("XL-HLOCAL", chain_range) == \
        "#optiond: no optiond daemon is running; start one with: optiond serve"


def test_the_daemon_and_the_add_in_fit_the_same_parameters(daemon, chain_range):
    """One request, two places: the daemon's reply and the add-in's own run of the same request."""
    c = daemon.client()
    try:
        there = c.fit_heston("XL-HSAME", as_range_frame(chain_range))["document"]
    finally:
        c.close()
    here = heston_op.fit_here(ObjectStore(), "XL-HSAME", as_range_frame(chain_range), {})["document"]
    for p in object_kinds.HESTON_PARAMETERS:
        assert here[p] == pytest.approx(there[p], rel=1e-9), p


# ---- cells that cannot be fitted --------------------------------------------------------------

class NoCall:
    def __getattr__(self, name):
        raise AssertionError(f"the daemon was asked ({name}) for a fit that cannot be sent")


def test_an_american_chain_says_the_excel_fit_is_european(monkeypatch):
    monkeypatch.setattr(pricing, "_client", lambda: NoCall())
    got = F.HESTON_FIT("XL-HAM", as_range(synthetic_chain("american").head(10)))
    assert got == ("#optiond: chain_range holds 10 American contracts: this Heston fit is European (the American fit "
                   "prices every quote by ADI and takes minutes: optiond heston-fit --american)")
    assert is_error(got)


@pytest.mark.parametrize("args,text", [
    (("XL-H", [["strike", "bid"], [100.0, 1.0]]), "chain_range lacks the columns underlying, quote_date"),
    (("XL-H", "HEADER_ONLY"), "chain_range has a header and no contract"),
    (("XL-H", [["strike"]]), "chain_range must be a range: a header row"),
    (("bad name", "CHAIN"), "name must be 1 to 64 of the characters"),
    (("", "CHAIN"), "name is required (empty cell)"),
    (("XL-H", "CHAIN", None, None, None, "maybe"), 'feller must be TRUE or FALSE, got "maybe"'),
])
def test_a_bad_cell_gives_a_short_reason_and_sends_nothing(monkeypatch, args, text):
    monkeypatch.setattr(pricing, "_client", lambda: NoCall())
    rng = as_range(synthetic_chain().head(4))
    header_only = rng[:1] + [[None] * len(rng[0])]
    args = tuple(rng if a == "CHAIN" else header_only if a == "HEADER_ONLY" else a for a in args)
    got = F.HESTON_FIT(*args)
    assert is_error(got) and got.startswith("#optiond: " + text), got


def test_a_chain_with_nothing_to_fit_says_why(no_daemon):
    got = F.HESTON_FIT("XL-HSHORT", as_range(synthetic_chain(expiries=("2025-10-06",))))
    assert is_error(got) and got.startswith("#optiond: chain_range has 0 usable quotes"), got


def test_the_cell_is_never_answered_from_the_cache(monkeypatch, chain_range):
    calls = []

    class Counting:
        def fit_heston(self, name, df, **kw):
            calls.append(len(df))
            return {"handle": f"{name}#0001", "name": name, "version": 1, "created_s": 0.0, "kind": "heston",
                    "document": dict(TRUE)}

    monkeypatch.setattr(pricing, "_client", lambda: Counting())
    assert F.HESTON_FIT("XL-H", chain_range) == F.HESTON_FIT("XL-H", chain_range) == "XL-H#0001"
    assert calls == [140, 140]


# ---- the heston kind with a fit's quality -----------------------------------------------------

def test_a_given_set_keeps_its_document_and_a_fitted_one_carries_its_quality():
    plain = object_kinds.build("heston", dict(TRUE))
    assert object_kinds.document("heston", plain) == TRUE  # as before: the same digests, the same versions
    assert "fit" not in object_kinds.summary("heston", plain)["text"]
    fitted = dict(TRUE, fit={"rms_vol_pts": 0.25, "sse": 4.375, "quotes": 70, "expiries": 5})
    obj = object_kinds.build("heston", fitted)
    assert object_kinds.document("heston", obj) == fitted and obj.values() == plain.values()
    s = object_kinds.summary("heston", obj)
    assert (s["rms_vol_pts"], s["sse"], s["quotes"]) == (0.25, 4.375, 70)
    assert s["text"].endswith("; fit RMS 0.25 vol pts, SSE 4.38 over 70 quotes, 5 expiries")


@pytest.mark.parametrize("fit,field", [
    ("good", "fit"),
    ({"rms_vol_pts": -1.0, "sse": 1.0, "quotes": 7, "expiries": 1}, "fit.rms_vol_pts"),
    ({"rms_vol_pts": 0.1, "sse": float("nan"), "quotes": 7, "expiries": 1}, "fit.sse"),
    ({"rms_vol_pts": 0.1, "sse": 1.0, "quotes": 7.5, "expiries": 1}, "fit.quotes"),
    ({"rms_vol_pts": 0.1, "sse": 1.0, "quotes": 7}, "fit.expiries"),
])
def test_a_bad_fit_quality_is_refused_naming_the_field(fit, field):
    with pytest.raises(InvalidInputError) as e:
        object_kinds.build("heston", dict(TRUE, fit=fit))
    assert e.value.field == field
