"""The pricer: one interface to price a table and solve implied volatilities, in this process or
on the daemon, and the portfolio table's columns and merge.

Every front end prices through it: the chain job (:mod:`optiond.chain`), ``optiond price`` and
``optiond chain`` (:mod:`optiond.commands.pricing`), the panel (:mod:`optiond.gui.backend`) and
the Excel functions (:mod:`optiond.addin.pricing`).

* :class:`Pricer`: the interface, two calls: ``price_table(columns, method) ->``
  :class:`~optiond.models.Result` and ``implied_vol(prices, columns, method) ->``
  :class:`~optiond.models.ImpliedVol` (which unpacks as the earlier ``(vol, status)`` pair).
* :class:`LocalPricer`: :mod:`optiond.engine` in this process.
* :class:`DaemonPricer`: the daemon client (:class:`optiond.daemon.client.Client`, public
  calls only). With ``fallback`` the client prices in this process when no daemon answers
  (``Result.via == "in-process"``); without it that raises
  :class:`~optiond.daemon.client.DaemonUnavailable`. The front ends differ only in its
  settings: ``optiond price``/``chain`` fall back unless ``--daemon-only`` and send a chain in
  one request (:meth:`DaemonPricer.price_chain`); the Excel functions fall back unless
  ``OPTIOND_FALLBACK=0``; the panel never falls back, checks a cancel flag before each request
  (:class:`Cancelled`), names its requests by a job id the daemon can cancel, swaps in the
  model it runs and times each request (``method_for``, ``on_reply``).
* :data:`PORTFOLIO_COLUMNS`, :data:`OPTIONAL_COLUMNS`, :func:`portfolio_request` and
  :func:`merge_portfolio`: a portfolio table (``optiond price``'s file, the panel's
  portfolio) in, the same table with the priced columns out.

Layering: above :mod:`optiond.engine` (imported only when something prices in this process)
and beside :mod:`optiond.chain` (which imports it). It imports nothing of :mod:`optiond.daemon`:
the front end hands :class:`DaemonPricer` its client, and the errors that mean the daemon
dropped a cancelled request (``dropped``).
"""

from __future__ import annotations

import inspect
import threading
import time
from typing import Any, Callable, Iterable, Mapping, Protocol

import numpy as np
import pandas as pd

from . import runctl
from .models import (CONTRACT_FIELDS, HESTON_FIELDS, HESTON_RENAMED, MARKET_FIELDS, ImpliedVol, Method, Result,
                     heston_columns)

#: the device of an implied-vol answer that does not name one (the earlier ``(vol, status)`` pair)
UNKNOWN_DEVICE = "unknown"


class Pricer(Protocol):
    """What the front ends need from a pricer: the engine's two table calls, in this process or
    on the daemon."""

    def price_table(self, columns: Mapping[str, Any], method: Method | None = None) -> Result: ...

    def implied_vol(self, prices: Any, columns: Mapping[str, Any], method: Method | None = None) -> ImpliedVol: ...


def implied_vol_result(answer: Any, *, via: str, device: str = UNKNOWN_DEVICE) -> ImpliedVol:
    """An implied-vol answer as an :class:`~optiond.models.ImpliedVol`: one as it is (with its
    own device and via); a pricer's earlier ``(vol, status)`` pair split by
    :meth:`ImpliedVol.from_status_text`, with ``device`` and ``via`` as given."""
    if isinstance(answer, ImpliedVol):
        return answer
    vol, text = answer
    return ImpliedVol.from_status_text(vol, text, device=device, via=via)


class LocalPricer:
    """:mod:`optiond.engine` in this process behind the :class:`Pricer` interface. Each call
    is a safe point of a controlled run (:func:`optiond.runctl.check`: a daemon's chain request
    whose client is gone stops there, :class:`optiond.runctl.Cancelled`)."""

    via = "in-process"

    def price_table(self, columns: Mapping[str, Any], method: Method | None = None) -> Result:
        from . import engine  # the kernels (numba) load only where something prices in this process

        runctl.check()
        return engine.price_table(columns, method)

    def implied_vol(self, prices: Any, columns: Mapping[str, Any], method: Method | None = None) -> ImpliedVol:
        from . import engine

        runctl.check()
        return implied_vol_result(engine.implied_vol_table(prices, columns, method), via=self.via)


class Cancelled(Exception):
    """The caller set the pricer's cancel flag: the request was not sent, or the daemon dropped
    it because it was asked to."""


def _accepts(fn: Callable, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _rows(columns: Mapping[str, Any]) -> int:
    return max((np.size(v) for v in columns.values() if not isinstance(v, str)), default=1)


class DaemonPricer:
    """The daemon client behind the :class:`Pricer` interface (see the module docstring for
    what each front end sets).

    Args:
        client: the :class:`optiond.daemon.client.Client` (usually the process-wide
            :func:`~optiond.daemon.client.get_client`), or anything with its calls.
        fallback: price in this process when no daemon answers (the client's ``fallback``).
        force: bypass the daemon's reply cache (benchmarks).
        timeout: seconds per request (None: the client's own); an attribute a caller may change
            between requests.
        job_id: the name of every request, sent when the client's ``price_table`` takes a
            ``job_id`` (then :meth:`cancel_remote` can ask the daemon to drop the one in flight).
        cancel: a flag checked before each request: set, the request raises :class:`Cancelled`.
        dropped: the errors that, raised once ``cancel`` is set, mean the daemon dropped the
            request as asked (:class:`~optiond.daemon.client.DaemonError`): :class:`Cancelled`
            instead.
        method_for: ``(method, op) -> method`` sent instead of ``method`` (``op`` ``"price"``
            or ``"implied vol"``; ``method`` a default :class:`Method` where None was given).
        on_reply: called after each reply with ``(op, method sent, rows, seconds, answer)``.
        device_hint: :attr:`device` until a reply names its device.

    :attr:`device` is the device of the last reply that named one.
    """

    via = "daemon"

    def __init__(self, client: Any, fallback: bool = True, force: bool = False, *, timeout: float | None = None,
                 job_id: str | None = None, cancel: threading.Event | None = None,
                 dropped: tuple[type[BaseException], ...] = (),
                 method_for: Callable[[Method, str], Method] | None = None,
                 on_reply: Callable[[str, Method | None, int, float, Any], None] | None = None,
                 device_hint: str = "daemon"):
        self.client = client
        self.fallback, self.force, self.timeout = fallback, force, timeout
        self.job_id = job_id
        self.cancel_event, self.dropped = cancel, dropped
        self.method_for = method_for
        self.on_reply = on_reply
        self.device = device_hint
        self._with_job_id = job_id is not None and _accepts(client.price_table, "job_id")

    @property
    def can_cancel_remote(self) -> bool:
        """Whether the daemon can cancel this pricer's request in flight (its requests carry a
        job id and the client has ``cancel``)."""
        return self._with_job_id and callable(getattr(self.client, "cancel", None))

    def cancel_remote(self) -> None:
        """Ask the daemon to drop this pricer's request in flight, when it can (errors ignored)."""
        if self.can_cancel_remote:
            try:
                self.client.cancel(self.job_id)
            except Exception:  # noqa: BLE001 (best effort: the cancel flag stops the next request anyway)
                pass

    def _kw(self, job: bool = True) -> dict:
        """The client call's options: only those set, so a client without them is called as it
        takes them."""
        kw: dict[str, Any] = {"fallback": self.fallback}
        if self.force:
            kw["force"] = True
        if self.timeout is not None:
            kw["timeout"] = self.timeout
        if job and self._with_job_id:
            kw["job_id"] = self.job_id
        return kw

    def _call(self, op: str, method: Method | None, columns: Mapping[str, Any], send: Callable[[], Any]) -> Any:
        cancel = self.cancel_event
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        t0 = time.perf_counter()
        try:
            out = send()
        except self.dropped:
            if cancel is not None and cancel.is_set():  # the daemon dropped it because we asked
                raise Cancelled() from None
            raise
        wall = time.perf_counter() - t0
        if isinstance(out, Result) or (isinstance(out, ImpliedVol) and out.device != UNKNOWN_DEVICE):
            self.device = out.device
        if self.on_reply is not None:
            self.on_reply(op, method, _rows(columns), wall, out)
        return out

    def _method(self, method: Method | None, op: str) -> Method | None:
        return method if self.method_for is None else self.method_for(method or Method(), op)

    def price_table(self, columns: Mapping[str, Any], method: Method | None = None, **options: Any) -> Result:
        """:meth:`optiond.daemon.client.Client.price_table` (``options``: its ``as_job``,
        ``on_progress``, ...)."""
        m = self._method(method, "price")
        kw = self._kw() | options
        return self._call("price", m, columns, lambda: self.client.price_table(columns, m, **kw))

    def implied_vol(self, prices: Any, columns: Mapping[str, Any], method: Method | None = None,
                    **options: Any) -> ImpliedVol:
        """:meth:`optiond.daemon.client.Client.implied_vol` as an :class:`ImpliedVol` (an answer
        in the earlier ``(vol, status)`` pair: device ``"unknown"``, via this pricer's)."""
        m = self._method(method, "implied vol")
        kw = self._kw() | options
        return self._call("implied vol", m, columns,
                          lambda: implied_vol_result(self.client.implied_vol(prices, columns, m, **kw), via=self.via))

    def price_chain(self, df: pd.DataFrame, **market: Any) -> tuple[pd.DataFrame, Any]:
        """The whole chain job on the daemon in one request
        (:meth:`optiond.daemon.client.Client.price_chain`; no hooks)."""
        return self.client.price_chain(df, **self._kw(job=False), **market)


# ---------------------------------------------------------------------------- portfolio tables

#: portfolio table columns (``optiond price``, the panel's portfolios), in the order read
PORTFOLIO_COLUMNS = CONTRACT_FIELDS + MARKET_FIELDS + ("method", "steps")
#: optional per-row columns of other methods: MLMC target error and payoff; Heston parameters
OPTIONAL_COLUMNS = ("eps", "payoff") + HESTON_FIELDS


def portfolio_frame(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with a Heston portfolio's earlier column names ``theta`` and ``rho`` renamed to
    ``long_run_variance`` and ``correlation`` (:func:`optiond.models.heston_columns`, with its
    DeprecationWarning; ``attrs["renamed_columns"]`` says which), so that the Greeks theta and
    rho can sit beside them; ``df`` itself when there is nothing to rename."""
    names = list(df.columns)
    kept = heston_columns(dict.fromkeys(names))
    renamed = {old: new for old, new in HESTON_RENAMED.items() if old in names and old not in kept}
    if not renamed:
        return df
    out = df.rename(columns=renamed)
    out.attrs["renamed_columns"] = renamed  # for a front end to tell its user
    return out


def portfolio_request(df: pd.DataFrame, columns: Iterable[str] = PORTFOLIO_COLUMNS + OPTIONAL_COLUMNS) -> dict:
    """The request columns of a portfolio table: those of ``columns`` it has, as arrays."""
    return {c: df[c].to_numpy() for c in columns if c in df.columns}


def price_portfolio(pricer: Pricer, df: pd.DataFrame, method: Method | None = None, *,
                    columns: Iterable[str] = PORTFOLIO_COLUMNS + OPTIONAL_COLUMNS, valuation: Any = None,
                    **options: Any) -> Result:
    """Price a portfolio table on ``pricer``: :func:`portfolio_request` of ``columns``, with
    the cash-dividend schedules of its ``dividends`` column when it has one
    (:func:`optiond.dividends.schedule_columns`: ``years:amount;...`` or
    ``YYYY-MM-DD:amount;...``, ex-dates read against ``valuation``).

    Args:
        pricer: a :class:`Pricer`; ``options`` go to its ``price_table`` (the daemon pricer's
            ``as_job``, ``on_progress``).
        df: the portfolio, one row per option.
        method: how to price.
        valuation: the valuation instant of the ex-dates: a UTC :class:`pandas.Timestamp`, or
            text for :func:`optiond.dividends.valuation_instant`; None: cells with ex-dates are
            errors of their rows.

    Returns:
        The :class:`~optiond.models.Result` of every row, in order, with ``method`` set: what
        priced each row (:func:`optiond.engine.row_methods`: ``auto`` resolved, the spectral
        method's closed-form and tree rows named as such; ``""`` on a row not priced); a row
        whose ``dividends`` cell does not parse has status ``error`` and a reason naming the
        field (the others are priced).

    Raises:
        ValueError: ``valuation`` text that does not parse.
    """
    from . import dividends

    cols = portfolio_request(df, columns)
    errors = []
    if dividends.DIVIDENDS_COLUMN in df.columns:
        when = dividends.valuation_instant(valuation) if isinstance(valuation, str) else valuation
        cols["dividend_times"], cols["dividend_amounts"], errors = dividends.schedule_columns(
            df[dividends.DIVIDENDS_COLUMN].tolist(), when)
    res = pricer.price_table(cols, method, **options) if options else pricer.price_table(cols, method)
    from . import engine  # the same choice the engine makes, wherever the rows were priced

    res.method = np.where(res.ok, engine.row_methods(cols, method), "").astype(object)
    if errors:
        res.mark_error([e.row for e in errors], [e.message for e in errors])
    return res


def methods_text(methods: Any, accuracy: str) -> str:
    """What priced the rows, in one line: each method with its row count, most rows first, the
    spectral method with its accuracy setting (``"methods: spectral 5210 (accuracy fast),
    black-scholes 12"``); ``methods`` the per-row names (``""``: not priced, not counted)."""
    names, counts = np.unique(np.asarray([m for m in np.asarray(methods, dtype=object).tolist() if m], dtype=object)
                              .astype(str), return_counts=True)
    parts = [f"{m} {c}" + (f" (accuracy {accuracy})" if m == "spectral" else "")
             for c, m in sorted(zip(counts.tolist(), names.tolist()), key=lambda cm: (-cm[0], cm[1]))]
    return "methods: " + (", ".join(parts) if parts else "none")


def result_column(name: str, inputs: Iterable[str]) -> str:
    """The output name of the result column ``name`` beside the input columns ``inputs``:
    ``model_<name>`` where an input column has that name (an input ``price`` column, say,
    is kept as it is), else ``name``."""
    return f"model_{name}" if name in inputs else name


def merge_portfolio(df: pd.DataFrame, res: Result) -> pd.DataFrame:
    """``df`` (every input column and row, in order) with ``res``'s columns appended (price, the
    Greeks, ``std_error`` when there is one, status, error, device, ``method`` when set), each
    named by :func:`result_column`. ``method`` is the one result written over an input column
    of that name (a request, blank for the default): on each priced row it says what priced it,
    on the others the input's cell stays."""
    out = df.copy()
    for k, v in res.columns().items():
        if k == "method" and k in df.columns:
            v = np.where(v != "", v, df[k].to_numpy(dtype=object))
            out[k] = v
            continue
        out[result_column(k, df.columns)] = v
    return out
