"""Qt item models for the results table: a pandas DataFrame as a table model, and the
sort/filter proxy the view sits on.

The source model keeps one NumPy array per column, so a cell is an array lookup. Sorting is
done by pandas in the source model (:meth:`DataFrameModel.sort`, on raw values, so 10 sorts
after 9 and empty cells go last): the proxy hands its ``sort`` to the source, because Qt's own
proxy sort would call back into Python for every comparison (0.4 s for 7,000 rows). The proxy
filters rows by status and by a case-insensitive text match over the row.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
from PySide6.QtCore import QAbstractTableModel, QModelIndex, QSortFilterProxyModel, Qt
from PySide6.QtGui import QBrush, QColor

#: role giving the value to sort on (float for numbers, NaN sorted last in ascending order)
SORT_ROLE = int(Qt.ItemDataRole.UserRole) + 1

#: the results columns shown first, in this order (others follow in file order)
CHAIN_ORDER = ("expiry", "type", "strike", "bid", "ask", "mid", "model_price", "model_minus_mid", "theo", "edge", "iv",
               "implied_vol", "iv_fit", "delta", "gamma", "theta", "vega", "rho", "status", "error", "device",
               "underlying", "style", "underlying_price", "quote_date", "last", "expiry_years")
PORTFOLIO_ORDER = ("kind", "style", "spot", "strike", "expiry", "rate", "dividend_yield", "volatility", "method",
                   "steps", "price", "std_error", "delta", "gamma", "theta", "vega", "rho", "status", "error", "device")

#: header labels (the exported CSV keeps the column names)
HEADERS = {
    "mid": "mid (market)", "model_price": "model", "model_minus_mid": "model − mid", "iv": "IV (solved)",
    "implied_vol": "IV (quoted)", "underlying_price": "spot", "expiry_years": "expiry (y)", "std_error": "std error",
    "dividend_yield": "div. yield", "volatility": "vol", "iv_fit": "IV (fit)", "theo": "theo (fit)",
    "edge": "edge (mid − theo)",
}

_ERROR_BRUSH = QBrush(QColor(170, 30, 30))
_RIGHT = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)


def ordered_columns(columns: Sequence[str], kind: str) -> list[str]:
    """``columns`` with the preferred ones of ``kind`` ("chain"/"portfolio") first."""
    first = [c for c in (CHAIN_ORDER if kind == "chain" else PORTFOLIO_ORDER) if c in columns]
    return first + [c for c in columns if c not in first]


def format_value(v: Any) -> str:
    """Display text of one cell: floats to 6 significant digits, NaN/None as empty."""
    if v is None:
        return ""
    if isinstance(v, (float, np.floating)):
        return "" if math.isnan(v) else f"{v:.6g}"
    if isinstance(v, (np.integer, int)) and not isinstance(v, bool):
        return str(int(v))
    return str(v)


class DataFrameModel(QAbstractTableModel):
    """A read-only table model over a :class:`pandas.DataFrame` (one row per row)."""

    def __init__(self, df: pd.DataFrame | None = None, headers: Mapping[str, str] | None = None, parent=None):
        super().__init__(parent)
        self._headers = dict(HEADERS if headers is None else headers)
        self._df = pd.DataFrame()
        self._cols: list[np.ndarray] = []
        self._numeric: list[bool] = []
        self._status_col: int | None = None
        self._row_text: list[str] | None = None
        if df is not None:
            self.set_frame(df)

    # ------------------------------------------------------------------ data

    def set_frame(self, df: pd.DataFrame) -> None:
        """Show ``df`` (its index is dropped; columns keep their order)."""
        self.beginResetModel()
        self._df = df.reset_index(drop=True)
        self._cols = [self._df[c].to_numpy() for c in self._df.columns]
        self._numeric = [pd.api.types.is_numeric_dtype(self._df[c].dtype) and not pd.api.types.is_bool_dtype(self._df[c].dtype)
                         for c in self._df.columns]
        cols = list(self._df.columns)
        self._status_col = cols.index("status") if "status" in cols else None
        self._row_text = None
        self.endResetModel()

    def frame(self) -> pd.DataFrame:
        """The DataFrame shown (index 0..n-1)."""
        return self._df

    def column_name(self, column: int) -> str:
        """The DataFrame column name of view column ``column``."""
        return str(self._df.columns[column])

    def status_at(self, row: int) -> str:
        """The ``status`` value of ``row`` ("" when the frame has no status column)."""
        return "" if self._status_col is None else str(self._cols[self._status_col][row])

    def row_text(self, row: int) -> str:
        """All cells of ``row`` as one lower-case string, for the text filter (built once)."""
        if self._row_text is None:
            texts = [self._df[c].map(format_value).str.lower().to_numpy() for c in self._df.columns]
            self._row_text = ["\t".join(parts) for parts in zip(*texts)] if texts else []
        return self._row_text[row]

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        """Reorder the rows by ``column`` (stable; empty cells last whatever the order)."""
        if not 0 <= column < len(self._df.columns):
            return
        self.layoutAboutToBeChanged.emit()
        key = self._df.iloc[:, column]
        if not self._numeric[column]:
            key = key.astype(str).where(key.notna(), None)
        perm = key.sort_values(ascending=order == Qt.SortOrder.AscendingOrder, kind="mergesort",
                               na_position="last").index.to_numpy()
        self._df = self._df.iloc[perm].reset_index(drop=True)
        self._cols = [col[perm] for col in self._cols]
        if self._row_text is not None:
            self._row_text = [self._row_text[i] for i in perm]
        new_row = np.empty_like(perm)
        new_row[perm] = np.arange(perm.size)
        old = self.persistentIndexList()
        self.changePersistentIndexList(old, [self.index(int(new_row[i.row()]), i.column()) for i in old])
        self.layoutChanged.emit()

    # ------------------------------------------------------------------ Qt interface

    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: B008 (Qt signature)
        return 0 if parent.isValid() else len(self._df)

    def columnCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._df.columns)

    def data(self, index: QModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        r, c = index.row(), index.column()
        v = self._cols[c][r]
        if role == Qt.ItemDataRole.DisplayRole:
            return format_value(v)
        if role == SORT_ROLE:
            if self._numeric[c]:
                f = float(v)
                return f if not math.isnan(f) else math.inf
            return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)
        if role == Qt.ItemDataRole.TextAlignmentRole and self._numeric[c]:
            return _RIGHT
        if role == Qt.ItemDataRole.ForegroundRole and self._status_col is not None and self.status_at(r) not in ("ok", ""):
            return _ERROR_BRUSH
        if role == Qt.ItemDataRole.ToolTipRole:
            text = format_value(v)
            return text if len(text) > 20 else None
        return None

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and 0 <= section < len(self._df.columns):
            name = str(self._df.columns[section])
            if role == Qt.ItemDataRole.DisplayRole:
                return self._headers.get(name, name)
            if role == Qt.ItemDataRole.ToolTipRole:
                return f"column {name}"
        elif orientation == Qt.Orientation.Vertical and role == Qt.ItemDataRole.DisplayRole:
            return str(section + 1)
        return None


class ResultsProxy(QSortFilterProxyModel):
    """Sorts on raw values and keeps rows whose status is the chosen one (or any) and whose
    text contains the filter text (case-insensitive)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setSortRole(SORT_ROLE)
        self._status: str | None = None
        self._needle = ""

    def _change(self, apply) -> None:
        if hasattr(self, "beginFilterChange"):  # Qt >= 6.9
            self.beginFilterChange()
            apply()
            self.endFilterChange(QSortFilterProxyModel.Direction.Rows)
        else:
            apply()
            self.invalidateRowsFilter()

    def set_status(self, status: str | None) -> None:
        """Keep only rows with this status (None or "": all)."""
        self._change(lambda: setattr(self, "_status", status or None))

    def set_text(self, text: str) -> None:
        """Keep only rows containing ``text`` in any cell (case-insensitive; "" keeps all)."""
        self._change(lambda: setattr(self, "_needle", text.strip().lower()))

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        """Sort by ``column`` of the view: the source model sorts (see the module docstring)."""
        src = self.sourceModel()
        if src is not None and column >= 0:
            src.sort(column, order)

    def filterAcceptsRow(self, source_row: int, source_parent: QModelIndex) -> bool:
        src = self.sourceModel()
        if self._status is not None and src.status_at(source_row) != self._status:
            return False
        return not self._needle or self._needle in src.row_text(source_row)

    def visible_frame(self) -> pd.DataFrame:
        """The rows shown, in the order shown (for export)."""
        src = self.sourceModel()
        rows = [self.mapToSource(self.index(r, 0)).row() for r in range(self.rowCount())]
        return src.frame().iloc[rows]
