"""The market inputs of every row of a listed option chain (:class:`ChainMarket`), as
:func:`optiond.chain.solve_market` solves them, one market per underlying
(:mod:`optiond.market.underlyings`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass
class ChainMarket:
    """The market inputs of every row of a chain, and the per-expiry table they came from.

    Row arrays, shape (n,): ``T`` (years, NaN where the time cells did not parse), ``spot``
    (the underlying price priced on: the print, or the spot implied by the options),
    ``rate``, ``dividend_yield`` (the carry), ``forward`` (``(S - PV) exp((r - q) T)``, PV the
    present value of the row's cash dividends, 0 without), ``group`` (the row's index into
    ``table``, -1 where T is unknown or the row has no market), ``clock_error`` (per-row
    message, "" when fine: a time cell or an underlying cell that does not parse).
    ``table``: one row per (underlying, expiry, settlement), columns
    :data:`optiond.chain.FORWARD_COLUMNS` (and ``pv_dividends`` with a dividend file).
    ``dividend_times``, ``dividend_amounts``: each row's cash dividends ex after its quote
    instant and before its expiry (years, currency units; shape (n, m), times NaN-padded,
    amounts 0-padded), None without a dividend file.
    """

    T: np.ndarray
    spot: np.ndarray
    rate: np.ndarray
    dividend_yield: np.ndarray
    forward: np.ndarray
    group: np.ndarray
    clock_error: list[str]
    table: pd.DataFrame
    dividend_times: np.ndarray | None = None
    dividend_amounts: np.ndarray | None = None

    def take(self, rows: np.ndarray) -> "ChainMarket":
        """The market of a subset of rows (the per-expiry table is kept whole)."""
        cash = {} if self.dividend_times is None else dict(dividend_times=self.dividend_times[rows],
                                                           dividend_amounts=self.dividend_amounts[rows])
        return ChainMarket(self.T[rows], self.spot[rows], self.rate[rows], self.dividend_yield[rows], self.forward[rows],
                           self.group[rows], [self.clock_error[i] for i in rows], self.table, **cash)

    def dividend_columns(self, rows: np.ndarray) -> dict:
        """The cash-dividend schedule columns of ``rows`` (:data:`optiond.models.DIVIDEND_FIELDS`;
        none for a chain without a dividend file)."""
        if self.dividend_times is None:
            return {}
        return dict(dividend_times=self.dividend_times[rows], dividend_amounts=self.dividend_amounts[rows])

    @classmethod
    def combine(cls, n: int, parts: list[tuple[np.ndarray, "ChainMarket"]], row_error: np.ndarray,
                table_columns: list[str]) -> "ChainMarket":
        """One market of ``n`` rows from the markets of disjoint row subsets.

        Args:
            n: rows of the whole chain.
            parts: ``(rows, market)``: the chain's row indices (shape (m,), int) and their own
                market (arrays of shape (m,), ``group`` into its own table); the tables are
                stacked in this order and each part's ``group`` moved by the rows before it.
            row_error: per row of the chain, shape (n,): why it has no market ("" where it has
                one); such a row keeps T NaN and group -1 (priced nowhere, marked invalid).
            table_columns: the columns of the (empty) table when no part has a row.

        Returns:
            :class:`ChainMarket` of the ``n`` rows.
        """
        nan = np.full(n, np.nan)
        T, spot, rate, q, fwd = nan.copy(), nan.copy(), nan.copy(), nan.copy(), nan.copy()
        group = np.full(n, -1, dtype=np.int64)
        error = [str(e) for e in row_error]
        cash = any(m.dividend_times is not None for _, m in parts)
        width = max([m.dividend_times.shape[1] for _, m in parts if m.dividend_times is not None] + [1])
        div_t, div_a = (np.full((n, width), np.nan), np.zeros((n, width))) if cash else (None, None)
        tables, offset = [], 0
        for rows, m in parts:
            T[rows], spot[rows], rate[rows], q[rows], fwd[rows] = m.T, m.spot, m.rate, m.dividend_yield, m.forward
            group[rows] = np.where(m.group >= 0, m.group + offset, -1)
            for r, e in zip(rows.tolist(), m.clock_error):
                error[r] = e or error[r]
            if cash and m.dividend_times is not None:
                w = m.dividend_times.shape[1]
                div_t[rows, :w], div_a[rows, :w] = m.dividend_times, m.dividend_amounts
            tables.append(m.table)
            offset += len(m.table)
        table = (pd.concat(tables, ignore_index=True) if tables and offset
                 else pd.DataFrame({c: [] for c in (tables[0].columns if tables else table_columns)}))
        return cls(T, spot, rate, q, fwd, group, error, table, div_t, div_a)
