"""The one table of optiond's Excel worksheet functions.

Everything Excel shows or needs about a function lives here, once: its name, category and
description, and for each argument its name, the text of Excel's function wizard, the batch
column it fills and its default. From this table:

* :func:`decorate` applies the xlwings decorators (``@xw.func``, ``@xw.arg``) to the Python
  implementations in :mod:`optiond.addin.functions`;
* :func:`vba_udf_module` writes the VBA module that xlwings' "Import Functions" installs, and
  :func:`vba_register_module` a macro that sets the wizard texts with
  ``Application.MacroOptions`` (the golden files in ``addin/vba/``);
* :func:`reference` renders the user documentation, and the installer checks a workbook
  against :data:`FUNCTIONS`.

Regenerate the golden files after editing the table::

    python -m optiond.addin.table --write-vba

Limits that Excel imposes and :func:`check` enforces: descriptions and argument texts of at
most 255 characters, no argument named ``caller`` (xlwings injects the calling range under
that name), and optional arguments only after the required ones.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from ..models import GREEK_FIELDS, MAX_STEPS, MAX_VOLATILITY

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

VBA_DIR = Path(__file__).with_name("vba")
VBA_UDF_FILE = VBA_DIR / "xlwings_udfs.bas"
VBA_REGISTER_FILE = VBA_DIR / "optiond_register.bas"


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
            ``expiry``, ``rate``, ``dividend_yield``, ``volatility``, ``kind``, ``style``),
            ``steps`` (CRR steps) or ``price`` (the option price of an implied volatility).
        parse: how a cell is read: ``number``, ``kind`` ("put"/"call"), ``american``
            (TRUE/FALSE).
        default: the value an omitted argument or an empty cell takes; :data:`REQUIRED` when
            there is none (an empty cell is then an error).
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
            option) or ``iv`` (an implied volatility per option).
        method: the :class:`optiond.models.Method` name: ``binomial`` or ``black-scholes``.
        fixed: batch columns the function fixes rather than reads (``kind``, ``style``).
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


#: the columns of a BOPM_GREEKS row, in order
GREEK_COLUMNS = GREEK_FIELDS

# ---- the arguments, shared by the functions that take them ---------------------------------

PRICE = Arg("price", "Market price of the option (> 0), in the currency of S. A cell or a range.", "price")
S = Arg("S", "Spot price of the underlying (> 0). A cell or a range: ranges broadcast against the other "
        "arguments and return a range of the same shape.", "spot")
K = Arg("K", "Strike price (> 0), in the currency of S. A column of strikes returns a column of results.",
        "strike")
T = Arg("T", "Time to expiry in years (> 0), e.g. 0.25 for three months (ACT/365).", "expiry")
R = Arg("r", "Risk-free rate, annual and continuously compounded, as a decimal (0.05 = 5%).", "rate")
SIGMA = Arg("sigma", f"Volatility, annualised, as a decimal (0.2 = 20%); > 0 and <= {MAX_VOLATILITY:g}.",
            "volatility")
N = Arg("N", f"Steps of the binomial tree, a whole number from 1 to {MAX_STEPS:,}. More steps: more "
        "accurate and slower (time grows as N squared); 200 to 2000 is typical.", "steps")
N_OPT = Arg("N", f"Optional. Steps of the binomial tree, 1 to {MAX_STEPS:,}; default {DEFAULT_STEPS}. Time "
            "grows as N squared.", "steps", default=DEFAULT_STEPS)
Q = Arg("q", "Optional. Continuous dividend yield, annual, as a decimal (0.02 = 2%); default 0.",
        "dividend_yield", default=0.0)
AMERICAN = Arg("american", "Optional. TRUE for American exercise (the default), FALSE for European.",
               "style", parse="american", default=True)
KIND = Arg("kind", 'Optional. "call" (the default) or "put".', "kind", parse="kind", default="call")

# ---- the functions -------------------------------------------------------------------------

FUNCTIONS: tuple[Function, ...] = (
    Function(
        "BOPM_PUT",
        "Put price on a Cox-Ross-Rubinstein binomial tree with N steps, American (default) or European, "
        "with a continuous dividend yield. Ranges in any argument return a range of prices.",
        (S, K, T, R, SIGMA, N, Q, AMERICAN), op="price", method="binomial", fixed={"kind": "put"},
        returns="the put price, in the currency of S"),
    Function(
        "BOPM_CALL",
        "Call price on a Cox-Ross-Rubinstein binomial tree with N steps, American (default) or European, "
        "with a continuous dividend yield. Ranges in any argument return a range of prices.",
        (S, K, T, R, SIGMA, N, Q, AMERICAN), op="price", method="binomial", fixed={"kind": "call"},
        returns="the call price, in the currency of S"),
    Function(
        "BS_PUT",
        "Black-Scholes-Merton price of a European put with a continuous dividend yield (closed form). "
        "Ranges in any argument return a range of prices.",
        (S, K, T, R, SIGMA, Q), op="price", method="black-scholes", fixed={"kind": "put", "style": "european"},
        returns="the put price, in the currency of S"),
    Function(
        "BS_CALL",
        "Black-Scholes-Merton price of a European call with a continuous dividend yield (closed form). "
        "Ranges in any argument return a range of prices.",
        (S, K, T, R, SIGMA, Q), op="price", method="black-scholes", fixed={"kind": "call", "style": "european"},
        returns="the call price, in the currency of S"),
    Function(
        "BOPM_IV",
        "Implied volatility of an option from its price, by a bracketed root find on the binomial tree "
        "price (American by default). Returns an annualised decimal (0.2 = 20%).",
        (PRICE, S, K, T, R, Q, KIND, N_OPT, AMERICAN), op="iv", method="binomial",
        returns="the implied volatility, an annualised decimal"),
    Function(
        "BOPM_GREEKS",
        "Greeks from a binomial tree, one row per option: delta, gamma, theta (per year), vega (per 1.00 "
        "of volatility), rho (per 1.00 of rate). Give a column of inputs for one row per option.",
        (S, K, T, R, SIGMA, N, Q, KIND, AMERICAN), op="greeks", method="binomial",
        returns="a row: " + ", ".join(GREEK_COLUMNS)),
)

BY_NAME: dict[str, Function] = {f.name: f for f in FUNCTIONS}

#: the xlwings converter options every argument is read with: always a 2-D list (so a row
#: and a column keep their orientation) with error cells as their text ("#N/A")
ARG_OPTIONS: Mapping[str, Any] = {"ndim": 2, "err_to_str": True}

_FIELDS = {"spot", "strike", "expiry", "rate", "dividend_yield", "volatility", "kind", "style", "steps", "price"}


def check(functions: tuple[Function, ...] = FUNCTIONS) -> None:
    """Check the table against Excel's and xlwings' rules.

    Raises:
        ValueError: a text over 255 characters, an argument named ``caller``, a required
            argument after an optional one, an unknown field or parse rule, or a duplicate.
    """
    seen = set()
    for f in functions:
        if f.name in seen or not f.name.isidentifier():
            raise ValueError(f"{f.name}: duplicate or invalid function name")
        seen.add(f.name)
        if len(f.description) > EXCEL_TEXT_LIMIT:
            raise ValueError(f"{f.name}: description longer than {EXCEL_TEXT_LIMIT} characters")
        if f.op not in ("price", "greeks", "iv") or f.method not in ("binomial", "black-scholes"):
            raise ValueError(f"{f.name}: unknown op {f.op!r} or method {f.method!r}")
        optional = False
        for a in f.args:
            if a.name == "caller":
                raise ValueError(f"{f.name}: 'caller' is reserved by xlwings")
            if len(a.doc) > EXCEL_TEXT_LIMIT:
                raise ValueError(f"{f.name}({a.name}): text longer than {EXCEL_TEXT_LIMIT} characters")
            if a.field not in _FIELDS or a.parse not in ("number", "kind", "american"):
                raise ValueError(f"{f.name}({a.name}): unknown field {a.field!r} or parse {a.parse!r}")
            if optional and not a.optional:
                raise ValueError(f"{f.name}({a.name}): required argument after an optional one")
            optional = optional or a.optional
        if len(set(f.arg_names)) != len(f.args):
            raise ValueError(f"{f.name}: duplicate argument names")


check()


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


# ---- documentation -------------------------------------------------------------------------

def reference(functions: tuple[Function, ...] = FUNCTIONS) -> str:
    """The functions' reference in Markdown, from the table."""
    out = ["# optiond worksheet functions", ""]
    for f in functions:
        out += [f"## `{f.signature()}`", "", f.description, "", f"Returns {f.returns}.", "",
                "| argument | default | description |", "|---|---|---|"]
        for a in f.args:
            d = "required" if not a.optional else ("TRUE" if a.default is True else
                                                  f'"{a.default}"' if isinstance(a.default, str) else f"{a.default:g}")
            out.append(f"| `{a.name}` | {d} | {a.doc} |")
        out.append("")
    return "\n".join(out)


# ---- VBA -----------------------------------------------------------------------------------

@contextlib.contextmanager
def _xlwings_udfs() -> Iterator[types.ModuleType]:
    """xlwings' own ``udfs`` module (decorators and VBA writer), importable off Windows.

    ``xlwings.udfs`` imports the Windows COM modules at the top; the parts used here (the
    decorators and ``generate_vba_wrapper``) never call them, so empty stand-ins are put in
    ``sys.modules`` for the import and everything is removed again afterwards.
    """
    names = ("pythoncom", "pywintypes", "win32com", "win32com.client", "xlwings.udfs")
    saved = {n: sys.modules.get(n) for n in names}
    native = saved["xlwings.udfs"] is not None
    try:
        if not native:
            for n in names[:-1]:
                if saved[n] is None:
                    sys.modules[n] = types.ModuleType(n)
            sys.modules["pythoncom"].__dict__.setdefault("CoInitialize", lambda: None)
            sys.modules["win32com.client"].__dict__.setdefault("Dispatch", None)
        import importlib

        yield importlib.import_module("xlwings.udfs")
    finally:
        if not native:
            import xlwings

            for n, m in saved.items():
                if m is None:
                    sys.modules.pop(n, None)
                else:
                    sys.modules[n] = m
            if getattr(xlwings, "udfs", None) is not None and saved["xlwings.udfs"] is None:
                del xlwings.udfs


def _copy_function(f: Callable) -> Callable:
    g = types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)
    g.__doc__, g.__annotations__ = f.__doc__, dict(getattr(f, "__annotations__", {}))
    return g


def vba_udf_module(functions: tuple[Function, ...] = FUNCTIONS) -> str:
    """The VBA module ``xlwings_udfs`` that xlwings' "Import Functions" would install.

    Written by xlwings' own code (``xlwings.udfs.generate_vba_wrapper``) from copies of the
    functions decorated from this table, for an add-in workbook (:data:`ADDIN_WORKBOOK`); the
    header lines are those of ``xlwings.udfs.import_udfs``. Lines end in LF.
    """
    from . import functions as impl_module

    with _xlwings_udfs() as udfs:
        ns = types.SimpleNamespace()
        for f in functions:
            g = _copy_function(getattr(impl_module, f.name))
            g.__dict__.pop("__xlfunc__", None)
            setattr(ns, f.name, decorate(f, g, func=udfs.xlfunc, arg=udfs.xlarg))
        buf = io.StringIO()
        w = udfs.VBAWriter(buf)
        w.writeln('Attribute VB_Name = "xlwings_udfs"')
        w.writeln("'Autogenerated code by xlwings - changes will be lost with next import!")
        w.writeln("""#Const App = "Microsoft Excel" 'Adjust when using outside of Excel""")
        udfs.generate_vba_wrapper(UDF_MODULE, ns, buf, types.SimpleNamespace(Name=ADDIN_WORKBOOK))
    return buf.getvalue()


def _vba_string(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


def vba_register_module(functions: tuple[Function, ...] = FUNCTIONS) -> str:
    """A VBA module whose macro ``OptiondRegisterFunctions`` gives Excel's function wizard the
    table's category, descriptions and argument texts (``Application.MacroOptions``), as
    xlwings' "Import Functions" does over COM. Run it from the add-in's ``Workbook_Open``."""
    lines = ['Attribute VB_Name = "optiond_register"',
             "' Generated from optiond.addin.table - do not edit; regenerate with",
             "'     python -m optiond.addin.table --write-vba",
             "Option Explicit", "",
             "Public Sub OptiondRegisterFunctions()",
             "    On Error Resume Next"]
    for f in functions:
        lines.append(f"    Application.MacroOptions Macro:=\"'\" & ThisWorkbook.Name & \"'!{f.name}\", _")
        lines.append(f"        Description:={_vba_string(f.description)}, _")
        lines.append(f"        Category:={_vba_string(f.category)}, _")
        docs = [_vba_string(a.doc) for a in f.args]
        lines.append("        ArgumentDescriptions:=Array( _")
        for i, d in enumerate(docs):
            lines.append(f"            {d}{', _' if i < len(docs) - 1 else ')'}")
    lines += ["End Sub", ""]
    return "\n".join(lines)


def write_vba(directory: Path = VBA_DIR) -> list[Path]:
    """Write the two golden VBA modules into ``directory``; return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for name, text in ((VBA_UDF_FILE.name, vba_udf_module()), (VBA_REGISTER_FILE.name, vba_register_module())):
        p = directory / name
        p.write_text(text, encoding="utf-8", newline="\n")
        out.append(p)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m optiond.addin.table", description=__doc__.split("\n")[0])
    ap.add_argument("--write-vba", action="store_true", help=f"write the golden VBA modules into {VBA_DIR}")
    ap.add_argument("--reference", action="store_true", help="print the functions' reference (Markdown)")
    a = ap.parse_args(argv)
    if a.write_vba:
        for p in write_vba():
            print(p)
    if a.reference or not a.write_vba:
        print(reference())
    return 0


if __name__ == "__main__":
    sys.exit(main())
