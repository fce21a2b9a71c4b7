"""SURFACE_FIT, SURFACE_VOL and SURFACE_PRICE called as plain Python (as they run off Windows),
against the real daemon of the test session: a chain pasted as a range is fitted and kept
in the daemon by name, and the cells read it by handle or name.

References: the same chain job and fit in this process (:func:`optiond.chain.price_chain`,
:func:`optiond.surface.points.fit_chain`) on the same inputs, and Black-76 written out here.
"""

from __future__ import annotations

import datetime as dt
import math
import re

import numpy as np
import pytest
from scipy.stats import norm

from optiond import chain
from optiond.addin import cells
from optiond.addin import functions as F
from optiond.addin import pricing, table
from optiond.surface.points import fit_chain

from addin_support import _fresh_cache, as_range, col, is_error  # noqa: F401
from conftest import SPY_EXPIRIES



@pytest.fixture(scope="module")
def local(spy3):
    """The reference: the chain job (its default steps, as SURFACE_FIT's) and the fit here."""
    out, _ = chain.price_chain(spy3, quote_time="10:50")
    return fit_chain(out)


@pytest.fixture(scope="module")
def handle(daemon, spy3):
    return F.SURFACE_FIT("XL-SPY", as_range(spy3), "10:50")


def points(surface):
    Ts = [s.T for s in surface.slices]
    return np.array([600.0, 660.0, 680.0, 700.0, 760.0]), [Ts[0], 0.5 * (Ts[0] + Ts[1]), Ts[2]]


def test_a_fit_cell_shows_the_handle_and_vol_cells_equal_the_fit_here(handle, local):
    assert re.fullmatch(r"XL-SPY#\d{4}", handle), handle
    K, Ts = points(local)
    got = F.SURFACE_VOL(handle, col(K), [Ts])  # a column of strikes against a row of times: a grid
    assert np.shape(got) == (len(K), len(Ts))
    for i, k in enumerate(K):
        for j, t in enumerate(Ts):
            assert got[i][j] == pytest.approx(float(local.vol(k, t)), rel=1e-12)
    assert F.SURFACE_VOL("XL-SPY", 680.0, Ts[1]) == got[2][1]  # the bare name: the live version


def test_price_cells_are_black76_when_european_and_worth_more_when_american(handle, local):
    K, Ts = points(local)
    t = Ts[1]
    F_t, r, = local.forward(t), local.rate(t)
    for kind, z in (("call", 1.0), ("put", -1.0)):
        got = F.SURFACE_PRICE(handle, col(K), t, kind, False)
        for (p,), k in zip(got, K):
            sq = float(local.vol(k, t)) * math.sqrt(t)
            d1 = (math.log(F_t / k) + 0.5 * sq * sq) / sq
            assert p == pytest.approx(math.exp(-r * t) * z * (F_t * norm.cdf(z * d1) - k * norm.cdf(z * (d1 - sq))),
                                      rel=1e-9)
    eu = [p for (p,) in F.SURFACE_PRICE(handle, col(K), t, "put", False)]
    am = [p for (p,) in F.SURFACE_PRICE(handle, col(K), t, "put")]  # american defaults TRUE
    assert all(a >= e for a, e in zip(am, eu)) and am[-1] - eu[-1] > 1.0


def test_a_bad_cell_marks_only_its_cell(handle, local):
    _, Ts = points(local)
    got = F.SURFACE_VOL(handle, col([680.0, -5.0, "abc", 680.0]), col([Ts[1], Ts[1], Ts[1], 9.0]))
    assert got[0][0] == pytest.approx(float(local.vol(680.0, Ts[1])), rel=1e-12)
    assert got[1][0] == "#optiond: K must be > 0, got -5"
    assert got[2][0] == '#optiond: K must be a number, got "abc"'
    assert got[3][0].startswith("#optiond: T must lie within the surface's expiries") and got[3][0].endswith("got 9")
    got = F.SURFACE_PRICE(handle, 680.0, Ts[1], col(["put", "strangle"]))
    assert isinstance(got[0][0], float) and got[1][0] == '#optiond: kind must be "put" or "call", got "strangle"'


def test_a_refit_changes_the_handle_and_the_old_one_says_it_is_stale(daemon, spy3, local):
    first = F.SURFACE_FIT("XL-refit", as_range(spy3), "10:50")
    second = F.SURFACE_FIT("XL-refit", as_range(spy3[spy3.expiry.isin(SPY_EXPIRIES[:2])]), "10:50")
    assert (first, second) == ("XL-refit#0001", "XL-refit#0002")
    stale = F.SURFACE_VOL(first, 680.0, 0.3)
    assert is_error(stale) and "stale handle XL-refit#0001" in stale and "XL-refit#0002" in stale
    late = local.slices[2].T  # only the refit's two expiries answer now, by name too: no cached answer
    assert F.SURFACE_VOL("XL-refit", 680.0, late).startswith("#optiond: T must lie within")
    assert isinstance(F.SURFACE_VOL(second, 680.0, 0.3), float)


def test_an_unknown_name_says_so(daemon):
    got = F.SURFACE_VOL("XL-NOPE", col([680.0, 690.0]), 0.3)
    assert [c for (c,) in got] == [got[0][0]] * 2 and is_error(got[0][0]) and "no surface named XL-NOPE" in got[0][0]
    assert F.SURFACE_PRICE("bad name", 680.0, 0.3, "put").startswith("#optiond: name must be 1 to 64")
    upstream = "#optiond: surfaces live in the optiond daemon and none is running; start it with: optiond serve"
    assert F.SURFACE_VOL(upstream, 680.0, 0.3) == "#optiond: name is an error: " + upstream[len("#optiond: "):]


def test_without_a_daemon_the_cells_say_surfaces_live_there(monkeypatch, tmp_path, spy3):
    monkeypatch.setenv("OPTIOND_CONNECTION_FILE", str(tmp_path / "no-daemon.json"))
    for got in (F.SURFACE_VOL("SPY", 680.0, 0.3), F.SURFACE_PRICE("SPY", col([680.0, 690.0]), 0.3, "put")[1][0],
                F.SURFACE_FIT("SPY", as_range(spy3.head(3)))):
        assert is_error(got) and "surfaces live in the optiond daemon" in got and "optiond serve" in got


class NoCall:
    def __getattr__(self, name):
        raise AssertionError(f"the daemon was asked ({name}) for a call that cannot be sent")


@pytest.mark.parametrize("args,text", [
    (("", "CHAIN"), "name is required (empty cell)"),
    (("SPY", [["strike", "bid"], [600.0, 1.0]]), "chain_range lacks the columns underlying, quote_date"),
    (("SPY", [["strike"]]), "chain_range must be a range: a header row"),
    (("SPY", "HEADER_ONLY"), "chain_range has a header and no contract"),
    (("SPY", "CHAIN", "soon"), 'quote_time must be "HH:MM" or an ISO 8601 timestamp, got "soon"'),
    (("SPY", "CHAIN", None, "x"), 'rate must be a number, got "x"'),
    (("SPY", "CHAIN", None, None, "noon"), 'settlement must be "am" or "pm", got "noon"'),
    ((col(["A", "B"]), "CHAIN"), "name must be a single cell"),
])
def test_a_fit_that_cannot_be_sent_says_why(monkeypatch, spy3, args, text):
    monkeypatch.setattr(pricing, "_client", lambda: NoCall())
    rng = as_range(spy3.head(4))
    header_only = rng[:1] + [[None] * len(rng[0])]  # a header and an empty row
    args = tuple(rng if a == "CHAIN" else header_only if a == "HEADER_ONLY" else a for a in args)
    got = F.SURFACE_FIT(*args)
    assert is_error(got) and got.startswith("#optiond: " + text), got


def test_pasted_cells_read_as_the_chain_job_reads_a_file(monkeypatch, spy3):
    sent = {}

    class Spy:
        def fit_surface(self, name, df, **market):
            sent.update(name=name, df=df, market=market)
            return {"handle": f"{name}#0001"}

    monkeypatch.setattr(pricing, "_client", lambda: Spy())
    rng = as_range(spy3.head(3))
    serial = (dt.date(2026, 3, 27) - dt.date(1899, 12, 30)).days  # Excel's day count
    rng[1][rng[0].index("expiry")] = float(serial)  # a date cell that came over as its serial number
    rng = [r + [None, "note"] for r in rng] + [[None] * (len(rng[0]) + 2)]  # an unknown column, an empty row
    rng[0][-2:] = [None, "comment"]
    assert F.SURFACE_FIT(" SPY ", rng, 0.4513888888888889, 0.05, "AM") == "SPY#0001"
    df = sent["df"]
    assert sent["name"] == "SPY" and list(df.columns) == list(spy3.columns) and len(df) == 3
    assert df["expiry"].tolist() == spy3["expiry"].head(3).tolist() and df["quote_date"].iat[0] == "2026-02-13"
    assert df["strike"].tolist() == spy3["strike"].head(3).tolist()
    assert sent["market"] == {"quote_time": "10:50:00", "rate": 0.05, "settlement": "am"}
    assert cells._time(dt.time(10, 50), "t") == "10:50:00" and cells._time("2026-02-13T10:50-05:00", "t") == \
        "2026-02-13T10:50-05:00"


def test_the_surface_functions_are_in_the_table_and_the_reference():
    for name in ("SURFACE_FIT", "SURFACE_VOL", "SURFACE_PRICE"):
        spec = table.BY_NAME[name]
        assert spec.method == "surface" and F.WORKSHEET_FUNCTIONS[name].__doc__ == spec.description
    assert table.BY_NAME["SURFACE_PRICE"].signature() == "SURFACE_PRICE(name, K, T, kind, [american], [valuation])"
    assert table.BY_NAME["SURFACE_FIT"].signature() == \
        "SURFACE_FIT(name, chain_range, [quote_time], [rate], [settlement])"
    assert "recalculate" in table.BY_NAME["SURFACE_FIT"].description
    assert table.SURFACE_PRICE_STEPS == chain.DEFAULT_STEPS
