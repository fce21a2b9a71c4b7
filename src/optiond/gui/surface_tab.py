"""The Surface tab: the volatility surface fitted on the Batch tab's last chain run.

* A heatmap of the implied volatility, in vol points (%), over log-moneyness
  ``k = ln(K / F_T)`` (x) and time to expiry ``T`` in years (y, log scale): the grid of
  :func:`optiond.surface.plots.surface_grid` (between expiries the surface's own interpolation
  in total variance) over the quoted range of :func:`optiond.surface.plots.k_range`, with its
  colour bar.
* A cursor: moving the pointer over the map reads ``(K, T, sigma)`` there, with ``F_T`` =
  :meth:`~optiond.surface.model.Surface.forward`, ``K = F_T exp(k)`` and ``sigma`` =
  :meth:`~optiond.surface.model.Surface.vol` at ``(K, T)`` (:class:`CursorReading`).
* The fit statistics per expiry in a table (:func:`surface_stats_frame`), the whole surface's
  in one line above it (the line ``optiond chain --surface`` prints).

A tab of its own rather than a panel inside the Batch tab: the Batch tab's right side already
holds the smile and the forward table, and a map plus a table of one row per expiry need the
room. The Batch tab's smile shows the fit of one expiry against its quotes; this tab shows all
expiries at once. It follows the Batch tab's runs (:meth:`SurfaceTab.show_outcome`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, QSettings, Qt
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QLabel, QSplitter, QTableView, QVBoxLayout, QWidget

from ..commands.pricing import surface_lines
from ..surface.plots import atm_term_structure, k_range, surface_grid
from .qtmodels import DataFrameModel

#: the per-expiry fit statistics as the table shows them: (column, header). ``T`` in years;
#: rate, ATM IV and the in-spread share in percent; the RMS error in vol points
STATS_VIEW = (("expiry", "expiry"), ("T", "T (y)"), ("forward", "forward"), ("rate", "rate (%)"),
              ("atm_iv", "ATM IV (%)"), ("quotes", "quotes"), ("fitted_quotes", "fitted"),
              ("rms_vol_pts", "RMS (vol pts)"), ("inside_share_near", "inside spread near (%)"),
              ("confidence", "confidence"), ("arbitrage_free", "arbitrage-free"))

#: height of the map's one row when the surface has a single expiry (decades of T)
SINGLE_ROW_DECADES = 0.2


def _number(x: Any) -> float:
    return float(x) if isinstance(x, (int, float, np.number)) and not isinstance(x, bool) else math.nan


def surface_stats_frame(surface) -> pd.DataFrame:
    """One row per slice of ``surface`` (:class:`optiond.surface.model.Surface`), the columns
    of :data:`STATS_VIEW`: the slice's ``expiry``, ``T`` (years), ``forward`` and ``rate`` (in
    %), the ATM vol ``sqrt(w(0) / T)`` (in %, :func:`optiond.surface.plots.atm_term_structure`),
    and from its ``stats``: ``quotes`` (out-of-the-money quotes), ``fitted_quotes`` (those the
    fit used), ``rms_vol_pts`` (RMS error over them, vol points), ``inside_share_near`` (share
    of two-sided quotes near the money whose fitted IV lies inside their bid/ask IV, in %),
    ``confidence`` (in [0, 1]) and ``arbitrage_free`` (``yes`` / ``no``). A statistic the
    slice lacks is NaN (empty in the table)."""
    columns = [c for c, _ in STATS_VIEW]
    if surface is None or not surface.slices:
        return pd.DataFrame({c: [] for c in columns})
    _, atm, _ = atm_term_structure(surface)
    rows = []
    for sl, atm_vol in zip(surface.slices, atm):
        st = sl.stats or {}
        arb = st.get("arbitrage_free")
        rows.append({"expiry": sl.expiry, "T": float(sl.T), "forward": float(sl.forward), "rate": 100.0 * sl.rate,
                     "atm_iv": 100.0 * float(atm_vol), "quotes": _number(st.get("quotes")),
                     "fitted_quotes": _number(st.get("fitted_quotes")), "rms_vol_pts": _number(st.get("rms_vol_pts")),
                     "inside_share_near": 100.0 * _number(st.get("inside_share_near")),
                     "confidence": _number(st.get("confidence")),
                     "arbitrage_free": "" if arb is None else ("yes" if arb else "no")})
    return pd.DataFrame(rows, columns=columns)


@dataclass(frozen=True)
class CursorReading:
    """The surface under the pointer: log-moneyness ``k``, ``T`` (years), the forward ``F_T``,
    the strike ``K = F_T exp(k)`` and ``vol`` = :meth:`Surface.vol` at ``(K, T)`` (annualised
    decimal; NaN where the total variance is negative)."""

    k: float
    T: float
    forward: float
    strike: float
    vol: float

    def text(self) -> str:
        """The cursor label: K and F_T to 2 decimals, T to 4, sigma in vol points to 2."""
        sigma = f"{100.0 * self.vol:.2f} %" if math.isfinite(self.vol) else "n/a"
        return (f"K = {self.strike:,.2f}    T = {self.T:.4f} y    σ = {sigma}    "
                f"(k = ln(K/F_T) = {self.k:+.4f}, F_T = {self.forward:,.2f})")


def _cell_rect(x: np.ndarray, y: np.ndarray) -> QRectF:
    """The rectangle an image of evenly spaced pixel centres ``x`` and ``y`` covers."""
    dx = (x[-1] - x[0]) / (len(x) - 1) if len(x) > 1 else 0.1
    dy = (y[-1] - y[0]) / (len(y) - 1) if len(y) > 1 else SINGLE_ROW_DECADES
    return QRectF(x[0] - dx / 2, y[0] - dy / 2, dx * len(x), dy * len(y))


class SurfaceTab(QWidget):
    """The fitted surface of the last chain run: heatmap with a (K, T, sigma) cursor and the
    fit statistics per expiry (see the module docstring). ``surface`` is the surface shown
    (None before a fit), ``cursor`` the last :class:`CursorReading` (None off the map)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.surface = None
        self.cursor: CursorReading | None = None
        self.grid: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # (k, T, vol) of the map
        self._rect = QRectF()

        self.summary = QLabel("Run a chain on the Batch tab: its volatility surface (one arbitrage-free SVI smile "
                              "per expiry) shows here.")
        self.summary.setWordWrap(True)
        self.plot = pg.PlotWidget()
        item = self.plot.getPlotItem()
        item.setLabel("bottom", "log-moneyness k = ln(K / F_T)")
        item.setLabel("left", "T (years)")
        item.getAxis("left").setLogMode(True)  # the image's y is log10 T: the axis labels T
        for side in ("bottom", "left"):  # k and T as they are, not in thousandths
            item.getAxis(side).enableAutoSIPrefix(False)
        item.hideButtons()
        item.setTitle("Implied volatility (%)")
        self.image = pg.ImageItem()
        item.addItem(self.image)
        self.colorbar = pg.ColorBarItem(values=(0.0, 100.0), colorMap=pg.colormap.get("viridis"), label="IV (%)",
                                        interactive=False)
        self.colorbar.setImageItem(self.image, insert_in=item)
        pen = pg.mkPen((255, 255, 255), width=1, style=Qt.PenStyle.DashLine)
        self.vline = pg.InfiniteLine(angle=90, pen=pen, movable=False)
        self.hline = pg.InfiniteLine(angle=0, pen=pen, movable=False)
        for line in (self.vline, self.hline):
            line.setVisible(False)
            item.addItem(line, ignoreBounds=True)
        self.plot.scene().sigMouseMoved.connect(self._mouse_moved)
        self.cursor_label = QLabel("")
        self.cursor_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self.stats_model = DataFrameModel(surface_stats_frame(None), dict(STATS_VIEW))
        self.stats_table = QTableView()
        self.stats_table.setModel(self.stats_model)
        self.stats_table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.stats_table.setAlternatingRowColors(True)
        self.stats_table.verticalHeader().setVisible(False)
        self.stats_table.verticalHeader().setDefaultSectionSize(20)
        self.stats_table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.stats_table.setToolTip("The fit per expiry: out-of-the-money quotes and those fitted, RMS error of the "
                                    "fitted IV in vol points, share of two-sided quotes near the money whose fitted "
                                    "IV lies inside the bid/ask IV, confidence in [0, 1], the static-arbitrage checks")

        top = QWidget()
        tl = QVBoxLayout(top)
        tl.setContentsMargins(0, 0, 0, 0)
        tl.addWidget(self.plot, 1)
        tl.addWidget(self.cursor_label)
        self.split = QSplitter(Qt.Orientation.Vertical)
        self.split.addWidget(top)
        self.split.addWidget(self.stats_table)
        self.split.setStretchFactor(0, 3)
        self.split.setStretchFactor(1, 2)
        self.split.setSizes([460, 260])
        layout = QVBoxLayout(self)
        layout.addWidget(self.summary)
        layout.addWidget(self.split, 1)
        self.clear()

    # ------------------------------------------------------------------ content

    def show_outcome(self, outcome) -> None:
        """Show the surface of a Batch run (:class:`optiond.gui.backend.BatchOutcome`), or say
        why it has none."""
        if outcome.surface is not None:
            self.show_surface(outcome.surface, outcome.df)
            return
        why = (f"the fit failed: {outcome.surface_error}" if outcome.surface_error else
               "the last run was a portfolio (surfaces are fitted on option chains)" if outcome.kind != "chain" else
               "the last run was cancelled" if outcome.cancelled else
               "the last run failed" if outcome.error else
               "the last run priced no row" if not outcome.done else "Fit surface is off on the Batch tab")
        self.clear(f"No surface: {why}.")

    def clear(self, message: str | None = None) -> None:
        """Empty the map and the table; ``message`` in the summary line (if given)."""
        self.surface, self.grid, self.cursor = None, None, None
        self.image.clear()
        self._rect = QRectF()
        self.stats_model.set_frame(surface_stats_frame(None))
        self._hide_cursor()
        self.cursor_label.setText("")
        if message is not None:
            self.summary.setText(message)

    def show_surface(self, surface, out: pd.DataFrame | None = None) -> None:
        """Draw ``surface`` (:class:`optiond.surface.model.Surface`) over the log-moneyness range
        of the chain output ``out`` it was fitted on (:func:`optiond.surface.plots.k_range`;
        +-0.3 without one) and fill the statistics."""
        if surface is None or not surface.slices:
            self.clear("No surface: the fit kept no expiry.")
            return
        try:
            lim = k_range(out, surface)
        except (KeyError, ValueError, TypeError):  # an output without the quote columns: the default range
            lim = k_range(None, surface)
        k, T, vol = surface_grid(surface, k_lim=lim)
        self.surface, self.grid, self.cursor = surface, (k, T, vol), None
        y = np.log10(T)
        self._rect = _cell_rect(k, y)
        finite = vol[np.isfinite(vol)]
        lo, hi = (100.0 * float(finite.min()), 100.0 * float(finite.max())) if finite.size else (0.0, 100.0)
        if hi <= lo:
            lo, hi = lo - 0.5, hi + 0.5
        self.image.setImage(100.0 * vol.T, autoLevels=False, levels=(lo, hi))  # image[x, y]: k across, T up
        self.image.setRect(self._rect)
        self.colorbar.setLevels((lo, hi))
        item = self.plot.getPlotItem()
        item.setTitle(f"{surface.underlying} {surface.quote_time}: implied volatility (%) over (k, T)")
        item.setRange(rect=self._rect, padding=0)
        self.stats_model.set_frame(surface_stats_frame(surface))
        self.stats_table.resizeColumnsToContents()
        lines = surface_lines(surface)
        skipped = (surface.stats or {}).get("skipped") or []
        self.summary.setText(lines[0] + (f"; left out (too few quotes): {', '.join(map(str, skipped))}"
                                         if skipped else ""))
        self._hide_cursor()
        self.cursor_label.setText("Move the pointer over the map to read K, T and σ.")

    # ------------------------------------------------------------------ cursor

    def read_at(self, k: float, T: float) -> CursorReading | None:
        """The surface at log-moneyness ``k`` and ``T`` years (None without a surface or for a
        ``T`` that is not > 0)."""
        if self.surface is None or not (math.isfinite(k) and math.isfinite(T) and T > 0):
            return None
        forward = self.surface.forward(T)
        strike = forward * math.exp(k)
        vol = float(np.asarray(self.surface.vol(strike, T)).reshape(-1)[0])
        return CursorReading(float(k), float(T), forward, strike, vol)

    def _mouse_moved(self, scene_pos: QPointF) -> None:
        """Follow the pointer: over the map, show the crosshair and the (K, T, sigma) there."""
        if self.surface is None:
            return
        p = self.plot.getPlotItem().vb.mapSceneToView(scene_pos)
        if not self._rect.contains(p):
            self.cursor = None
            self._hide_cursor()
            self.cursor_label.setText("Move the pointer over the map to read K, T and σ.")
            return
        reading = self.read_at(p.x(), 10.0 ** p.y())
        self.cursor = reading
        if reading is None:
            return
        self.vline.setPos(p.x())
        self.hline.setPos(p.y())
        self.vline.setVisible(True)
        self.hline.setVisible(True)
        self.cursor_label.setText(reading.text())

    def _hide_cursor(self) -> None:
        self.vline.setVisible(False)
        self.hline.setVisible(False)

    # ------------------------------------------------------------------ settings

    def save_settings(self, s: QSettings) -> None:
        """Remember the map / table split."""
        s.setValue("surface/split", self.split.saveState())

    def load_settings(self, s: QSettings) -> None:
        """Restore what :meth:`save_settings` wrote."""
        split = s.value("surface/split")
        if split is not None:
            self.split.restoreState(split)
