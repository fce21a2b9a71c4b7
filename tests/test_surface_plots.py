"""Pictures of a surface: files written, and the data each picture shows."""

from __future__ import annotations

import gc
import math
import multiprocessing as mp
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("matplotlib")

from optiond.surface import SVI, Slice, Surface  # noqa: E402
from optiond.surface.drawing import Pictures, draw  # noqa: E402
from optiond.surface.plots import (FIGURES, atm_term_structure, heatmap_figure, otm_quotes, plot_surface,  # noqa: E402
                                   smiles_figure, surface_grid, term_structure_figure)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"  # PNG specification (ISO/IEC 15948), §5.2
P1 = SVI(0.01, 0.05, -0.4, 0.0, 0.2)
P2 = SVI(0.03, 0.10, -0.5, 0.05, 0.3)


def svi_w(p: SVI, k):
    """Raw SVI total variance written out (Gatheral 2004)."""
    k = np.asarray(k, dtype=float)
    return p.a + p.b * (p.rho * (k - p.m) + np.sqrt((k - p.m) ** 2 + p.sigma ** 2))


@pytest.fixture(scope="module")
def surface():
    return Surface("TEST", "2026-01-02", [Slice("2026-04-03", 0.25, 100.5, 0.03, P1),
                                         Slice("2027-01-02", 1.0, 102.0, 0.03, P2)])


@pytest.fixture(scope="module")
def chain_out(surface):
    rows = []
    for s in surface.slices:
        for K in np.arange(70.0, 131.0, 5.0):
            for kind in ("call", "put"):
                iv = math.sqrt(svi_w(s.svi, math.log(K / s.forward)) / s.T)
                rows.append(dict(expiry=s.expiry, type=kind, strike=K, iv_bid=iv - 0.01, iv=iv, iv_ask=iv + 0.01))
    return pd.DataFrame(rows)


def test_files_written_png_by_default_and_svg_on_request(surface, chain_out, tmp_path):
    png = plot_surface(chain_out, surface, tmp_path / "png")
    assert sorted(p.name for p in png) == sorted(f"test_{f}.png" for f in FIGURES)
    paths = plot_surface(chain_out, surface, tmp_path / "new" / "dir", ("png", "svg"))
    assert sorted(p.name for p in paths) == sorted(f"test_{f}.{e}" for f in FIGURES for e in ("png", "svg"))
    for p in paths:
        data = p.read_bytes()
        assert len(data) > 5000
        if p.suffix == ".png":
            assert data[:8] == PNG_SIGNATURE
        else:
            assert ET.fromstring(data).tag == "{http://www.w3.org/2000/svg}svg"


def test_plot_into_a_file_raises_oserror(surface, chain_out, tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(OSError):
        plot_surface(chain_out, surface, f)


def test_pictures_drawn_in_a_child_are_the_files_drawn_here(surface, chain_out, tmp_path):
    child = Pictures(chain_out, surface, tmp_path / "child", ("png",))
    assert child.background == ("fork" in mp.get_all_start_methods())
    here = Pictures(chain_out, surface, tmp_path / "here", ("png",), background=False)
    assert not here.background
    assert gc.isenabled()
    drawn, expected = child.result(), here.result()
    assert gc.isenabled()  # paused while drawing here, on again after
    assert [p.name for p in drawn] == [p.name for p in expected] == [f"test_{f}.png" for f in FIGURES]
    for a, b in zip(drawn, expected):
        assert a.parent == tmp_path / "child" and a.read_bytes() == b.read_bytes()


def test_pictures_raise_the_childs_error_here(surface, chain_out, tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(OSError):
        Pictures(chain_out, surface, f, ("png",)).result()
    gc.disable()
    try:  # a collector the caller paused stays paused, on an error too
        with pytest.raises(OSError):
            draw(chain_out, surface, f, ("png",))
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_ticks_inside_the_view_round_and_plain(surface, chain_out):
    """Every panel's ticks lie inside its view; the log axes' ticks are 1-2-5 values written
    without mathtext, with no minor ticks."""
    for ax in smiles_figure(chain_out, surface).axes:
        for axis, (lo, hi) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            locs = axis.get_majorticklocs()
            assert 2 <= len(locs) <= 4 and np.all((locs >= lo - 1e-12) & (locs <= hi + 1e-12))
    heat = heatmap_figure(surface, k_lim=(-0.2, 0.2)).axes[0].yaxis
    for axis in [ax.xaxis for ax in term_structure_figure(surface).axes] + [heat]:
        lo, hi = sorted(axis.get_view_interval())
        locs = axis.get_majorticklocs()
        mant = locs / 10.0 ** np.floor(np.log10(locs))
        assert len(locs) >= 2 and np.all((locs >= lo) & (locs <= hi))
        assert np.all(np.isin(np.round(mant, 9), (1, 2, 3, 5, 7))) and len(axis.get_minorticklocs()) == 0
        assert not any("$" in t for t in axis.major.formatter.format_ticks(locs))


def test_grid_is_the_surfaces_vol(surface):
    k, T, vol = surface_grid(surface, k_lim=(-0.2, 0.2), n_k=41, n_T=30)
    assert vol.shape == (30, 41) and T[0] == pytest.approx(0.25) and T[-1] == pytest.approx(1.0)
    assert np.all(np.diff(np.log(T)) > 0)
    for i, t in enumerate(T):
        np.testing.assert_array_equal(vol[i], np.sqrt(surface.total_variance(k, t) / t))
    # at the slices' own times: the raw SVI formula
    np.testing.assert_allclose(vol[0], np.sqrt(svi_w(P1, k) / 0.25), rtol=1e-14)
    np.testing.assert_allclose(vol[-1], np.sqrt(svi_w(P2, k) / 1.0), rtol=1e-14)


def test_heatmap_shows_the_grid(surface):
    fig = heatmap_figure(surface, k_lim=(-0.2, 0.2))
    (mesh,) = fig.axes[0].collections
    _, _, vol = surface_grid(surface, k_lim=(-0.2, 0.2))
    np.testing.assert_allclose(np.asarray(mesh.get_array()).reshape(vol.shape), 100 * vol, rtol=1e-15)


def test_atm_term_structure_against_finite_differences(surface):
    T, vol, skew = atm_term_structure(surface)
    np.testing.assert_array_equal(T, [0.25, 1.0])
    h = 1e-5
    for i, p in enumerate((P1, P2)):
        assert vol[i] == pytest.approx(math.sqrt(svi_w(p, 0.0) / T[i]), rel=1e-14)
        fd = (math.sqrt(svi_w(p, h) / T[i]) - math.sqrt(svi_w(p, -h) / T[i])) / (2 * h)
        assert skew[i] == pytest.approx(fd, rel=1e-7)
    assert np.all(skew < 0)  # rho < 0: the equity skew


def test_otm_quotes_take_puts_below_and_calls_above_the_forward(chain_out):
    q = otm_quotes(chain_out, 100.5, "2026-04-03")
    assert len(q) == 13  # one per strike 70 ... 130
    rows = chain_out[chain_out.expiry == "2026-04-03"]
    puts = rows[(rows.type == "put") & (rows.strike < 100.5)]
    np.testing.assert_allclose(q["k"][q["k"] < 0], np.log(np.sort(puts.strike.to_numpy()) / 100.5))
    assert np.all(np.diff(q["k"]) > 0)
