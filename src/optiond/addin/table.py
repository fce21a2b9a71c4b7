"""The one table of optiond's Excel worksheet functions.

Everything Excel shows or needs about a function lives here, once: its name, category and
description, and for each argument its name, the text of Excel's function wizard, the batch
column it fills and its default. From this table:

* :func:`decorate` applies the xlwings decorators (``@xw.func``, ``@xw.arg``) to the Python
  implementations in :mod:`optiond.addin.functions`;
* :mod:`optiond.addin.generate` writes the VBA modules (the golden files in ``addin/vba/``)
  and renders the user documentation, and the installer checks a workbook against
  :data:`FUNCTIONS`.

Regenerate the golden files after editing the table::

    python -m optiond.addin.generate --write-vba

Limits that Excel imposes and :func:`check` enforces: descriptions and argument texts of at
most 255 characters, no argument named ``caller`` (xlwings injects the calling range under
that name), and optional arguments only after the required ones.

Work limits. A worksheet function runs while Excel waits, so one call (a cell, or a range
broadcast into one request) may ask for a bounded amount of work; over it, the cells get a
short text pointing to the panel and ``optiond price`` instead of a price. The limits are
the constants below (:data:`BOPM_MAX_TREE_NODES`, :data:`MLMC_MIN_EPS_REL`,
:data:`MLMC_MAX_PATH_STEPS`, :data:`HESTON_MAX_GRID_WORK`) and the estimates behind them are
the work model's (:mod:`optiond.costs`), read through :func:`bopm_tree_nodes`,
:func:`mlmc_path_steps` and :func:`heston_grid_work`. A row
whose own work is over the limit gets the text in its own cell; a call whose rows together
are over it gets the text in every cell it was to price.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

import numpy as np

from .. import costs
from ..kernels.spectral import MEASURED_ERROR
from ..models import ADI_SCHEMES, GREEK_FIELDS, MAX_DIVIDENDS, MAX_STEPS, MAX_VOLATILITY, PAYOFFS, SPECTRAL_ACCURACIES

#: the Excel function-wizard category of every optiond function
CATEGORY = "optiond"
#: the Python module Excel's VBA calls into (xlwings ``UDF_MODULES``)
UDF_MODULE = "optiond.addin.functions"
#: the add-in workbook that carries the VBA module (UDFs in an add-in address ActiveWorkbook)
ADDIN_WORKBOOK = "optiond.xlam"
#: Excel's limit on a description, an argument text, and a string in a cell
EXCEL_TEXT_LIMIT = 255
#: steps of the binomial tree where a function's N is optional
DEFAULT_STEPS = 1000

# ---- work limits per call (see the module docstring) ----------------------------------------

#: BOPM_*: tree nodes one call may ask for, summed over its options: (N+1)(N+2)/2 per tree,
#: times :data:`BOPM_GREEK_TREES` for BOPM_GREEKS and :data:`BOPM_IV_TREES` for BOPM_IV.
#: About 6 s on one CPU core (0.3 ns a node); N = 200,000 alone is the whole budget.
BOPM_MAX_TREE_NODES = 2e10
#: trees per option for BOPM_GREEKS (the price; a bumped pair each for vega and rho)
BOPM_GREEK_TREES = costs.GREEK_TREES
#: trees per option for BOPM_IV (root-finder steps, as the daemon counts them)
BOPM_IV_TREES = costs.IV_TREES
#: MLMC_*: the smallest target error a cell may ask for, relative to the payoff's scale: S for
#: the vanilla and Asian payoffs, the cash amount 1 for the digital (eps >= 1e-4 x S: one
#: cent on a spot of 100). MLMC work grows as 1/eps^2.
MLMC_MIN_EPS_REL = 1e-4
#: MLMC_*: the largest volatility the MLMC kernels take (the other functions take up to 10)
MLMC_MAX_VOLATILITY = 5.0
#: MLMC_*: estimated path steps (:func:`mlmc_path_steps`) one call may ask for, summed over
#: its options: at most about 15 s on two CPU cores (1e8 path steps/s measured there; the
#: estimate is an upper bound), well under a second on a GPU.
MLMC_MAX_PATH_STEPS = 2e9
#: MLMC estimate (:func:`optiond.costs.mlmc_path_steps_bound`): path steps per unit of payoff
#: variance over eps^2, and the least work of one option
MLMC_WORK_FACTOR = costs.MLMC_WORK_FACTOR
MLMC_MIN_PATH_STEPS = costs.MLMC_MIN_PATH_STEPS
#: HESTON_*: the ADI grid, (spot nodes, variance nodes), and time steps of every worksheet
#: Heston price (finer grids: the panel or ``optiond price --method adi``)
HESTON_GRID = (200, 100)
HESTON_TIME_STEPS = 100
#: HESTON_*: grid-cell updates one call may ask for, options x spot nodes x variance nodes x
#: time steps, summed over its options: 500 options on :data:`HESTON_GRID` (about 15 s on two
#: CPU cores, far less on a GPU)
HESTON_MAX_GRID_WORK = 1e9
#: AMERICAN_*: the spectral method's work one call may ask for, in the work model's tree-node
#: units (:data:`optiond.costs.SPECTRAL_WORK` an option and solve, by accuracy setting; a row
#: the engine sends to the CRR tree costs its tree: :func:`optiond.costs.spectral_work_rows`),
#: summed over its options: the BOPM_* budget, about 6 s on one CPU core (some 5,700 prices or
#: 380 implied volatilities at the default accuracy)
AMERICAN_MAX_WORK = BOPM_MAX_TREE_NODES
#: SURFACE_PRICE: CRR steps of an American price on a surface (the chain job's default, the
#: steps the fitted implied volatilities were solved with)
SURFACE_PRICE_STEPS = 500
#: where to go for work over these limits (the end of every over-the-limit message)
OVER_LIMIT_ADVICE = "use the optiond panel or optiond price"

class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


#: marks an argument without a default
REQUIRED: Any = _Required()


@dataclass(frozen=True)
class Arg:
    """One worksheet-function argument.

    Attributes:
        name: the argument name in Excel and in Python.
        doc: the function wizard's text for it (at most 255 characters).
        field: what it fills: a batch column of :mod:`optiond.models` (``spot``, ``strike``,
            ``expiry``, ``rate``, ``dividend_yield``, ``volatility``, ``kind``, ``style``, the
            Heston ``v0``, ``kappa``, ``long_run_variance``, ``xi``, ``correlation`` (the
            arguments keep the model's letters ``theta`` and ``rho``); the MLMC ``eps``, ``payoff``),
            ``steps`` (CRR steps), ``price`` (the option price of an implied volatility),
            ``seed`` (MLMC) or ``scheme`` (ADI), the last two settings of the request's
            :class:`optiond.models.Method`; ``call_price``, ``put_price`` (a strip's mids,
            PARITY_FORWARD); ``object`` (the name or handle of a surface kept in the daemon),
            ``chain``, ``quote_time``, ``settlement`` (a chain to fit, SURFACE_FIT and HESTON_FIT),
            ``feller`` (impose the Feller condition, HESTON_FIT);
            ``dividend_times``, ``dividend_amounts`` (a cash-dividend schedule, BOPM_*);
            ``tenors``, ``zero_rates``, ``ex_dates``, ``amounts`` (a curve's or a dividend
            schedule's cells, OPTIOND_CURVE and OPTIOND_DIVIDENDS);
            ``accuracy`` (the spectral setting, AMERICAN_*) and ``extrapolate`` (BBSR, BOPM_*),
            settings of the request's :class:`optiond.models.Method` like ``seed`` and ``scheme``.
        parse: how a cell is read: ``number``, ``kind`` ("put"/"call"), ``american``
            (TRUE/FALSE), ``payoff`` ("vanilla"/"digital"/"asian"), ``scheme`` (ADI scheme),
            ``flag`` (TRUE/FALSE, read as a bool), ``accuracy`` (a spectral setting, "fast",
            "accurate", "high-precision"), ``text`` (a name or handle of an object the daemon keeps), ``time`` (a quote time:
            "HH:MM", a time cell or an ISO 8601 timestamp), ``settlement`` ("am"/"pm"), or
            ``chain`` (a whole pasted chain with its header row, read as one table), or
            ``schedule`` (a row or column of up to :data:`~optiond.models.MAX_DIVIDENDS` numbers,
            blanks padding, read as ONE schedule for every option of the call: it does not
            broadcast against the other arguments; see :func:`optiond.addin.cells._schedule`),
            or ``values`` (a row or column read whole by :mod:`optiond.addin.objects`).
        default: the value an omitted argument or an empty cell takes; :data:`REQUIRED` when
            there is none (an empty cell is then an error); None where omitting it changes
            what is computed (PARITY_FORWARD's ``rate``).
    """

    name: str
    doc: str
    field: str
    parse: str = "number"
    default: Any = REQUIRED

    @property
    def optional(self) -> bool:
        return self.default is not REQUIRED

    def label(self) -> str:
        """The argument as Excel's signature line shows it: ``q`` or ``[q]``."""
        return f"[{self.name}]" if self.optional else self.name


@dataclass(frozen=True)
class Function:
    """One worksheet function.

    Attributes:
        name: the Excel name (also the Python name).
        description: the function wizard's description (at most 255 characters).
        args: the arguments, required first.
        op: ``price`` (a price per option), ``greeks`` (a row of :data:`GREEK_COLUMNS` per
            option), ``iv`` (an implied volatility per option), ``stderr`` (the standard
            error of an MLMC price per option), ``forward`` (one row of
            :data:`FORWARD_RESULT` for a whole strip of strikes, computed in this process),
            ``fit`` (a surface or, with method ``objects``, a Heston set fitted to a pasted chain:
            its handle), ``vol`` (a surface's
            volatility per point), ``make`` (a market object kept by name: its handle) or
            ``list`` (the live objects, a table).
        method: the :class:`optiond.models.Method` name: ``binomial``, ``black-scholes``,
            ``mlmc``, ``adi`` or ``spectral``; ``parity`` for the put-call parity fit of ``op="forward"``;
            ``surface`` for the functions on a surface the daemon keeps by name (``fit``,
            ``vol``, ``price``: :mod:`optiond.addin.surfaces`); ``objects`` for the functions
            that make, fit and list market objects (``make``, ``fit``, ``list``:
            :mod:`optiond.addin.objects`).
        fixed: batch columns the function fixes rather than reads (``kind``, ``style``,
            ``payoff``); ``object_kind`` of an ``objects`` function (``curve``, ``dividends``,
            ``heston``).
        returns: what a cell of the result holds, for the documentation.
        category: the function wizard's category.
    """

    name: str
    description: str
    args: tuple[Arg, ...]
    op: str
    method: str
    returns: str
    fixed: Mapping[str, Any] = field(default_factory=dict)
    category: str = CATEGORY

    @property
    def arg_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args)

    def signature(self) -> str:
        """``BOPM_PUT(S, K, T, r, sigma, N, [q], [american])``."""
        return f"{self.name}({', '.join(a.label() for a in self.args)})"


#: the columns of a BOPM_GREEKS or BS_GREEKS row, in order
GREEK_COLUMNS = GREEK_FIELDS
#: the row PARITY_FORWARD returns, in order
FORWARD_RESULT = ("forward", "discount factor")
#: PARITY_FORWARD: a pasted strip carries no quote spreads, so every strike weighs the same,
#: with the parity fit's Huber scale at this fraction of the median strike (residuals of
#: C - P past it count linearly, so one stale strike cannot drag the fit)
PARITY_SPREAD_REL = 1e-3

# ---- the arguments, shared by the functions that take them ---------------------------------

PRICE = Arg("price", "Market price of the option (> 0), in the currency of S. A cell or a range.", "price")
S = Arg("S", "Spot price of the underlying (> 0). A cell or a range: ranges broadcast against the other "
        "arguments and return a range of the same shape.", "spot")
K = Arg("K", "Strike price (> 0), in the currency of S. A column of strikes returns a column of results.",
        "strike")
#: how a date T is read (the function wizard's words; the rule is optiond.addin.dates')
DATE_RULE = ("or the expiry date (a date cell, or a number >= 1000: an Excel date; its 16:00 New York close), "
             "T then counting in minutes/525,600 from valuation")
T = Arg("T", f"Time to expiry in years (> 0), e.g. 0.25 for three months (ACT/365), {DATE_RULE}. Over 50 years: "
        "refused as days.", "expiry",
        parse="expiry")
VALUATION = Arg("valuation", "Optional. For a date T: when to value, a date (its 16:00 New York close) or a date "
                "and time (New York). Empty: now, to the minute. Must come before the expiry. Not used with a "
                "year-fraction T.", "valuation", parse="date", default=None)
#: the Greek units of a worksheet function whose units cell is empty: "raw", the engine's (per year,
#: per 1.00), as BOPM_GREEKS gave before it had the argument, so no existing sheet changes its numbers
DEFAULT_UNITS = "raw"
UNITS = Arg("units", 'Optional. "raw" (the default: theta per year, vega per 1.00 of volatility, rho and dividend rho '
            'per 1.00 of rate or yield) or "trader" (theta per calendar day, vega per volatility point, rho and '
            'dividend rho per 1%).', "units", parse="units", default=DEFAULT_UNITS)
HEADER = Arg("header", "Optional. TRUE for a first row naming each column with its unit; FALSE (the default) for "
             "the Greeks alone.", "header", parse="flag", default=False)
R = Arg("r", "Risk-free rate, annual and continuously compounded, as a decimal (0.05 = 5%; above 1 is refused as "
        "percent); or a curve's handle (OPTIOND_CURVE): each option's r is the curve's zero rate at its T.", "rate")
SIGMA = Arg("sigma", f"Volatility, annualised, as a decimal (0.2 = 20%); > 0 and <= {MAX_VOLATILITY:g} (above 5 is "
            "refused as vol points). Or a surface's "
            "handle (SURFACE_FIT): each option's volatility is the surface's at its K and T.", "volatility")
N = Arg("N", f"Steps of the binomial tree, a whole number from 1 to {MAX_STEPS:,}. More steps: more "
        "accurate and slower (time grows as N squared); 200 to 2000 is typical.", "steps")
N_OPT = Arg("N", f"Optional. Steps of the binomial tree, 1 to {MAX_STEPS:,}; default {DEFAULT_STEPS}. Time "
            "grows as N squared.", "steps", default=DEFAULT_STEPS)
Q = Arg("q", "Optional. Continuous dividend yield, annual, as a decimal (0.02 = 2%; above 1 is refused as percent); "
        "default 0.",
        "dividend_yield", default=0.0)
Q_CASH = Arg("q", "Optional. Continuous dividend yield, annual, as a decimal (0.02 = 2%; over 1: refused as %); "
             "default 0. Or a cash-dividend "
             "schedule's handle (OPTIOND_DIVIDENDS): each option gets its dividends from now to its T, on the CRR tree.",
             "dividend_yield", default=0.0)
AMERICAN = Arg("american", "Optional. TRUE for American exercise (the default), FALSE for European.",
               "style", parse="american", default=True)
DIV_TIMES = Arg("div_times", "Optional. Cash-dividend ex-dates in years from now (0.25 = in three months), ascending, "
                f"before T: a row or column of up to {MAX_DIVIDENDS} cells (blanks pad), one schedule for every option "
                "of the call. With div_amounts; spot model on the CRR tree.", "dividend_times", parse="schedule",
                default=None)
DIV_AMOUNTS = Arg("div_amounts", "Optional. The cash dividend of each div_times ex-date, in the currency of S (>= 0; "
                  f"together below S): a row or column of up to {MAX_DIVIDENDS} cells in the order of div_times. "
                  "Spot model on the CRR tree: S drops by the amount at each ex-date.", "dividend_amounts",
                  parse="schedule", default=None)
KIND = Arg("kind", 'Optional. "call" (the default) or "put".', "kind", parse="kind", default="call")
KIND_IV = Arg("kind", 'Optional. "call" or "put": the kind of the option whose price is given. Omitted or empty: '
              '"call" (give "put" for a put\'s price).', "kind", parse="kind", default="call")
ERROR_CELL = Arg("cell", 'A cell (or range) a function of optiond returned: its errors read "#optiond: <message>", '
                 "a short reason; this gives the message.", "cell", parse="values")
EXTRAPOLATE = Arg("extrapolate", "Optional. TRUE for the converged tree value (BBSR: Broadie-Detemple smoothing of the "
                  "last step, Richardson extrapolation over N and N/2 steps; 1.5 trees' work); FALSE (the default) "
                  "for the plain tree. Not with cash dividends.", "extrapolate", parse="flag", default=False)

# the spectral American engine (Andersen, Lake & Offengenden 2016)
#: the spectral accuracy setting a worksheet function takes when its cell is empty
DEFAULT_ACCURACY = "accurate"
ACCURACY = Arg("accuracy", "Optional. Spectral setting and its worst price error measured against QuantLib's QdFp "
               "high precision (strike 100): " + ", ".join(f'"{a}" {MEASURED_ERROR[a]:.2g}' for a in
                                                           SPECTRAL_ACCURACIES)
               + f'; default "{DEFAULT_ACCURACY}". Faster settings are coarser.', "accuracy", parse="accuracy",
               default=DEFAULT_ACCURACY)

# MLMC
SIGMA_MLMC = Arg("sigma", f"Volatility, annualised, as a decimal (0.2 = 20%); > 0 and <= {MLMC_MAX_VOLATILITY:g}.",
                 "volatility")
EPS = Arg("eps", "Target accuracy: root-mean-square error of the price, in the currency of S (0.01 = one cent); "
          f"> 0 and at least {MLMC_MIN_EPS_REL:g} x S. Halving eps takes about four times as long.", "eps")
EPS_DIGITAL = Arg("eps", "Target accuracy: root-mean-square error of the price (the digital pays 1), e.g. 0.001; > 0 "
                  f"and at least {MLMC_MIN_EPS_REL:g}. Halving eps takes about four times as long.", "eps")
EPS_ANY = Arg("eps", "The eps of the MLMC_ price whose standard error you want: target root-mean-square error, in "
              f"the currency of S (in units of the payout 1 for the digital); > 0, at least {MLMC_MIN_EPS_REL:g} x S "
              "(x 1 for the digital).", "eps")
SEED = Arg("seed", "Optional. Random seed, a whole number >= 0; default 0. The same inputs and seed give the same "
           "price at every recalculation; another seed gives an independent estimate.", "seed", default=0)
KIND_MLMC = Arg("kind", 'Optional. "call" (the default) or "put": the kind of the MLMC_ price.', "kind", parse="kind",
                default="call")
PAYOFF = Arg("payoff", 'Optional. The payoff of the MLMC_ price: "vanilla" (the default: MLMC_CALL, MLMC_PUT), '
             '"asian" (MLMC_ASIAN_CALL) or "digital" (MLMC_DIGITAL_CALL).', "payoff", parse="payoff",
             default="vanilla")

# Heston (ADI)
Q_REQ = Arg("q", "Continuous dividend yield, annual, as a decimal (0.02 = 2%); 0 for none.", "dividend_yield")
V0 = Arg("v0", "Heston initial variance (>= 0), annualised: today's volatility squared (0.04 = 20% volatility).",
         "v0")
V0_OR_SET = Arg("v0", "Heston initial variance (>= 0), annualised: today's volatility squared (0.04 = 20% volatility). "
                "Or a Heston set's handle (OPTIOND_HESTON), with kappa, theta, xi and rho left out.", "v0")
KAPPA = Arg("kappa", "Heston mean-reversion speed of the variance, per year (> 0), e.g. 1.5.", "kappa")
THETA = Arg("theta", "Heston long-run variance (>= 0), annualised (0.04 = 20% volatility). The variance stays off "
            "zero when 2 x kappa x theta >= xi^2 (Feller condition).", "long_run_variance")
XI = Arg("xi", "Heston volatility of the variance (vol of vol, > 0), e.g. 0.3.", "xi")
RHO = Arg("rho", "Heston correlation of the underlying with its variance, from -1 to 1; negative (e.g. -0.7) gives "
          "the equity skew.", "correlation")
#: HESTON_*: kappa...rho may be left out when v0 is a Heston set's handle (then they must be)
KAPPA_OPT, THETA_OPT, XI_OPT, RHO_OPT = (
    replace(a, default=None, doc="Optional with a Heston handle as v0, else required. " + a.doc)
    for a in (KAPPA, THETA, XI, RHO))
SCHEME = Arg("scheme", 'Optional. ADI time-stepping scheme of American rows: "mcs" (Modified Craig-Sneyd, the default), "hv" '
             '(Hundsdorfer-Verwer), "cs" (Craig-Sneyd) or "do" (Douglas).', "scheme", parse="scheme", default="mcs")

# put-call parity of a pasted strip
STRIKES = Arg("strikes", "Strikes of one expiry's European calls and puts (> 0): one row or one column. A strike whose "
              "call or put cell is empty is left out; the 20 strikes nearest the money enter the fit.", "strike")
CALL_MIDS = Arg("call_mids", "Call prices (mids) at those strikes, in the currency of the strikes: a row or column "
                "of the same length as strikes.", "call_price")
PUT_MIDS = Arg("put_mids", "Put prices (mids) at those strikes, in the currency of the strikes: a row or column of "
               "the same length as strikes.", "put_price")
T_STRIP = Arg("T", f"Time to expiry of the strip in years (> 0), e.g. 0.25 for three months, {DATE_RULE}.",
              "expiry", parse="expiry")
RATE_FIT = Arg("rate", "Optional. Risk-free rate, annual and continuously compounded (0.05 = 5%): the discount factor "
               "is exp(-rate x T) and only the forward is fitted. Omitted: forward and discount factor are both "
               "fitted (at least 3 strikes).", "rate", default=None)

# surfaces kept in the daemon by name
SURFACE_NAME = Arg("name", 'Name to keep the surface under in the optiond daemon, e.g. "SPY" (1 to 64 of A-Z a-z 0-9 '
                   '_ . : / -, case-sensitive). Fitting again under the name replaces the surface and bumps its '
                   'version.', "object", parse="text")
CHAIN_RANGE = Arg("chain_range", "The option chain pasted with its header row, the columns of a chain CSV: underlying, "
                  "quote_date, expiry, type, strike, bid, ask, last, implied_vol, underlying_price, style (quote_time, "
                  "settlement optional). Empty rows are skipped.", "chain", parse="chain")
QUOTE_TIME = Arg("quote_time", 'Optional. When the chain was quoted: "HH:MM" New York time on its quote date (e.g. '
                 '"10:50"), a time cell, or an ISO 8601 timestamp. Omitted: the 16:00 close.', "quote_time",
                 parse="time", default=None)
RATE_CHAIN = Arg("rate", "Optional. Risk-free rate, annual and continuously compounded (0.04 = 4%). Omitted: the "
                 "default of optiond chain. The forward and carry of each expiry come from the chain itself.", "rate",
                 default=None)
SETTLEMENT = Arg("settlement", 'Optional. "pm" (16:00) or "am" (09:30, AM-settled index series) for rows of the '
                 'chain without a settlement column. Omitted: "pm".', "settlement", parse="settlement", default=None)
SURFACE_REF = Arg("name", "The surface: the handle SURFACE_FIT returns (e.g. SPY#0002: refer to that cell, so this "
                  "one recalculates after a refit) or its name (SPY: the live version). The handle of a replaced "
                  "version is an error.", "object", parse="text")
K_SURFACE = Arg("K", "Strike (> 0), in the currency of the surface's underlying. A range returns a range of results, "
                "all from one daemon request.", "strike")
T_SURFACE = Arg("T", "Time to expiry in years (> 0), within the surface's first and last expiries (no extrapolation "
                "in time), or the expiry date (a date cell, or a number >= 1000; 16:00 New York) from valuation.",
                "expiry", parse="expiry")
KIND_SURFACE = Arg("kind", '"call" or "put".', "kind", parse="kind")

# market objects kept by name (optiond.addin.objects)
OBJECT_NAME = Arg("name", 'Name to keep the object under, e.g. "USD" (1 to 64 of A-Z a-z 0-9 _ . : / -, case-sensitive). '
                  "Making it again with other values bumps the version; with the same values the handle stays.",
                  "object", parse="text")
DAYS_OR_DATES = Arg("days_or_dates", "The curve's tenors: calendar days from today (30, 91, 365...) or dates, distinct: "
                    "a row or column.", "tenors", parse="values")
ZERO_RATES = Arg("rates", "Zero rate at each tenor, annual and continuously compounded, as a decimal (0.043 = 4.3%): a "
                 "row or column of the same length. Between tenors the log discount r x t is linear; flat beyond.",
                 "zero_rates", parse="values")
EX_DATES = Arg("ex_dates", "Ex-dividend dates (date cells) or years from now (0.25 = in three months), ascending: a row "
               "or column of up to 64. An option gets those from now to its T (at most 8).", "ex_dates", parse="values")
AMOUNTS = Arg("amounts", "Cash dividend at each ex-date, in the currency of the underlying (>= 0): a row or column of "
              "the same length.", "amounts", parse="values")
FELLER = Arg("feller", "Optional. TRUE to impose the Feller condition 2 x kappa x theta >= xi^2 (the variance stays off "
             "zero); FALSE (the default) fits freely. The summary in OPTIOND_OBJECTS says whether it holds.", "feller",
             parse="flag", default=False)

# ---- the functions -------------------------------------------------------------------------

FUNCTIONS: tuple[Function, ...] = (
    Function(
        "BOPM_PUT",
        "Put price on a Cox-Ross-Rubinstein binomial tree with N steps, American (default) or European, "
        "with a continuous dividend yield and optional cash dividends (div_times, div_amounts). Ranges in any "
        "argument return a range of prices.",
        (S, K, T, R, SIGMA, N, Q_CASH, AMERICAN, DIV_TIMES, DIV_AMOUNTS, EXTRAPOLATE, VALUATION), op="price", method="binomial", fixed={"kind": "put"},
        returns="the put price, in the currency of S"),
    Function(
        "BOPM_CALL",
        "Call price on a Cox-Ross-Rubinstein binomial tree with N steps, American (default) or European, "
        "with a continuous dividend yield and optional cash dividends (div_times, div_amounts). Ranges in any "
        "argument return a range of prices.",
        (S, K, T, R, SIGMA, N, Q_CASH, AMERICAN, DIV_TIMES, DIV_AMOUNTS, EXTRAPOLATE, VALUATION), op="price", method="binomial", fixed={"kind": "call"},
        returns="the call price, in the currency of S"),
    Function(
        "BS_PUT",
        "Black-Scholes-Merton price of a European put with a continuous dividend yield (closed form). "
        "Ranges in any argument return a range of prices.",
        (S, K, T, R, SIGMA, Q, VALUATION), op="price", method="black-scholes", fixed={"kind": "put", "style": "european"},
        returns="the put price, in the currency of S"),
    Function(
        "BS_CALL",
        "Black-Scholes-Merton price of a European call with a continuous dividend yield (closed form). "
        "Ranges in any argument return a range of prices.",
        (S, K, T, R, SIGMA, Q, VALUATION), op="price", method="black-scholes", fixed={"kind": "call", "style": "european"},
        returns="the call price, in the currency of S"),
    Function(
        "BS_IV",
        "Implied volatility of a European option from its price, on the Black-Scholes-Merton closed form with a "
        "continuous dividend yield (Newton on the normalised price, after Jaeckel's Let's be rational; to the last "
        "bits). Returns an annualised decimal.",
        (PRICE, S, K, T, R, Q, KIND_IV, VALUATION), op="iv", method="black-scholes", fixed={"style": "european"},
        returns="the implied volatility, an annualised decimal"),
    Function(
        "BS_GREEKS",
        "Black-Scholes-Merton Greeks of a European option (closed form), one row per option: delta, gamma, theta, "
        "vega, rho, dividend rho, in raw (per year, per 1.00; the default) or trader units (per day, vol point, 1%); "
        "optional header row.",
        (S, K, T, R, SIGMA, Q, KIND, VALUATION, UNITS, HEADER), op="greeks", method="black-scholes",
        fixed={"style": "european"}, returns="a row: " + ", ".join(GREEK_COLUMNS)),
    Function(
        "BOPM_IV",
        "Implied volatility of an option from its price, by a bracketed root find on the binomial tree "
        "price (American by default), optional cash dividends. Returns an annualised decimal (0.2 = 20%).",
        (PRICE, S, K, T, R, Q_CASH, KIND_IV, N_OPT, AMERICAN, DIV_TIMES, DIV_AMOUNTS, EXTRAPOLATE, VALUATION), op="iv", method="binomial",
        returns="the implied volatility, an annualised decimal"),
    Function(
        "BOPM_GREEKS",
        "Greeks from a binomial tree, one row per option: delta, gamma, theta, vega, rho, dividend rho, in raw "
        "(per year, per 1.00; the default) or trader units (per day, vol point, 1%); optional cash dividends and "
        "a header row.",
        (S, K, T, R, SIGMA, N, Q_CASH, KIND, AMERICAN, DIV_TIMES, DIV_AMOUNTS, EXTRAPOLATE, VALUATION, UNITS, HEADER),
        op="greeks", method="binomial",
        returns="a row: " + ", ".join(GREEK_COLUMNS)),
    Function(
        "AMERICAN_PUT",
        "American put price by the spectral method of Andersen, Lake & Offengenden (2016): the exercise boundary "
        "by fixed-point iteration on Chebyshev nodes. Continuous dividend yield. Ranges in any argument return a "
        "range of prices.",
        (S, K, T, R, SIGMA, Q_CASH, ACCURACY, VALUATION), op="price", method="spectral", fixed={"kind": "put", "style": "american"},
        returns="the American put price, in the currency of S"),
    Function(
        "AMERICAN_CALL",
        "American call price by the spectral method of Andersen, Lake & Offengenden (2016): the exercise boundary "
        "by fixed-point iteration on Chebyshev nodes. Continuous dividend yield. Ranges in any argument return a "
        "range of prices.",
        (S, K, T, R, SIGMA, Q_CASH, ACCURACY, VALUATION), op="price", method="spectral", fixed={"kind": "call", "style": "american"},
        returns="the American call price, in the currency of S"),
    Function(
        "AMERICAN_IV",
        "Implied volatility of an American option from its price, on the spectral price of Andersen, Lake & "
        "Offengenden (2016) (Newton with bisection). Returns an annualised decimal (0.2 = 20%).",
        (PRICE, S, K, T, R, Q_CASH, KIND_IV, ACCURACY, VALUATION), op="iv", method="spectral", fixed={"style": "american"},
        returns="the implied volatility, an annualised decimal"),
    Function(
        "MLMC_CALL",
        "European call by adaptive multilevel Monte Carlo (Giles; Milstein scheme, Black-Scholes dynamics) to a "
        "target RMS error eps. The same seed gives the same price. Its standard error: MLMC_STDERR.",
        (S, K, T, R, SIGMA_MLMC, EPS, Q, SEED, VALUATION), op="price", method="mlmc",
        fixed={"kind": "call", "style": "european", "payoff": "vanilla"},
        returns="the call price estimate, in the currency of S"),
    Function(
        "MLMC_PUT",
        "European put by adaptive multilevel Monte Carlo (Giles; Milstein scheme, Black-Scholes dynamics) to a "
        "target RMS error eps. The same seed gives the same price. Its standard error: MLMC_STDERR with kind \"put\".",
        (S, K, T, R, SIGMA_MLMC, EPS, Q, SEED, VALUATION), op="price", method="mlmc",
        fixed={"kind": "put", "style": "european", "payoff": "vanilla"},
        returns="the put price estimate, in the currency of S"),
    Function(
        "MLMC_ASIAN_CALL",
        "Arithmetic-average Asian call (payoff: average of S over [0, T], continuously monitored, minus K) by "
        "adaptive multilevel Monte Carlo to a target RMS error eps. Standard error: MLMC_STDERR, payoff \"asian\".",
        (S, K, T, R, SIGMA_MLMC, EPS, Q, SEED, VALUATION), op="price", method="mlmc",
        fixed={"kind": "call", "style": "european", "payoff": "asian"},
        returns="the Asian call price estimate, in the currency of S"),
    Function(
        "MLMC_DIGITAL_CALL",
        "Cash-or-nothing digital call paying 1 at T if S(T) > K, by adaptive multilevel Monte Carlo to a target RMS "
        "error eps. The same seed gives the same price. Standard error: MLMC_STDERR with payoff \"digital\".",
        (S, K, T, R, SIGMA_MLMC, EPS_DIGITAL, Q, SEED, VALUATION), op="price", method="mlmc",
        fixed={"kind": "call", "style": "european", "payoff": "digital"},
        returns="the digital call price estimate (a payout of 1, discounted)"),
    Function(
        "MLMC_STDERR",
        "Standard error of the multilevel Monte Carlo price that MLMC_CALL, MLMC_PUT, MLMC_ASIAN_CALL or "
        "MLMC_DIGITAL_CALL returns for the same arguments and seed: the same run, answered from the cache.",
        (S, K, T, R, SIGMA_MLMC, EPS_ANY, Q, SEED, KIND_MLMC, PAYOFF, VALUATION), op="stderr", method="mlmc",
        fixed={"style": "european"},
        returns="the standard error of the price estimate, in the currency of the price"),
    Function(
        "HESTON_CALL",
        f"Call price in the Heston stochastic-volatility model: American (default) by ADI finite differences "
        f"({HESTON_GRID[0]} x {HESTON_GRID[1]} grid, {HESTON_TIME_STEPS} steps), European by the semi-analytic "
        "formula (Lewis). Ranges return ranges.",
        (S, K, T, R, Q_REQ, V0_OR_SET, KAPPA_OPT, THETA_OPT, XI_OPT, RHO_OPT, AMERICAN, SCHEME, VALUATION),
        op="price", method="adi",
        fixed={"kind": "call"}, returns="the call price, in the currency of S"),
    Function(
        "HESTON_PUT",
        f"Put price in the Heston stochastic-volatility model: American (default) by ADI finite differences "
        f"({HESTON_GRID[0]} x {HESTON_GRID[1]} grid, {HESTON_TIME_STEPS} steps), European by the semi-analytic "
        "formula (Lewis). Ranges return ranges.",
        (S, K, T, R, Q_REQ, V0_OR_SET, KAPPA_OPT, THETA_OPT, XI_OPT, RHO_OPT, AMERICAN, SCHEME, VALUATION),
        op="price", method="adi",
        fixed={"kind": "put"}, returns="the put price, in the currency of S"),
    Function(
        "PARITY_FORWARD",
        "Forward and discount factor of one expiry from a strip of European call and put prices: a robust fit "
        "of put-call parity C - P = D (F - K), all strikes weighted equally. Returns a row: forward, discount factor.",
        (STRIKES, CALL_MIDS, PUT_MIDS, T_STRIP, RATE_FIT, VALUATION), op="forward", method="parity",
        returns="a row: " + ", ".join(FORWARD_RESULT) + " (the forward in the currency of the strikes)"),
    Function(
        "SURFACE_FIT",
        "Fits a volatility surface (one arbitrage-free SVI smile per expiry) to a pasted option chain in the optiond "
        "daemon and keeps it under name. Returns its handle, e.g. SPY#0002: each refit bumps the version, so cells "
        "that refer to this one recalculate.",
        (SURFACE_NAME, CHAIN_RANGE, QUOTE_TIME, RATE_CHAIN, SETTLEMENT), op="fit", method="surface",
        returns="the surface's handle, NAME#0003 (text)"),
    Function(
        "SURFACE_VOL",
        "Implied volatility (annualised decimal) of a surface the optiond daemon keeps, at strike K and time T. Give "
        "the SURFACE_FIT cell (its handle) as name so this recalculates after a refit. Ranges return a range.",
        (SURFACE_REF, K_SURFACE, T_SURFACE, VALUATION), op="vol", method="surface",
        returns="the surface's implied volatility, an annualised decimal"),
    Function(
        "SURFACE_PRICE",
        "Option price at a daemon surface's volatility at (K, T), on its forward and rate at T: closed form if "
        f"European, CRR tree ({SURFACE_PRICE_STEPS} steps) if American. Give the SURFACE_FIT cell as name so this recalculates after "
        "a refit.",
        (SURFACE_REF, K_SURFACE, T_SURFACE, KIND_SURFACE, AMERICAN, VALUATION), op="price", method="surface",
        returns="the option price, in the currency of the underlying"),
    Function(
        "OPTIOND_CURVE",
        "Keeps a zero-rate curve under name (in the optiond daemon, shared by every workbook; without one, in this "
        "Excel: NAME#0001@local). Returns its handle, e.g. USD#0003: give it as r to any pricing function.",
        (OBJECT_NAME, DAYS_OR_DATES, ZERO_RATES), op="make", method="objects", fixed={"object_kind": "curve"},
        returns="the curve's handle, NAME#0003 (text)"),
    Function(
        "OPTIOND_DIVIDENDS",
        "Keeps a cash-dividend schedule under name (in the optiond daemon; without one, in this Excel). Returns its "
        "handle, e.g. XYZ#0002: give it as q to BOPM_ and AMERICAN_ functions (spot model on the CRR tree).",
        (OBJECT_NAME, EX_DATES, AMOUNTS), op="make", method="objects", fixed={"object_kind": "dividends"},
        returns="the schedule's handle, NAME#0003 (text)"),
    Function(
        "OPTIOND_HESTON",
        "Keeps a Heston parameter set under name (in the optiond daemon; without one, in this Excel). Returns its "
        "handle, e.g. SPX-H#0001: give it as v0 to HESTON_CALL or HESTON_PUT and leave kappa...rho out.",
        (OBJECT_NAME, V0, KAPPA, THETA, XI, RHO), op="make", method="objects", fixed={"object_kind": "heston"},
        returns="the set's handle, NAME#0003 (text)"),
    Function(
        "HESTON_FIT",
        "Fits the European Heston model to a pasted European option chain (the chain job, then least squares on the "
        "out-of-the-money mids) and keeps the parameters under name (in the optiond daemon, or this Excel). Returns "
        "the handle: v0 of HESTON_CALL/PUT.",
        (OBJECT_NAME, CHAIN_RANGE, QUOTE_TIME, RATE_CHAIN, SETTLEMENT, FELLER), op="fit", method="objects",
        fixed={"object_kind": "heston"}, returns="the fitted set's handle, NAME#0003 (text)"),
    Function(
        "OPTIOND_OBJECTS",
        "Lists the live market objects: a header row, then one row per object: handle, kind, summary, created (UTC). "
        "The daemon's first, then this Excel's own (handles ending @local). Recalculate (F9) to refresh.",
        (), op="list", method="objects",
        returns="a table: " + ", ".join(("handle", "kind", "summary", "created"))),
    Function(
        "OPTIOND_ERROR",
        'The message of an optiond error cell (its text after "#optiond: "); an Excel error value\'s own text '
        '(#N/A...); "" for a cell that holds no error. =OPTIOND_ERROR(A1)="" tests a cell as IFERROR would.',
        (ERROR_CELL,), op="message", method="cells",
        returns='the message, or "" (text; a range gives a range)'),
)

BY_NAME: dict[str, Function] = {f.name: f for f in FUNCTIONS}

#: the xlwings converter options every argument is read with: always a 2-D list (so a row
#: and a column keep their orientation) with error cells as their text ("#N/A")
ARG_OPTIONS: Mapping[str, Any] = {"ndim": 2, "err_to_str": True}

_FIELDS = {"spot", "strike", "expiry", "rate", "dividend_yield", "volatility", "kind", "style", "steps", "price",
           "eps", "seed", "payoff", "scheme", "v0", "kappa", "long_run_variance", "xi", "correlation",
           "call_price", "put_price", "object", "chain", "quote_time", "settlement", "dividend_times",
           "dividend_amounts", "accuracy", "extrapolate", "valuation", "units", "header", "tenors", "zero_rates",
           "ex_dates", "amounts", "feller", "cell"}
#: the parse rules whose cells are numbers (a float64 column): T (years or a date serial) and a
#: valuation (a date serial, NaN for now) among them
NUMERIC_PARSES = ("number", "expiry", "date")
_PARSES = ("number", "expiry", "date", "units", "kind", "american", "flag", "accuracy", "payoff", "scheme", "text", "time", "settlement", "chain",
           "schedule", "values")
_OPS = ("price", "greeks", "iv", "stderr", "forward", "fit", "vol", "make", "list", "message")
_METHODS = ("binomial", "black-scholes", "mlmc", "adi", "spectral", "parity", "surface", "objects", "cells")
#: the values a ``payoff`` and a ``scheme`` cell may take
PAYOFF_NAMES = PAYOFFS
SCHEME_NAMES = ADI_SCHEMES
#: the values an ``accuracy`` cell may take (the spectral engine's settings)
ACCURACY_NAMES = SPECTRAL_ACCURACIES


def check(functions: tuple[Function, ...] = FUNCTIONS) -> None:
    """Check the table against Excel's and xlwings' rules.

    Raises:
        ValueError: a text over 255 characters, an argument named ``caller``, a required
            argument after an optional one, an unknown field or parse rule, a duplicate, or a
            cash-dividend schedule that is not the pair (times, amounts) of a binomial function.
    """
    seen = set()
    for f in functions:
        if f.name in seen or not f.name.isidentifier():
            raise ValueError(f"{f.name}: duplicate or invalid function name")
        seen.add(f.name)
        if len(f.description) > EXCEL_TEXT_LIMIT:
            raise ValueError(f"{f.name}: description longer than {EXCEL_TEXT_LIMIT} characters")
        if f.op not in _OPS or f.method not in _METHODS or (f.op == "stderr" and f.method != "mlmc") or \
                ((f.op == "forward") != (f.method == "parity")) or \
                (f.method == "surface" and f.op not in ("fit", "vol", "price")) or \
                (f.op == "vol" and f.method != "surface") or \
                (f.op == "fit" and f.method not in ("surface", "objects")) or \
                (f.method == "objects" and f.op not in ("make", "list", "fit")) or \
                (f.op in ("make", "list") and f.method != "objects") or \
                ((f.op == "message") != (f.method == "cells")):
            raise ValueError(f"{f.name}: unknown op {f.op!r} or method {f.method!r}")
        optional = False
        for a in f.args:
            if a.name == "caller":
                raise ValueError(f"{f.name}: 'caller' is reserved by xlwings")
            if len(a.doc) > EXCEL_TEXT_LIMIT:
                raise ValueError(f"{f.name}({a.name}): text longer than {EXCEL_TEXT_LIMIT} characters")
            if a.field not in _FIELDS or a.parse not in _PARSES:
                raise ValueError(f"{f.name}({a.name}): unknown field {a.field!r} or parse {a.parse!r}")
            if optional and not a.optional:
                raise ValueError(f"{f.name}({a.name}): required argument after an optional one")
            optional = optional or a.optional
        if len(set(f.arg_names)) != len(f.args):
            raise ValueError(f"{f.name}: duplicate argument names")
        schedule = [a.field for a in f.args if a.parse == "schedule"]
        if schedule and (schedule != ["dividend_times", "dividend_amounts"] or f.method != "binomial"):
            raise ValueError(f"{f.name}: a cash-dividend schedule is the pair dividend_times, dividend_amounts "
                             "of a binomial function")


check()


# ---- work estimates behind the limits --------------------------------------------------------

def bopm_tree_nodes(steps: Any, op: str = "price") -> np.ndarray:
    """Tree nodes per option of a BOPM_ call (:func:`optiond.costs.tree_work_rows`):
    ``(N+1)(N+2)/2`` per tree, times :data:`BOPM_GREEK_TREES` (``op="greeks"``) or
    :data:`BOPM_IV_TREES` (``op="iv"``)."""
    return costs.tree_work_rows(steps, op == "greeks", "implied_vol" if op == "iv" else "price")


def american_work(accuracy: Any, op: str = "price") -> np.ndarray:
    """Work per option of an AMERICAN_ call that the ALO engine prices, in tree-node units: the
    spectral engine's work model (:data:`optiond.costs.SPECTRAL_WORK` of the row's accuracy
    setting, times :data:`optiond.costs.SPECTRAL_SOLVES` of a price or an implied volatility);
    arrays of setting names broadcast. The call's limit costs each row by the engine that
    prices it (:func:`optiond.costs.spectral_work_rows`: rows sent to the tree at its cost)."""
    solves = costs.SPECTRAL_SOLVES["implied_vol" if op == "iv" else "price"]
    per = np.vectorize(lambda a: costs.SPECTRAL_WORK[a], otypes=[np.float64])(np.asarray(accuracy, dtype=object))
    return per * solves


#: estimated path steps of an adaptive MLMC price (an upper bound; arrays broadcast)
mlmc_path_steps = costs.mlmc_path_steps_bound


def heston_grid_work(options: int, grid: tuple[int, int] = HESTON_GRID, time_steps: int = HESTON_TIME_STEPS) -> float:
    """Grid-cell updates of ``options`` Heston prices: options x spot nodes x variance nodes x
    time steps (:func:`optiond.costs.adi_grid_work`)."""
    return float(options) * costs.adi_grid_work(grid, time_steps)[1]


def decorate(spec: Function, impl: Callable, *, func: Callable, arg: Callable) -> Callable:
    """Turn ``impl`` into the worksheet function ``spec``, the xlwings way.

    ``impl`` must take exactly the table's arguments, in order, with ``None`` as the default of
    every optional one (the table holds the real defaults; an omitted argument and an empty
    cell take the same path). Its docstring becomes the table's description, which is what
    xlwings shows in the function wizard.

    Args:
        spec: the table entry.
        impl: the Python function, named ``spec.name``.
        func, arg: ``xlwings.func`` and ``xlwings.arg`` (or xlwings' own ``udfs.xlfunc`` /
            ``udfs.xlarg`` when writing the VBA module).

    Raises:
        TypeError: ``impl``'s signature disagrees with the table.
    """
    import inspect

    params = list(inspect.signature(impl).parameters.values())
    names = tuple(p.name for p in params)
    if impl.__name__ != spec.name or names != spec.arg_names:
        raise TypeError(f"{impl.__name__}{names} does not match the table's {spec.signature()}")
    for p, a in zip(params, spec.args):
        want = None if a.optional else inspect.Parameter.empty
        if p.default is not want or p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD or \
                p.annotation is not inspect.Parameter.empty:
            raise TypeError(f"{spec.name}({a.name}): expected a plain positional argument "
                            f"{'defaulting to None' if a.optional else 'without a default'}")
    impl.__doc__ = spec.description
    for a in reversed(spec.args):
        impl = arg(a.name, doc=a.doc, **ARG_OPTIONS)(impl)
    return func(category=spec.category)(impl)


if __name__ == "__main__":  # the generator's old command (now optiond.addin.generate), kept for one release
    import runpy
    import warnings

    warnings.warn("python -m optiond.addin.table moved to python -m optiond.addin.generate; the old command goes "
                  "in the next release", DeprecationWarning)
    runpy.run_module("optiond.addin.generate", run_name="__main__", alter_sys=True)
