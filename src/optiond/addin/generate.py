"""The VBA modules and the reference generated from the worksheet functions' table.

From :mod:`optiond.addin.table` (the one table) and the functions of
:mod:`optiond.addin.functions`:

* :func:`vba_udf_module` writes the VBA module that xlwings' "Import Functions" installs, and
  :func:`vba_register_module` a macro that sets the wizard texts with
  ``Application.MacroOptions`` (the golden files in ``addin/vba/``, :data:`VBA_DIR`);
* :func:`reference` renders the functions' reference in Markdown, with the work limits in
  words (:func:`limits_text`).

Regenerate the golden files after editing the table::

    python -m optiond.addin.generate --write-vba

and print the reference with ``python -m optiond.addin.generate --reference``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import types
from pathlib import Path
from typing import Callable, Iterator

from ..files import write_atomic
from . import functions as impl_module
from . import table

VBA_DIR = Path(__file__).with_name("vba")
VBA_UDF_FILE = VBA_DIR / "xlwings_udfs.bas"
VBA_REGISTER_FILE = VBA_DIR / "optiond_register.bas"


# ---- the work limits in words ---------------------------------------------------------------

def limits_text() -> str:
    """The work limits in words (for the reference)."""
    t = table
    nodes_per_n1000 = float(t.bopm_tree_nodes(t.DEFAULT_STEPS)[()])
    rows = [
        ("A worksheet function runs while Excel waits, so one call (a cell, or a range priced as one request) "
         "may ask for a bounded amount of work. Over a limit, the cells show `#optiond: ...` with the reason "
         f"and the way on ({table.OVER_LIMIT_ADVICE}). A row over a limit on its own gets the text in its own "
         "cell; rows that are over only together get it in every cell of the call."),
        "",
        "| functions | limit per call | constant |",
        "|---|---|---|",
        (f"| `BOPM_PUT`, `BOPM_CALL`, `BOPM_GREEKS`, `BOPM_IV`, `SURFACE_PRICE` | {t.BOPM_MAX_TREE_NODES:.3g} tree "
         f"nodes summed over the options: (N+1)(N+2)/2 a tree, x{t.BOPM_GREEK_TREES} for `BOPM_GREEKS` and "
         f"`SURFACE_PRICE`'s American options (N = {t.SURFACE_PRICE_STEPS}), x{t.BOPM_IV_TREES} for "
         f"`BOPM_IV` ({t.BOPM_MAX_TREE_NODES / nodes_per_n1000:,.0f} prices at N = {t.DEFAULT_STEPS}) "
         "| `BOPM_MAX_TREE_NODES` |"),
        (f"| `AMERICAN_PUT`, `AMERICAN_CALL`, `AMERICAN_IV` | {t.AMERICAN_MAX_WORK:.3g} units of spectral work "
         "(in tree nodes) summed over the options: "
         + ", ".join(f"{a} {float(t.american_work(a)):.3g}" for a in t.SPECTRAL_ACCURACIES)
         + f" a price by accuracy setting, x{float(t.american_work(t.DEFAULT_ACCURACY, 'iv') / t.american_work(t.DEFAULT_ACCURACY)):g} "
         f"for `AMERICAN_IV` ({t.AMERICAN_MAX_WORK / float(t.american_work(t.DEFAULT_ACCURACY)):,.0f} prices or "
         f"{t.AMERICAN_MAX_WORK / float(t.american_work(t.DEFAULT_ACCURACY, 'iv')):,.0f} implied volatilities at "
         f"{t.DEFAULT_ACCURACY}); a row the engine prices on the CRR tree (a cash-dividend schedule, the "
         "double-boundary regime, or a drift-dominated row: abs(r - q) sqrt(T) > sigma) costs its tree, "
         f"(N+1)(N+2)/2 nodes at N = {t.DEFAULT_STEPS} | `AMERICAN_MAX_WORK` |"),
        (f"| `MLMC_*` | per cell: eps >= {t.MLMC_MIN_EPS_REL:g} x S (>= {t.MLMC_MIN_EPS_REL:g} for the digital, "
         "which pays 1) | `MLMC_MIN_EPS_REL` |"),
        (f"| `MLMC_*` | {t.MLMC_MAX_PATH_STEPS:.3g} estimated path steps summed over the options: "
         f"max({t.MLMC_MIN_PATH_STEPS:g}, {t.MLMC_WORK_FACTOR:g} V (1 + sigma^2 T)^2 / eps^2), "
         "V = S^2 e^(2 abs(r-q) T) (e^(sigma^2 T) - 1), or (1 + sigma^2 T) / 4 for the digital "
         "| `MLMC_MAX_PATH_STEPS` |"),
        (f"| `HESTON_*` | {t.HESTON_MAX_GRID_WORK:.3g} grid-cell updates: American options x {t.HESTON_GRID[0]} x "
         f"{t.HESTON_GRID[1]} x {t.HESTON_TIME_STEPS} ({t.HESTON_MAX_GRID_WORK / t.heston_grid_work(1):,.0f} "
         "American options; European ones take the semi-analytic formula and count nothing) "
         "| `HESTON_MAX_GRID_WORK` |"),
    ]
    return "\n".join(rows)


# ---- documentation -------------------------------------------------------------------------

def reference(functions: tuple[table.Function, ...] = table.FUNCTIONS) -> str:
    """The functions' reference in Markdown, from the table."""
    out = ["# optiond worksheet functions", ""]
    for f in functions:
        out += [f"## `{f.signature()}`", "", f.description, "", f"Returns {f.returns}.", "",
                "| argument | default | description |", "|---|---|---|"]
        for a in f.args:
            d = ("required" if not a.optional else "none" if a.default is None
                 else ("TRUE" if a.default else "FALSE") if isinstance(a.default, bool)
                 else f'"{a.default}"' if isinstance(a.default, str) else f"{a.default:g}")
            out.append(f"| `{a.name}` | {d} | {a.doc} |")
        out.append("")
    out += ["## Work limits", "", limits_text(), ""]
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


def vba_udf_module(functions: tuple[table.Function, ...] = table.FUNCTIONS) -> str:
    """The VBA module ``xlwings_udfs`` that xlwings' "Import Functions" would install.

    Written by xlwings' own code (``xlwings.udfs.generate_vba_wrapper``) from copies of the
    functions decorated from the table, for an add-in workbook
    (:data:`optiond.addin.table.ADDIN_WORKBOOK`); the
    header lines are those of ``xlwings.udfs.import_udfs``. Lines end in LF.
    """
    with _xlwings_udfs() as udfs:
        ns = types.SimpleNamespace()
        for f in functions:
            g = _copy_function(getattr(impl_module, f.name))
            g.__dict__.pop("__xlfunc__", None)
            setattr(ns, f.name, table.decorate(f, g, func=udfs.xlfunc, arg=udfs.xlarg))
        buf = io.StringIO()
        w = udfs.VBAWriter(buf)
        w.writeln('Attribute VB_Name = "xlwings_udfs"')
        w.writeln("'Autogenerated code by xlwings - changes will be lost with next import!")
        w.writeln("""#Const App = "Microsoft Excel" 'Adjust when using outside of Excel""")
        udfs.generate_vba_wrapper(table.UDF_MODULE, ns, buf, types.SimpleNamespace(Name=table.ADDIN_WORKBOOK))
    return buf.getvalue()


def _vba_string(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


def vba_register_module(functions: tuple[table.Function, ...] = table.FUNCTIONS) -> str:
    """A VBA module whose macro ``OptiondRegisterFunctions`` gives Excel's function wizard the
    table's category, descriptions and argument texts (``Application.MacroOptions``), as
    xlwings' "Import Functions" does over COM. Run it from the add-in's ``Workbook_Open``."""
    lines = ['Attribute VB_Name = "optiond_register"',
             "' Generated from optiond.addin.table - do not edit; regenerate with",
             "'     python -m optiond.addin.generate --write-vba",
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
        write_atomic(p, text.encode("utf-8"))  # \n line ends on every platform
        out.append(p)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m optiond.addin.generate", description=__doc__.split("\n")[0])
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
