"""The panel's logic without Qt: reading the daemon's state, and running a batch in chunks.

Everything here talks to the daemon through :class:`optiond.daemon.client.Client` only and
runs on worker threads (never on the GUI thread).

* :func:`read_state` polls the daemon (``status`` on its control channel, which answers while
  the shell channel is busy pricing) and this machine's GPUs (NVML), and turns both into the
  texts the Status tab shows. Fields the daemon does not report (yet) read ``"n/a"``.
* :func:`run_batch` prices a chain CSV (the chain job, :func:`optiond.chain.price_chain`) or a
  portfolio CSV (``Client.price_table``) in chunks sized to about half a second of daemon
  work each, so progress moves and Cancel takes effect between chunks whatever the steps.
  Partial results are kept when a run is cancelled or fails. A chain priced to the end then
  gets its volatility surface and theo columns (:func:`fit_chain_surface`, the code path of
  ``optiond chain --surface``).

Richer daemon features are used when present, found by feature detection rather than
version numbers: a ``cancel(job_id)`` method on the client (and a ``job_id`` argument on its
pricing calls), and extra ``status`` keys (see :data:`STATUS_KEYS`).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import pandas as pd

from .. import chain as chain_job
from ..commands.pricing import surface_outputs
from ..dividends import read_dividend_file
from ..models import GREEK_FIELDS, Method, Result
from ..pricer import (PORTFOLIO_COLUMNS, Cancelled, DaemonPricer, merge_portfolio, portfolio_frame, price_portfolio,
                      result_column)
from . import devices

NA = "n/a"

#: the status keys the panel reads beyond today's (``version``, ``pid``, ``uptime_s``,
#: ``devices``, ``requests_served``, ``errors``, ``endpoint``), each with the names it
#: accepts, first match wins; ``a.b`` is key ``b`` of the map under ``a``. Values may be
#: numbers, strings, lists or small maps (e.g. ``cache: {hits, misses, hit_ratio}``,
#: ``mpi: {ranks, workers_alive}``, ``gpu_memory: [{device, used, total}]``).
STATUS_KEYS: dict[str, tuple[str, ...]] = {
    "queue_depth": ("queue_depth", "jobs.queue_depth", "queue", "pending"),
    "cache_hit_ratio": ("cache", "cache_hit_ratio"),
    "mpi_ranks": ("mpi", "mpi_workers_alive", "workers_alive", "mpi_ranks"),
    "cpu_threads": ("cpu_threads", "threads", "numba_threads"),
    "gpu_memory": ("gpu_memory", "gpu_memory_bytes"),
    "cuda_version": ("cuda_version", "cuda"),
    "cupy_version": ("cupy_version", "cupy"),
    "methods": ("methods", "models"),
}

#: shortest reply timeout of a batch request once a chunk has been timed (seconds)
MIN_REQUEST_TIMEOUT_S = 30.0

#: the portfolio CSV columns the panel needs (of :data:`optiond.pricer.PORTFOLIO_COLUMNS`, as
#: ``optiond price``)
PORTFOLIO_REQUIRED = ("kind", "spot", "strike", "expiry", "rate", "volatility")


# ---------------------------------------------------------------------------- formatting


def format_duration(seconds: float | None) -> str:
    """``3 d 04:05:06`` / ``04:05:06``-style text for a number of seconds; ``n/a`` for None."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return NA
    s = int(seconds)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return (f"{d} d " if d else "") + f"{h:02d}:{m:02d}:{s:02d}"


def _ratio_text(value: Any) -> str:
    """A hit ratio as a percentage: a number in [0, 1], or a dict with ``hit_ratio`` or
    ``hits``/``misses``."""
    if isinstance(value, Mapping):
        hits, misses = value.get("hits"), value.get("misses")
        if isinstance(hits, (int, float)) and isinstance(misses, (int, float)):
            total = hits + misses
            return f"{100.0 * hits / total:.1f} % ({int(hits)} of {int(total)})" if total else "no lookups yet"
        return _ratio_text(value.get("hit_ratio"))
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return f"{100.0 * value:.1f} %"
    return NA


def _count_text(value: Any) -> str:
    """A count: a number, a list (its length) or a dict with ``alive``/``total`` or ``depth``."""
    if isinstance(value, bool) or value is None:
        return NA
    if isinstance(value, (int, float)):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return str(len(value))
    if isinstance(value, Mapping):
        alive, total = value.get("alive"), value.get("total", value.get("size"))
        if alive is not None and total is not None:
            return f"{alive} of {total}"
        for k in ("alive", "depth", "count", "n"):
            if k in value:
                return _count_text(value[k])
    return str(value) if isinstance(value, str) and value else NA


def _mpi_text(value: Any) -> str:
    """MPI ranks alive: ``{ranks, workers_alive}`` (rank 0, the front end, answers, so it
    is alive) as "alive of ranks", or a plain count."""
    if isinstance(value, Mapping) and "ranks" in value and "workers_alive" in value:
        ranks, alive = value["ranks"], value["workers_alive"]
        if isinstance(ranks, int) and isinstance(alive, int):
            return f"{alive + 1} of {ranks}" + (" (no MPI pool)" if ranks <= 1 else "")
    return _count_text(value)


def _memory_text(value: Any) -> str:
    """GPU memory as the daemon reports it: bytes, ``{used, total}``, or a list of those."""
    if isinstance(value, (list, tuple)):
        parts = [_memory_text(v) for v in value]
        return "; ".join(p for p in parts if p != NA) or NA
    if isinstance(value, Mapping):
        used = value.get("used", value.get("used_bytes", value.get("allocated")))
        total = value.get("total", value.get("total_bytes"))
        if used is None:
            return NA
        text = devices.format_bytes(int(used)) + (f" / {devices.format_bytes(int(total))}" if total else "")
        label = value.get("device", value.get("name"))
        return f"{label}: {text}" if label else text
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return devices.format_bytes(int(value))
    return NA


def _plain_text(value: Any) -> str:
    if value is None or value == "" or value == [] or value == {}:
        return NA
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


def lookup(status: Mapping[str, Any], key: str) -> Any:
    """The first of ``STATUS_KEYS[key]``'s names present in ``status`` (None if none)."""
    for name in STATUS_KEYS.get(key, (key,)):
        value: Any = status
        for part in name.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        if value is not None:
            return value
    return None


# ---------------------------------------------------------------------------- daemon state


@dataclass
class DaemonState:
    """One reading of the daemon and this machine's GPUs.

    ``up`` says whether the daemon answered; ``reason`` why not. ``status`` is the daemon's
    ``status`` reply as it came; :meth:`fields` turns it into display texts.
    """

    up: bool
    reason: str = ""
    status: dict = field(default_factory=dict)
    round_trip_s: float | None = None
    gpus: devices.GpuSnapshot = field(default_factory=devices.GpuSnapshot)
    cupy_local: str | None = None
    checked_at: float = field(default_factory=time.time)

    def fields(self) -> dict[str, str]:
        """Display text for every field of the Status tab, ``n/a`` where not reported."""
        st = self.status if self.up else {}
        out = {
            "state": "Daemon up" if self.up else "Daemon down",
            "version": _plain_text(st.get("version")),
            "pid": _plain_text(st.get("pid")),
            "uptime": format_duration(st.get("uptime_s")) if "uptime_s" in st else NA,
            "endpoint": _plain_text(st.get("endpoint")),
            "connection_file": _plain_text(st.get("connection_file")),
            "engine_devices": _plain_text(st.get("devices")),
            "requests": _plain_text(st.get("requests_served")),
            "errors": _plain_text(st.get("errors")),
            "heartbeat": f"{1000 * self.round_trip_s:.2f} ms" if (self.up and self.round_trip_s is not None) else NA,
            "queue_depth": _count_text(lookup(st, "queue_depth")),
            "cache_hit_ratio": _ratio_text(lookup(st, "cache_hit_ratio")),
            "mpi_ranks": _mpi_text(lookup(st, "mpi_ranks")),
            "cpu_threads": _count_text(lookup(st, "cpu_threads")),
            "gpu_memory": _memory_text(lookup(st, "gpu_memory")),
        }
        cuda = lookup(st, "cuda_version")
        if cuda is None and self.gpus.driver_cuda:
            cuda = f"{self.gpus.driver_cuda} (driver)"
        out["cuda_version"] = _plain_text(cuda)
        out["cupy_version"] = _plain_text(lookup(st, "cupy_version") or self.cupy_local)
        out["gpu_summary"] = (f"{len(self.gpus.gpus)} GPU{'s' if len(self.gpus.gpus) > 1 else ''}" if self.gpus.gpus
                              else f"No GPU ({self.gpus.reason})" if self.gpus.reason else "No GPU")
        return out

    def methods(self) -> tuple[str, ...]:
        """The pricing methods the daemon's engine supports: its ``methods`` status key when it
        reports one, else this installation's :data:`optiond.models.METHODS` (the daemon the
        panel starts runs the same installation)."""
        reported = lookup(self.status, "methods") if self.up else None
        if isinstance(reported, (list, tuple)) and reported:
            return tuple(str(m) for m in reported)
        from .. import models

        return tuple(models.METHODS)


def read_state(client, *, timeout: float = 1.0, read_gpus: bool = True, cupy_local: str | None = None) -> DaemonState:
    """Ask the daemon for its status (control channel) and NVML for the GPUs.

    Args:
        client: an :class:`optiond.daemon.client.Client` (short timeout, no retries).
        timeout: seconds to wait for the status reply.
        read_gpus: also read NVML.
        cupy_local: the CuPy version installed here, shown when the daemon reports none.

    Returns:
        A :class:`DaemonState`; never raises for a daemon that is down.
    """
    from ..daemon.client import DaemonError, DaemonUnavailable

    gpus = devices.read_gpus() if read_gpus else devices.GpuSnapshot(reason="not read")
    t0 = time.perf_counter()
    try:
        st = client.status(timeout=timeout)
    except (DaemonUnavailable, DaemonError) as e:
        return DaemonState(False, str(e), gpus=gpus, cupy_local=cupy_local)
    return DaemonState(True, "", dict(st), time.perf_counter() - t0, gpus, cupy_local)


# ---------------------------------------------------------------------------- models offered


@dataclass(frozen=True)
class ModelChoice:
    """A model the Batch tab offers: its key, label, the engine method names that provide
    it, and what it needs."""

    key: str
    label: str
    engine_names: tuple[str, ...]
    note: str = ""


MODELS = (
    ModelChoice("binomial", "Binomial (CRR tree)", ("binomial",),
                "CRR tree for American contracts, Black-Scholes-Merton closed form for European ones"),
    ModelChoice("mlmc", "MLMC (multilevel Monte Carlo)", ("mlmc",),
                "European-style payoffs only: price the SPX chain or European portfolio rows; American rows are "
                "reported as errors. Implied vols come from the tree / closed form; MLMC reprices at that vol"),
    ModelChoice("heston-adi", "Heston ADI (finite differences)", ("heston-adi", "heston", "adi"),
                "Heston PDE by ADI finite differences"),
)


def model_availability(methods: Iterable[str]) -> dict[str, tuple[str | None, str]]:
    """For each of :data:`MODELS`: the engine method name to use (None when the engine has
    none yet) and a tooltip saying so."""
    have = {str(m).lower() for m in methods}
    out = {}
    for m in MODELS:
        name = next((n for n in m.engine_names if n in have), None)
        tip = m.note if name else f"{m.label}: not available in this engine yet (it offers {', '.join(sorted(have))})"
        out[m.key] = (name, tip)
    return out


# ---------------------------------------------------------------------------- batch jobs


@dataclass
class BatchSettings:
    """What the Batch tab sends: the model (a :data:`MODELS` key and its engine method name),
    CRR ``steps``, MLMC target error ``eps`` (currency units) and ``device``; for chains only
    (a portfolio carries its own market) the market set-up of
    :func:`optiond.chain.solve_market`: flat ``rate`` (annual decimal), ``carry``
    (``"parity"``: forward and carry per expiry from the chain; ``"flat"``: ``rate`` and
    ``dividend_yield`` as given), ``dividend_yield`` (annual decimal, the carry of
    ``carry="flat"``) and ``quote_time`` (``HH:MM`` New York time or ISO 8601 of the
    snapshot; blank: the 16:00 close of the quote date); ``fit_surface``: fit the volatility
    surface and add the theo columns once the chain is priced (:func:`fit_chain_surface`);
    ``dividend_file``: a chain's cash dividends, an ``ex_date,amount`` CSV ("" for none), read
    by :meth:`check` into ``dividends`` (:func:`optiond.dividends.read_dividend_file`) and
    passed to :func:`optiond.chain.solve_market` as ``optiond chain --dividends`` passes it
    (each contract's tree gets the dividends ex before its expiry; the carry is the residual
    borrow on top of them, and the forward table gains ``pv_dividends``)."""

    model: str = "binomial"
    engine_name: str = "binomial"
    steps: int = chain_job.DEFAULT_STEPS
    rate: float = chain_job.DEFAULT_RATE
    dividend_yield: float = chain_job.DEFAULT_DIVIDEND_YIELD
    eps: float = 0.01
    device: str = "auto"
    carry: str = "parity"
    quote_time: str = ""
    fit_surface: bool = True
    dividend_file: str = ""
    dividends: pd.DataFrame | None = None

    def check(self) -> None:
        """Check a chain run's settings and read its dividend file (once, into ``dividends``).

        Raises:
            ValueError: an unknown carry mode, a quote time that does not parse, or a dividend
                file that cannot be read or has a bad row (one line naming the file, row and
                field)."""
        chain_job.check_market_args(carry=self.carry, quote_time=self.quote_time.strip() or None)
        if self.dividend_file and self.dividends is None:
            self.dividends = read_dividend_file(self.dividend_file)


@dataclass(frozen=True)
class RequestTiming:
    """One request the panel sent: when (epoch s), which operation and method, the device
    that priced it, rows, the round trip as the panel saw it and the daemon's own time."""

    at: float
    op: str
    method: str
    device: str
    rows: int
    wall_s: float
    server_s: float | None = None


def make_method(**kw: Any) -> Method:
    """A :class:`Method` from keyword arguments, dropping those this version's Method lacks
    (so the panel runs against engines with and without MLMC/ADI settings)."""
    names = {f.name for f in dataclasses.fields(Method)}
    return Method(**{k: v for k, v in kw.items() if k in names})


class PanelPricer(DaemonPricer):
    """The daemon pricer (:class:`optiond.pricer.DaemonPricer`) as the panel runs it, for one
    batch run.

    Before every request it checks the cancel flag (raising :class:`Cancelled`, which is
    :class:`optiond.pricer.Cancelled`), it swaps in the chosen model and device, times each
    request (``on_request``), names its requests by :attr:`job_id` (when the client takes one,
    so :meth:`cancel_remote` can drop the one in flight), and never falls back to in-process
    pricing: the panel prices on the daemon or says why it could not. Implied-vol replies that
    do not say which device priced them are labelled with the last device a reply named,
    ``device_hint`` until one does (the daemon's only device, or the one asked for).
    """

    def __init__(self, client, settings: BatchSettings, cancel: threading.Event,
                 on_request: Callable[[RequestTiming], None] | None = None, timeout: float | None = None,
                 device_hint: str = "daemon"):
        from ..daemon.client import DaemonError

        super().__init__(client, False, timeout=timeout, job_id=uuid.uuid4().hex, cancel=cancel, dropped=(DaemonError,),
                         method_for=self._model_method, on_reply=self._timed, device_hint=device_hint)
        self.settings = settings
        self.on_request = on_request

    def _model_method(self, method: Method, op: str) -> Method:
        """The price requests in the chosen model; implied vols from the tree or closed form
        (whatever the model); the chosen device for both."""
        s = self.settings
        if op == "price" and s.model != "binomial" and s.engine_name:
            return make_method(name=s.engine_name, steps=method.steps, eps=s.eps, device=s.device,
                               greeks=s.model == "heston-adi")
        return dataclasses.replace(method, device=s.device)

    def _timed(self, op: str, method: Method, rows: int, wall_s: float, out: Any) -> None:
        if self.on_request:
            server = out.elapsed_s if isinstance(out, Result) else None
            self.on_request(RequestTiming(time.time(), op, method.name, self.device, rows, wall_s, server))


class ChunkSizer:
    """Chunk sizes that keep each request near ``target_s`` seconds: start small, then follow
    the measured rows per second (so a 20,000-step tree gets chunks of a few rows and a
    500-step one chunks of hundreds)."""

    def __init__(self, first: int = 4, target_s: float = 0.5, smallest: int = 1, largest: int = 2048):
        self.size, self.target_s, self.smallest, self.largest = first, target_s, smallest, largest
        self.rate: float | None = None  # rows per second of the last chunk

    def expected_s(self) -> float | None:
        """Expected seconds of the next chunk (None before the first one)."""
        return None if not self.rate else self.size / self.rate

    def update(self, rows: int, seconds: float) -> None:
        """Record that ``rows`` took ``seconds``; the next size aims at ``target_s``."""
        if rows <= 0:
            return
        rate = self.rate = rows / max(seconds, 1e-3)
        # at most 4x growth per chunk: one cheap chunk (all no-bid rows) must not make a huge next one
        self.size = int(min(self.largest, max(self.smallest, min(4 * self.size, rate * self.target_s))))


@dataclass
class BatchOutcome:
    """How a batch run ended. ``df`` holds the rows finished (all of them unless cancelled or
    failed), input columns first, then the results. ``forwards``: a chain's per-expiry market
    table (:data:`optiond.chain.FORWARD_COLUMNS`, the call-put residual over the rows
    finished), None for a portfolio or when the market solve did not finish.

    ``surface``: the chain's fitted volatility surface (:class:`optiond.surface.model.Surface`)
    when every row was priced and the fit succeeded (``df`` then also has the theo columns of
    :data:`optiond.surface.theo.THEO_COLUMNS`), else None; ``surface_error``: why a fit that was
    tried gave none; ``surface_s``: seconds the fit and the theo pricing took (not counted in
    ``elapsed_s``, the pricing's time)."""

    path: str
    kind: str
    model: str
    total: int
    done: int
    df: pd.DataFrame
    elapsed_s: float
    device: str = ""
    cancelled: bool = False
    error: str = ""
    forwards: pd.DataFrame | None = None
    surface: Any = None
    surface_error: str = ""
    surface_s: float = 0.0

    @property
    def finished(self) -> bool:
        """Every row was priced (not cancelled, no error)."""
        return not self.cancelled and not self.error and self.done == self.total

    @property
    def by_status(self) -> dict[str, int]:
        """Rows by status."""
        if "status" not in self.df:
            return {}
        return {str(k): int(v) for k, v in self.df["status"].value_counts().items()}

    @property
    def throughput(self) -> float:
        """Rows per second (NaN before any row finished)."""
        return self.done / self.elapsed_s if self.elapsed_s > 0 and self.done else float("nan")

    def summary(self) -> str:
        """One line for the status label and the log."""
        ok = self.by_status.get("ok", 0)
        head = ("Cancelled" if self.cancelled else "Failed" if self.error else "Done")
        text = (f"{head}: {self.done:,} of {self.total:,} rows priced ({ok:,} ok) in {self.elapsed_s:.2f} s"
                + (f", {self.throughput:,.0f} rows/s" if self.done else "") + (f" on {self.device}" if self.device else ""))
        text += f" - {self.error}" if self.error else ""
        if self.surface is not None:
            text += f"; surface: {len(self.surface.slices)} expiries fitted in {self.surface_s:.2f} s"
        elif self.surface_error:
            text += f"; no surface: {self.surface_error}"
        return text


def bundled_data_dir() -> Path | None:
    """The folder of the bundled real chains (``examples/data``) beside the source tree or in
    the working directory, or None."""
    here = Path(__file__).resolve()
    for cand in (here.parents[3] / "examples" / "data", Path.cwd() / "examples" / "data"):
        if cand.is_dir():
            return cand
    return None


def bundled_files() -> list[Path]:
    """The bundled chain CSVs, sorted by name."""
    d = bundled_data_dir()
    return sorted(d.glob("*.csv")) if d else []


def load_table(path: str | Path) -> tuple[pd.DataFrame, str]:
    """Read a chain or portfolio CSV.

    Returns:
        ``(df, kind)`` with kind ``"chain"`` (the columns of ``examples/data``) or
        ``"portfolio"`` (``kind, spot, strike, expiry, rate, volatility`` and optional
        ``style, dividend_yield, method, steps``).

    Raises:
        ValueError: neither kind (naming the missing columns); OSError: unreadable.
    """
    df = pd.read_csv(path)
    if all(c in df.columns for c in chain_job.CHAIN_COLUMNS):
        return df, "chain"
    if all(c in df.columns for c in PORTFOLIO_REQUIRED):
        return df, "portfolio"
    missing = [c for c in PORTFOLIO_REQUIRED if c not in df.columns]
    raise ValueError(f"{Path(path).name} is neither an option chain (columns {', '.join(chain_job.CHAIN_COLUMNS)}) "
                     f"nor a portfolio (missing {', '.join(missing)})")


def _price_chain_part(part: pd.DataFrame, pricer: PanelPricer, s: BatchSettings,
                      market: chain_job.ChainMarket) -> pd.DataFrame:
    """Price one part of a chain on the market solved for the whole chain (``market`` holds
    the part's rows, :meth:`optiond.chain.ChainMarket.take`)."""
    out, _ = chain_job.price_chain(part, pricer, steps=s.steps, market=market, chunk=max(1, len(part)), finish=False)
    out["model_minus_mid"] = out["model_price"] - out["mid"]
    return out


def _price_portfolio_part(part: pd.DataFrame, pricer: PanelPricer, s: BatchSettings, market: None = None) -> pd.DataFrame:
    """Price one part of a portfolio: its contract and market columns (the model, steps and
    MLMC target error are the settings'), joined to the part as ``optiond price`` joins them
    (:func:`optiond.pricer.merge_portfolio`; a Heston file's earlier ``theta`` / ``rho`` columns
    renamed first, :func:`optiond.pricer.portfolio_frame`)."""
    part = portfolio_frame(part)
    # a dividends column's schedules go with their rows (years from now; a cell with ex-dates
    # needs a valuation date, which the panel does not take: those rows say so)
    res = price_portfolio(pricer, part, make_method(name="binomial", steps=s.steps), columns=PORTFOLIO_COLUMNS)
    return merge_portfolio(part, res)


def run_batch(df: pd.DataFrame, kind: str, client, settings: BatchSettings, *, cancel: threading.Event,
              progress: Callable[[int, int], None] | None = None,
              on_request: Callable[[RequestTiming], None] | None = None, path: str = "",
              sizer: ChunkSizer | None = None, pricer_out: list | None = None,
              device_hint: str = "daemon", stage: Callable[[str], None] | None = None) -> BatchOutcome:
    """Price a chain or portfolio on the daemon in chunks, checking ``cancel`` between them.

    A chain's forwards and carry need the whole chain: its market
    (:func:`optiond.chain.solve_market`, with ``settings``' rate, carry, dividend yield, quote
    time and cash dividends; the carry solve's implied volatilities on the daemon) is solved
    once first,
    then each chunk is priced on its rows of it, and at the end the smile IVs and the
    per-expiry call-put residuals are computed over all the rows finished
    (:func:`optiond.chain.finish_chain`).

    Args:
        df, kind: as :func:`load_table` returns them.
        client: the daemon client (used by a :class:`PanelPricer`).
        settings: model and its settings.
        cancel: set it to stop; the request in flight finishes (or the daemon drops it, when
            it can cancel) and the rows done so far are returned.
        progress: called with ``(rows done, rows in all)`` after each chunk.
        on_request: called with a :class:`RequestTiming` after each request.
        path: the file's path, for the record.
        sizer: chunk sizing (default :class:`ChunkSizer`).
        pricer_out: if given, the :class:`PanelPricer` is appended as soon as it exists (so
            the caller can ask the daemon to cancel its request in flight).
        device_hint: the device named in request timings until a reply names one.
        stage: called with a line saying what the run does now (the chain's market solve,
            the pricing, the surface fit), for the status line.

    A chain whose rows were all priced is then fitted when ``settings.fit_surface`` says so
    (:func:`fit_chain_surface`: the surface and the theo columns, their prices on the daemon);
    a fit that fails leaves the priced rows as they are and says why in the outcome's
    ``surface_error``.

    Returns:
        A :class:`BatchOutcome`; errors (daemon down, invalid file, a quote time that does
        not parse) end up in ``error`` with the rows finished before them.
    """
    pricer = PanelPricer(client, settings, cancel, on_request, device_hint=device_hint)
    if pricer_out is not None:
        pricer_out.append(pricer)
    part_fn = _price_chain_part if kind == "chain" else _price_portfolio_part
    sizer = sizer or ChunkSizer()
    total, done, parts = len(df), 0, []
    error, cancelled = "", False
    market: chain_job.ChainMarket | None = None
    t0 = time.perf_counter()
    if progress:
        progress(0, total)
    if kind == "chain" and total:
        if stage:
            stage(f"Solving the forward and carry of each expiry ({settings.carry}) on the daemon…")
        try:
            settings.check()
            market = chain_job.solve_market(df, pricer, rate=settings.rate, dividend_yield=settings.dividend_yield,
                                            carry=settings.carry, quote_time=settings.quote_time.strip() or None,
                                            steps=settings.steps, dividends=settings.dividends)
        except Cancelled:
            cancelled = True
        except Exception as e:  # noqa: BLE001 (daemon down, bad quote time...: reported)
            error = f"{type(e).__name__}: {e}"
    if stage and not (cancelled or error):
        stage("Pricing on the daemon…")
    while done < total and not (cancelled or error):
        if cancel.is_set():
            cancelled = True
            break
        part = df.iloc[done:done + sizer.size]
        expected = sizer.expected_s()
        # the reply timeout bounds how long a dead daemon goes unnoticed: the client's own for
        # the first chunk (nothing measured yet), then ten times the expected time (>= 30 s)
        pricer.timeout = None if expected is None else max(MIN_REQUEST_TIMEOUT_S, 10.0 * expected)
        t = time.perf_counter()
        try:
            parts.append(part_fn(part, pricer, settings,
                                 None if market is None else market.take(np.arange(done, done + len(part)))))
        except Cancelled:
            cancelled = True
            break
        except Exception as e:  # noqa: BLE001 (daemon down, invalid table...: reported, rows so far kept)
            error = f"{type(e).__name__}: {e}"
            break
        sizer.update(len(part), time.perf_counter() - t)
        done += len(part)
        if progress:
            progress(done, total)
    out = pd.concat(parts) if parts else _empty_result(df, kind)
    forwards = None
    if market is not None:
        chain_job.finish_chain(out, market.take(np.arange(done)))
        forwards = market.table
    devs = [d for d in out.get("device", pd.Series(dtype=object)).astype(str).unique() if d]
    elapsed = time.perf_counter() - t0
    outcome = BatchOutcome(path, kind, settings.model, total, done, out, elapsed,
                           ", ".join(devs) or (pricer.device if done else ""), cancelled, error, forwards)
    if settings.fit_surface and kind == "chain" and total and done == total and not (cancelled or error):
        if stage:
            stage("Fitting the volatility surface (one SVI smile per expiry), then pricing the theo values on the "
                  "daemon…")
        # the theo prices are the tree / closed form at the fitted vol whatever the model (as
        # optiond chain --surface prices them), on the chosen device, cancellable like the rest
        theo = PanelPricer(client, dataclasses.replace(settings, model="binomial", engine_name="binomial"), cancel,
                           on_request, timeout=max(MIN_REQUEST_TIMEOUT_S, 10.0 * elapsed),
                           device_hint=pricer.device)
        if pricer_out is not None:
            pricer_out.append(theo)
        t = time.perf_counter()
        divs = None  # the theo with the rows' cash dividends, as the chain priced them
        if market is not None and market.dividend_times is not None:
            divs = (market.dividend_times[:done], market.dividend_amounts[:done])
        outcome.df, outcome.surface, outcome.surface_error = fit_chain_surface(out, theo, settings.steps, divs)
        outcome.surface_s = time.perf_counter() - t
    return outcome


def fit_chain_surface(out: pd.DataFrame, pricer: Any, steps: int,
                      dividends: tuple | None = None) -> tuple[pd.DataFrame, Any, str]:
    """Fit a priced chain's volatility surface and add its theo columns, as ``optiond chain
    --surface`` does (:func:`optiond.commands.pricing.surface_outputs`: one arbitrage-free
    raw-SVI slice per expiry, then ``iv_fit``, ``theo``, ``edge`` and ``theo_<greek>`` priced on
    ``pricer`` with CRR ``steps`` and the rows' cash ``dividends``, ``(dividend_times,
    dividend_amounts)`` (n, m), when the chain has a dividend file); never raises.

    Returns:
        ``(out with the theo columns, the surface, "")``, or ``(out as given, None, reason)``
        when the fit or the theo pricing fails (``"cancelled"`` when the run's cancel flag
        stopped it).
    """
    try:
        with_theo, surface, _ = surface_outputs(out, pricer, steps=steps, surface_path=None, plot_dir=None,
                                                dividends=dividends)
    except Cancelled:
        return out, None, "cancelled"
    except Exception as e:  # noqa: BLE001 (no usable expiry, daemon down...: reported, the priced rows kept)
        return out, None, f"{type(e).__name__}: {' '.join(str(e).split())}"
    return with_theo, surface, ""


def _empty_result(df: pd.DataFrame, kind: str) -> pd.DataFrame:
    out = df.iloc[:0].copy()
    extra = ([*chain_job.OUTPUT_COLUMNS, "model_minus_mid"] if kind == "chain"
             else ["price", *GREEK_FIELDS, "status", "error", "device", "method"])
    for c in extra:  # a portfolio's result columns named as merge_portfolio names them
        out[c if kind == "chain" or c == "method" else result_column(c, df.columns)] = pd.Series(
            dtype=object if c in ("status", "error", "device", "method") else float)
    return out


# ---------------------------------------------------------------------------- smile


def expiries(df: pd.DataFrame) -> list[tuple[str, int]]:
    """The chain's expiries with the number of rows that have an implied vol, in date order."""
    if "expiry" not in df or "iv" not in df:
        return []
    has = df.assign(_ok=np.isfinite(pd.to_numeric(df["iv"], errors="coerce")))
    counts = has.groupby("expiry", sort=True)["_ok"].sum()
    return [(str(k), int(v)) for k, v in counts.items()]


@dataclass
class Smile:
    """One expiry's smile, one point per strike, sorted by strike (arrays of shape (m,)):
    ``strike``, ``log_moneyness`` ln(K/F), ``iv`` (the chain's ``iv_otm``: the mid IV of
    the strike's out-of-the-money side, the call for K >= F and the put for K < F),
    ``iv_bid`` and ``iv_ask`` (the IVs of that same row's bid and ask, NaN where the quote
    has none); ``forward`` (the expiry's forward, NaN when unknown); ``quoted``: the file's
    ``implied_vol`` where given, ``(strikes, vols)``. Volatilities are annual decimals."""

    expiry: str
    forward: float
    strike: np.ndarray
    log_moneyness: np.ndarray
    iv: np.ndarray
    iv_bid: np.ndarray
    iv_ask: np.ndarray
    quoted: tuple[np.ndarray, np.ndarray] = (np.empty(0), np.empty(0))


def _numbers(df: pd.DataFrame, column: str) -> np.ndarray:
    if column not in df:
        return np.full(len(df), np.nan)
    return pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=np.float64)


def smile(df: pd.DataFrame, expiry: str) -> Smile:
    """The smile of one expiry of a priced chain (:func:`optiond.chain.price_chain`'s
    columns ``expiry, type, strike, forward, iv_bid, iv_otm, iv_ask``, and the file's
    ``implied_vol`` when present): see :class:`Smile`. An expiry without a solved smile IV
    gives empty arrays."""
    sub = df[df["expiry"].astype(str) == str(expiry)]
    strike, fwd, otm = _numbers(sub, "strike"), _numbers(sub, "forward"), _numbers(sub, "iv_otm")
    kind = sub["type"].astype(str).str.strip().str.lower().to_numpy(dtype=object) if "type" in sub else \
        np.full(len(sub), "", dtype=object)
    with np.errstate(invalid="ignore"):
        own = (kind == np.where(strike >= fwd, "call", "put")) & np.isfinite(otm) & np.isfinite(fwd)
    rows = np.flatnonzero(own)
    rows = rows[np.argsort(strike[rows], kind="stable")]
    forward = float(np.nanmedian(fwd)) if np.isfinite(fwd).any() else math.nan
    quoted = (np.empty(0), np.empty(0))
    if "implied_vol" in sub:
        qv = _numbers(sub, "implied_vol")
        has = np.flatnonzero(np.isfinite(qv))
        has = has[np.argsort(strike[has], kind="stable")]
        quoted = (strike[has], qv[has])
    k = strike[rows]
    return Smile(str(expiry), forward, k, np.log(k / fwd[rows]), otm[rows], _numbers(sub, "iv_bid")[rows],
                 _numbers(sub, "iv_ask")[rows], quoted)


#: the per-expiry forward table as the Batch tab shows it: (column of
#: :data:`optiond.chain.FORWARD_COLUMNS`, header, scale); ``pv_dividends`` only in a run with
#: a dividend file
FORWARD_VIEW = (("underlying", "underlying", None), ("expiry", "expiry", None), ("settlement", "set.", None), ("T", "T (y)", None), ("spot", "spot", None),
                ("rate", "rate (%)", 100.0), ("discount_factor", "D", None), ("pv_dividends", "PV divs", None),
                ("forward", "forward", None),
                ("carry", "carry (%)", 100.0), ("method", "method", None), ("pairs", "pairs", None),
                ("call_minus_put_iv_pts", "call−put IV (pts)", None), ("note", "note", None))


def forward_view(forwards: pd.DataFrame | None) -> pd.DataFrame:
    """The per-expiry market table (:data:`optiond.chain.FORWARD_COLUMNS`) for display:
    the columns of :data:`FORWARD_VIEW` it has, rate and carry in percent; empty for None
    (without ``pv_dividends``)."""
    if forwards is None:
        return pd.DataFrame({c: [] for c, _, _ in FORWARD_VIEW if c != "pv_dividends"})
    return pd.DataFrame({c: forwards[c] * scale if scale else forwards[c] for c, _, scale in FORWARD_VIEW
                         if c in forwards})
