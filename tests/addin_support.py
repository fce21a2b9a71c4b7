"""Shared pieces of the Excel-function tests: an in-process stand-in for the daemon client that
counts requests, the cache reset, and small cell helpers. Imported by test_addin*.py (pytest
registers the imported fixtures in each importing module)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from optiond import engine
from optiond.daemon.client import DaemonUnavailable
from optiond.addin import functions as F
from optiond.addin import objects, pricing

#: Excel's limit on a string in a cell
LIMIT = 255


class CountingClient:
    """The daemon client's API, in-process, recording each request's size and method."""

    def __init__(self):
        self.calls: list[tuple[str, int]] = []
        self.methods: list = []

    @staticmethod
    def _n(columns) -> int:
        return max([np.size(v) for v in columns.values()] + [1])

    def price_table(self, columns, method=None, **kw):
        self.calls.append(("price_table", self._n(columns)))
        self.methods.append(method)
        res = engine.price_table(columns, method)
        res.via = "in-process"
        return res

    def implied_vol(self, prices, columns, method=None, **kw):
        self.calls.append(("implied_vol", np.size(prices)))
        self.methods.append(method)
        return engine.implied_vol_table(prices, columns, method)

    # no daemon behind the stand-in: named objects are this process's own (optiond.addin.objects)
    def _no_daemon(self, *a, **kw):
        raise DaemonUnavailable("the in-process stand-in keeps no objects")

    put_object = get_object = objects = _no_daemon


@pytest.fixture(autouse=True)
def _fresh_cache(monkeypatch):
    monkeypatch.delenv("OPTIOND_CACHE", raising=False)
    monkeypatch.delenv("OPTIOND_FALLBACK", raising=False)
    monkeypatch.delenv("OPTIOND_UNITS_CHECK", raising=False)  # the unit guards on
    # every request goes to the client (the daemon, or the counting stand-in): the tests of
    # the local pricing of small requests set OPTIOND_LOCAL_NODES themselves
    monkeypatch.setenv("OPTIOND_LOCAL_NODES", "0")
    F.clear_cache()
    objects.forget()
    yield
    F.clear_cache()
    objects.forget()


@pytest.fixture
def no_daemon(monkeypatch, tmp_path):
    """No daemon answers (a connection file that does not exist): objects are the add-in's own."""
    monkeypatch.setenv("OPTIOND_CONNECTION_FILE", str(tmp_path / "none.json"))
    objects.forget()
    yield
    objects.forget()


@pytest.fixture
def with_daemon(daemon, monkeypatch):
    """The session's daemon, with no in-process fall-back (a cell that fell back would not say
    so) and its objects read afresh at every look-up (another client's bump seen at once)."""
    monkeypatch.setenv("OPTIOND_FALLBACK", "0")
    monkeypatch.setattr(objects, "REFRESH_S", 0.0)
    objects.forget()
    yield daemon
    objects.forget()


@pytest.fixture
def client(monkeypatch) -> CountingClient:
    c = CountingClient()
    monkeypatch.setattr(pricing, "_client", lambda: c)
    return c


def is_error(x) -> bool:
    """A short optiond error text, as a cell shows it."""
    return isinstance(x, str) and x.startswith("#optiond: ") and len(x) <= LIMIT


def col(values) -> list[list]:
    """A column range, as xlwings passes it."""
    return [[v] for v in values]


def as_range(df) -> list[list]:
    """A chain as Excel hands a pasted range over: a header row, then a row per contract with
    empty cells as None and the dates as date cells."""
    rows = df.astype(object).where(df.notna(), None)
    for c in ("quote_date", "expiry"):
        rows[c] = [dt.datetime.fromisoformat(v) for v in rows[c]]
    return [list(df.columns)] + rows.values.tolist()
