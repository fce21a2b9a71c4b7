"""Market objects by handle: OPTIOND_CURVE, OPTIOND_DIVIDENDS, OPTIOND_HESTON, OPTIOND_OBJECTS and
the handles the pricing functions take in place of r, q, sigma and the Heston parameters; the
object store's persistence (versions continue after a restart, a corrupt file is skipped).

References: QuantLib 1.44 (a ``DiscountCurve``, log-linear in the discount factors, is the
"raw" interpolation of the zero curve: Hagan & West 2006; ``AnalyticEuropeanEngine``;
``AnalyticHestonEngine``), Black-Scholes-Merton and the raw SVI total variance (Gatheral 2004)
written out in ``tests/golden/build.py``, and invariants (a flat curve is its rate; a dividend handle
is the same schedule given as div_times/div_amounts).
"""

from __future__ import annotations

import json
import logging
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from optiond.addin import functions as F
from optiond.addin import objects
from optiond.daemon import object_kinds
from optiond.daemon.objects import ObjectStore, StaleHandle
from optiond.limits import Limits
from optiond.models import InvalidInputError

from addin_support import _fresh_cache, col, is_error, no_daemon, with_daemon  # noqa: F401

ql = pytest.importorskip("QuantLib")
sys.path.insert(0, str(Path(__file__).resolve().parent / "golden"))
import build  # noqa: E402  (the golden workbooks' references: QuantLib set-ups, the closed form, the SVI surface)

bs = build.bs


DAYS = [30.0, 91.0, 182.0, 365.0, 730.0]
RATES = [0.040, 0.042, 0.045, 0.043, 0.039]


def ql_put_on_curve(S, K, days, sigma) -> float:
    """European put on QuantLib's DiscountCurve through (DAYS, exp(-r t)), T = days / 365."""
    return build.ql_european("put", S, K, days, build.ql_discount_curve(DAYS, RATES), sigma)


# ---- the kinds and the store ---------------------------------------------------------------

@pytest.mark.parametrize("kind,doc,field", [
    ("curve", {"days": [30, 30], "rates": [0.04, 0.05]}, "curve"),
    ("curve", {"days": [30, 60], "rates": [4.3, 0.05]}, "curve"),
    ("curve", {"days": [30, 60], "rates": [0.04]}, "rates"),
    ("dividends", {"ex_dates": [0.5, 0.25], "amounts": [1, 1]}, "ex_dates"),
    ("dividends", {"ex_dates": [0.25, "2026-01-02"], "amounts": [1, 1]}, "ex_dates"),
    ("dividends", {"ex_dates": [0.25], "amounts": [-1]}, "amounts"),
    ("heston", {"v0": 0.04, "kappa": 0.0, "theta": 0.04, "xi": 0.3, "rho": -0.7}, "kappa"),
    ("heston", {"v0": 0.04, "kappa": 1.5, "theta": 0.04, "xi": 0.3, "rho": 1.5}, "rho"),
    ("heston", {"v0": float("nan"), "kappa": 1.5, "theta": 0.04, "xi": 0.3, "rho": 0.5}, "v0"),
])
def test_bad_documents_are_refused_naming_the_field(kind, doc, field):
    with pytest.raises(InvalidInputError) as e:
        object_kinds.build(kind, doc)
    assert e.value.field == field


def _put_curve(store, name, rates):
    return object_kinds.put_document(store, name, "curve", {"days": DAYS, "rates": rates})


def test_the_same_document_keeps_its_version_and_another_bumps_it():
    store = ObjectStore()
    a = _put_curve(store, "USD", RATES)
    assert _put_curve(store, "USD", RATES) is a and a.handle == "USD#0001"
    b = _put_curve(store, "USD", [r + 0.001 for r in RATES])
    assert b.handle == "USD#0002"
    with pytest.raises(StaleHandle):
        store.get("USD#0001")


def test_objects_persist_and_versions_continue_after_a_restart(tmp_path, caplog):
    store = ObjectStore()
    assert store.open(tmp_path) == 0
    _put_curve(store, "USD", RATES)
    _put_curve(store, "USD", [0.05] * 5)  # USD#0002
    object_kinds.put_document(store, "XYZ", "dividends", {"ex_dates": ["2030-03-20"], "amounts": [1.5]})
    object_kinds.put_document(store, "H", "heston", {"v0": 0.04, "kappa": 1.5, "theta": 0.04, "xi": 0.3, "rho": -0.7})
    object_kinds.put_document(store, "GONE", "heston", {"v0": 0.04, "kappa": 1, "theta": 0.04, "xi": 0.3, "rho": 0})
    store.drop("GONE")
    before = {e.handle: (e.kind, e.created, e.summary) for e in store.list()}
    second = ObjectStore()
    assert second.open(tmp_path) == 0  # the first holds the directory: the second keeps memory only
    store.close()
    (tmp_path / "junk.json").write_text("{not json")
    (tmp_path / ("0" * 32 + ".json")).write_text(json.dumps({"format": "optiond.object", "name": "BAD", "kind": "curve",
                                                           "version": 1, "created": 0, "document": {"days": []}}))
    again = ObjectStore()
    with caplog.at_level(logging.WARNING, logger="optiond.daemon.objects"):
        assert again.open(tmp_path) == 3
    assert {e.handle: (e.kind, e.created, e.summary) for e in again.list()} == before
    assert sum("skipped" in r.getMessage() for r in caplog.records) == 2
    assert float(again.get("USD#0002").payload.zero_rate(1.0)) == 0.05
    assert _put_curve(again, "USD", RATES).handle == "USD#0003"
    g = object_kinds.put_document(again, "GONE", "heston", {"v0": 0.04, "kappa": 1, "theta": 0.04, "xi": 0.3, "rho": 0})
    # a dropped name keeps counting across the restart, and above every version the last run
    # gave, since two files did not read (one of them may have held a version of GONE)
    assert g.handle == "GONE#0003"
    again.close()


def test_persisted_objects_stay_within_the_bounds(tmp_path):
    store = ObjectStore()
    store.open(tmp_path)
    for i in range(3):
        _put_curve(store, f"C{i}", RATES)
    store.close()
    small = ObjectStore(Limits(max_objects=2))
    assert small.open(tmp_path) == 2  # the newest two
    assert sorted(e.name for e in small.list()) == ["C1", "C2"]
    small.close()


# ---- handles in the pricing functions, without a daemon ------------------------------------------

def test_a_flat_curve_handle_gives_the_flat_rate_price(no_daemon):
    h = F.OPTIOND_CURVE("FLAT", col([30, 365, 3650]), col([0.043] * 3))
    assert h == "FLAT#0001@local"
    K = [80.0, 100.0, 120.0]
    for kind, fn in (("put", F.BS_PUT), ("call", F.BS_CALL)):
        got = [x for (x,) in fn(100.0, col(K), 0.7, h, 0.25, 0.01)]
        flat = [x for (x,) in fn(100.0, col(K), 0.7, 0.043, 0.25, 0.01)]
        assert got == flat
        assert got == pytest.approx([bs(kind, 100.0, k, 0.7, 0.043, 0.25, 0.01) for k in K], rel=1e-12)
    assert F.BOPM_PUT(100.0, 100.0, 0.7, h, 0.25, 200) == F.BOPM_PUT(100.0, 100.0, 0.7, 0.043, 0.25, 200)


def test_a_curve_handle_reads_the_interpolated_zero_rate_at_each_T(no_daemon):
    h = F.OPTIOND_CURVE("USD", [DAYS], [RATES])  # a row of tenors, a row of rates
    days = np.array([45.0, 120.0, 182.0, 300.0, 600.0])
    got = F.BS_PUT(100.0, 105.0, col(days / 365.0), h, 0.3)
    for (p,), d in zip(got, days):
        assert p == pytest.approx(ql_put_on_curve(100.0, 105.0, d, 0.3), rel=1e-11)
    # the raw interpolation by hand: r(t) t linear between the tenors
    t1, t2, r1, r2 = DAYS[2] / 365, DAYS[3] / 365, RATES[2], RATES[3]
    t = 300.0 / 365
    r = (r1 * t1 + (r2 * t2 - r1 * t1) * (t - t1) / (t2 - t1)) / t
    assert F.BS_PUT(100.0, 105.0, t, h, 0.3) == pytest.approx(bs("put", 100.0, 105.0, t, r, 0.3), rel=1e-13)


def test_one_cell_reads_the_same_rate_bits_as_a_range():
    """ZeroCurve.zero_rate_one (a cell) is np.interp's arithmetic (a range): the same bits."""
    from optiond.market.curve import ZeroCurve

    curve = ZeroCurve.from_points(DAYS, RATES)
    rng = np.random.default_rng(7)
    t = np.concatenate([rng.uniform(0.0, 3.0, 2000), np.array(DAYS) / 365.0, [1e-9, 0.0]])
    assert [curve.zero_rate_one(x) for x in t] == curve.zero_rate(t).tolist()


def test_a_version_bump_changes_the_dependent_cells_and_the_old_handle_is_stale(no_daemon):
    h1 = F.OPTIOND_CURVE("USD", [DAYS], [RATES])
    p1 = F.BS_PUT(100.0, 100.0, 1.0, h1, 0.2)
    h2 = F.OPTIOND_CURVE("USD", [DAYS], [[r + 0.01 for r in RATES]])
    assert (h1, h2) == ("USD#0001@local", "USD#0002@local")
    p2 = F.BS_PUT(100.0, 100.0, 1.0, h2, 0.2)
    assert p2 == pytest.approx(bs("put", 100.0, 100.0, 1.0, 0.053, 0.2), rel=1e-12) and p2 < p1
    assert F.BS_PUT(100.0, 100.0, 1.0, h1, 0.2) == (
        "#optiond: r: stale handle USD#0001: a later version replaced it; the live one is USD#0002")
    assert F.BS_PUT(100.0, 100.0, 1.0, "USD", 0.2) == p2  # a bare name: the live version


@pytest.mark.parametrize("args,text", [
    ((100, 100, 1, "EUR#0004@local", 0.2), "#optiond: r: no object named EUR in this Excel (it holds: USD); recalculate the cell that makes it"),
    ((100, 100, 1, "EUR", 0.2),
     "#optiond: r must be a number or a curve's handle: no object named EUR in this Excel (no daemon is running) "
     "(it holds: USD)"),
    ((100, 100, 1, "USD#0009@local", 0.2),
     "#optiond: r: stale handle USD#0009: this Excel never made it (it may have restarted since); the live one is "
     "USD#0001"),
    ((100, 100, 1, "USD#0001", 0.2),
     "#optiond: r: USD#0001 is kept by the optiond daemon, which is not running: start it (optiond serve) or "
     "recalculate the cell that makes it (this Excel then keeps it, @local)"),
    ((100, 100, 1, 0.05, "USD#0001@local"), "#optiond: sigma: USD#0001@local is a curve, not a surface"),
    ((100, 100, 1, 0.05, 0.2, "USD#0001@local"),
     "#optiond: q: USD#0001@local is a curve, not a cash-dividend schedule"),
    ((100, 100, 1, [["USD#0001@local"], [0.05]], 0.2),
     "#optiond: r: a handle must be one cell (it applies to every option of the call)"),
    ((100, 100, 1, "#optiond: rates: cell 2 must be a number", 0.2),
     "#optiond: r is an error: rates: cell 2 must be a number"),
])
def test_unknown_stale_and_misplaced_handles_say_so(no_daemon, args, text):
    assert F.OPTIOND_CURVE("USD", [DAYS], [RATES]) == "USD#0001@local"
    assert F.BS_PUT(*args) == text
    assert len(text) <= 255


def test_bad_object_cells_name_the_argument(no_daemon):
    assert F.OPTIOND_CURVE("USD", [[30, 30]], [[0.04, 0.05]]) == "#optiond: days_or_dates: days 30 appears twice"
    assert F.OPTIOND_CURVE("USD", [[30, 60]], [[4.3, 0.05]]) == (
        "#optiond: rates: row 1: rate 4.3 is not an annual decimal (0.043 for 4.3 %)")
    assert F.OPTIOND_CURVE("USD", [[30, 60]], [[0.04, "x"]]) == "#optiond: rates: cell 2 must be a number, got 'x'"
    assert F.OPTIOND_DIVIDENDS("X", [[0.5, 0.25]], [[1, 1]]) == (
        "#optiond: ex_dates: cell 2: ex-dates must be in ascending order, got 0.25")
    assert F.OPTIOND_HESTON("H", 0.04, 1.5, 0.04, 0.3, 2) == "#optiond: rho: must be between -1 and 1, got 2.0"
    assert F.OPTIOND_CURVE("bad name!", [[30]], [[0.04]]).startswith("#optiond: name must be 1 to 64 of")


def test_a_dividend_handle_is_the_schedule_each_option_sees(no_daemon):
    d = F.OPTIOND_DIVIDENDS("XYZ", col([0.25, 0.5, 1.5]), col([1.0, 1.0, 1.0]))
    T = [0.3, 1.0]
    got = F.BOPM_PUT(100.0, 100.0, col(T), 0.05, 0.3, 500, d)
    # the same rows with each option's own schedule given explicitly (ex-dates from now to its T)
    assert got[0][0] == F.BOPM_PUT(100.0, 100.0, 0.3, 0.05, 0.3, 500, None, True, 0.25, 1.0)
    assert got[1][0] == F.BOPM_PUT(100.0, 100.0, 1.0, 0.05, 0.3, 500, None, True, [[0.25, 0.5]], [[1.0, 1.0]])
    assert F.BOPM_PUT(100.0, 100.0, 1.0, 0.05, 0.3, 500, d) == got[1][0]  # one cell, the same bits
    assert F.AMERICAN_PUT(100.0, 100.0, 1.0, 0.05, 0.3, d) == pytest.approx(got[1][0], abs=5e-3)  # the tree, N 1000
    assert F.BS_PUT(100.0, 100.0, 1.0, 0.05, 0.3, d).startswith(
        "#optiond: q: XYZ#0001@local is a cash-dividend schedule, which only the CRR tree prices")
    assert F.BOPM_PUT(100.0, 100.0, 1.0, 0.05, 0.3, 500, d, True, 0.25, 1.0) == (
        "#optiond: give the cash dividends as q (XYZ#0001@local) or as div_times, div_amounts, not both")


def test_a_heston_handle_stands_for_the_five_parameters(no_daemon):
    h = F.OPTIOND_HESTON("SPX-H", 0.04, 1.5, 0.04, 0.3, -0.7)
    got = F.HESTON_PUT(100.0, 100.0, 1.0, 0.05, 0.01, h, None, None, None, None, False)
    assert got == F.HESTON_PUT(100.0, 100.0, 1.0, 0.05, 0.01, 0.04, 1.5, 0.04, 0.3, -0.7, False)
    assert got == pytest.approx(build.ql_heston("put", 100.0, 100.0, 365, 0.05, 0.01, 0.04, 1.5, 0.04, 0.3, -0.7),
                                abs=2e-3)
    assert F.HESTON_PUT(100.0, 100.0, 1.0, 0.05, 0.01, h, 1.5) == (
        "#optiond: kappa must be left out when v0 is a Heston handle (SPX-H#0001@local)")
    assert F.HESTON_PUT(100.0, 100.0, 1.0, 0.05, 0.01, 0.04) == "#optiond: kappa is required (empty cell)"


def test_a_surface_handle_reads_its_vol_at_each_K_and_T(no_daemon):
    entry = object_kinds.put_document(objects.local_store(), "GOLD", "surface", build.golden_surface().to_dict())
    h = entry.handle + objects.LOCAL_MARK
    K = [80.0, 100.0, 125.0]
    for T, Fw, p in build.SVI_SLICES:
        got = [x for (x,) in F.BS_CALL(100.0, col(K), T, 0.04, h)]
        assert got == pytest.approx([bs("call", 100.0, k, T, 0.04, build.svi_vol(T, Fw, p, k)) for k in K], rel=1e-12)
    out = F.BS_CALL(100.0, 100.0, col([0.5, 3.0]), 0.04, h)
    assert isinstance(out[0][0], float)
    assert out[1][0].startswith(f"#optiond: sigma ({h}): T must lie within the surface's expiries")


# ---- with the daemon -------------------------------------------------------------------------

def test_daemon_objects_are_shared_listed_and_bumped(with_daemon):
    h = F.OPTIOND_CURVE("XL-USD", [DAYS], [RATES])
    assert h.startswith("XL-USD#") and not h.endswith("@local")
    d = F.OPTIOND_DIVIDENDS("XL-XYZ", [[0.25, 0.5]], [[1.0, 1.0]])
    p = F.BS_PUT(100.0, 105.0, 300 / 365, h, 0.3)
    assert p == pytest.approx(ql_put_on_curve(100.0, 105.0, 300.0, 0.3), rel=1e-11)
    assert F.BOPM_PUT(100.0, 100.0, 1.0, 0.05, 0.3, 1000, d) == pytest.approx(10.722069300434505, rel=1e-12)
    table = F.OPTIOND_OBJECTS()
    assert table[0] == ["handle", "kind", "summary", "created"]
    rows = {r[0]: r for r in table[1:]}
    assert rows[h][1:3] == ["curve", "5 points, 30 to 730 days, 3.9% to 4.5%"]
    assert rows[d][1:3] == ["dividends", "2 dividends, 0.25 years to 0.5 years, 2 in all"]
    other = with_daemon.client().put_object("XL-USD", "curve", {"days": DAYS, "rates": [0.05] * 5})["handle"]
    assert F.BS_PUT(100.0, 105.0, 300 / 365, h, 0.3) == (
        f"#optiond: r: stale handle {h}: a later version replaced it; the live one is {other}")
    assert F.BS_PUT(100.0, 105.0, 300 / 365, other, 0.3) == pytest.approx(bs("put", 100, 105, 300 / 365, 0.05, 0.3),
                                                                         rel=1e-12)
    assert F.BS_PUT(100.0, 105.0, 300 / 365, "XL-NONE#0001", 0.3).startswith(
        "#optiond: r: no object named XL-NONE in the daemon")


def test_objects_survive_a_daemon_restart(tmp_path, monkeypatch):
    from conftest import start_daemon, stop_daemon

    first = start_daemon(tmp_path)
    try:
        c = first.client()
        h = c.put_object("KEEP", "heston", {"v0": 0.04, "kappa": 1.5, "theta": 0.04, "xi": 0.3, "rho": -0.7})["handle"]
        c.put_object("KEEP", "heston", {"v0": 0.05, "kappa": 1.5, "theta": 0.04, "xi": 0.3, "rho": -0.7})
        c.close()
    finally:
        stop_daemon(first)
    assert h == "KEEP#0001"
    (tmp_path / "data" / "objects" / "junk.json").write_text("[1, 2")
    second = start_daemon(tmp_path)
    try:
        c = second.client()
        got = c.get_object("KEEP#0002")
        assert got["document"]["v0"] == 0.05 and got["kind"] == "heston"
        assert c.put_object("KEEP", "heston", {"v0": 0.06, "kappa": 1.5, "theta": 0.04, "xi": 0.3,
                                               "rho": -0.7})["handle"] == "KEEP#0003"
        assert c.ping()["pid"] == second.daemon_pid  # alive after skipping the corrupt file
        c.close()
    finally:
        stop_daemon(second)
    assert "junk.json skipped" in second.log()
