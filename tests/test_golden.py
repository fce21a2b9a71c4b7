"""The golden workbooks (``tests/golden/*.xlsx``, written by ``tests/golden/build.py``):
recalculated with the ``formulas`` package, the optiond functions registered, once against a
live daemon (every request to it: no in-process fallback, no local pricing of small trees) and
once without one (the in-process fallback and the add-in's own object store); every check cell
of every sheet must read PASS. The expected values and their sources (QuantLib 1.44, closed
forms, Hull's worked examples) are on the sheets."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

formulas = pytest.importorskip("formulas")
openpyxl = pytest.importorskip("openpyxl")

from optiond.addin import functions as F  # noqa: E402
from optiond.addin import objects  # noqa: E402
from optiond.daemon import object_kinds  # noqa: E402

GOLDEN = Path(__file__).resolve().parent / "golden"
sys.path.insert(0, str(GOLDEN))
import build  # noqa: E402

WORKBOOKS = sorted(build.WORKBOOKS)


def check_cells(path: Path) -> dict[str, list[tuple[str, str, str]]]:
    """Each sheet's rows as ``(check cell, got cell, expected cell)``: the rows under the header
    row (the one naming a ``check`` column)."""
    wb = openpyxl.load_workbook(path)
    out = {}
    for ws in wb.worksheets:
        head, col = next((c.row, c.column) for row in ws.iter_rows() for c in row if c.value == "check")
        out[ws.title] = [(ws.cell(r, col).coordinate, ws.cell(r, col - 3).coordinate, ws.cell(r, col - 2).coordinate)
                         for r in range(head + 1, ws.max_row + 1) if ws.cell(r, col).value is not None]
    return out


def recalculate(path: Path) -> dict[str, object]:
    """Every cell's value after recalculation, by ``SHEET!A1``."""
    F.register_formulas()
    solution = formulas.ExcelModel().loads(str(path)).finish().calculate()
    out = {}
    for key, v in solution.items():
        sheet, _, cell = key.partition("]")[2].partition("!")
        a = np.asarray(getattr(v, "value", v), dtype=object)
        out[f"{sheet.strip(chr(39)).upper()}!{cell}"] = a.ravel()[0] if a.size else None
    return out


def assert_all_pass(path: Path) -> None:
    values = recalculate(path)
    checks = check_cells(path)
    assert checks and all(checks.values())
    failed = [(sheet, got, values.get(f"{sheet.upper()}!{got}"), values.get(f"{sheet.upper()}!{exp}"))
              for sheet, rows in checks.items() for chk, got, exp in rows if values.get(f"{sheet.upper()}!{chk}") != "PASS"]
    assert not failed, failed
    assert sum(len(rows) for rows in checks.values()) == sum(len(m().cases) for m in build.WORKBOOKS[path.name])


def publish_surface(daemon_client=None) -> None:
    """The surface the SURFACE sheet reads by name, as ``optiond objects publish`` would keep it."""
    surface = build.golden_surface()
    if daemon_client is not None:
        daemon_client.put_surface(build.SURFACE_NAME, surface)
    else:
        object_kinds.put_document(objects.local_store(), build.SURFACE_NAME, "surface", surface.to_dict())


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.delenv("OPTIOND_CACHE", raising=False)
    F.clear_cache()
    objects.forget()
    yield
    F.clear_cache()
    objects.forget()


@pytest.mark.parametrize("name", WORKBOOKS)
def test_golden_workbook_passes_against_the_daemon(name, daemon, fresh, monkeypatch):
    monkeypatch.setenv("OPTIOND_FALLBACK", "0")
    monkeypatch.setenv("OPTIOND_LOCAL_NODES", "0")
    c = daemon.client()
    publish_surface(c)
    before = c.status()["by_op"]
    assert_all_pass(GOLDEN / name)
    after = c.status()["by_op"]
    assert after.get("price", 0) > before.get("price", 0)  # the daemon priced
    assert not objects.local_store().list()  # and kept every object
    c.close()


@pytest.mark.parametrize("name", WORKBOOKS)
def test_golden_workbook_passes_without_a_daemon(name, fresh, monkeypatch, tmp_path):
    monkeypatch.setenv("OPTIOND_CONNECTION_FILE", str(tmp_path / "none.json"))
    monkeypatch.delenv("OPTIOND_FALLBACK", raising=False)
    publish_surface()
    assert_all_pass(GOLDEN / name)


def test_the_committed_workbook_of_objects_is_what_the_generator_writes(tmp_path):
    """The expected values in the committed file are the generator's (no hand edits, none stale);
    pricing.xlsx's QuantLib finite-difference references take minutes, so only objects.xlsx."""
    name = "objects.xlsx"
    build.write(tmp_path / name, [m() for m in build.WORKBOOKS[name]])
    new, old = openpyxl.load_workbook(tmp_path / name), openpyxl.load_workbook(GOLDEN / name)
    assert new.sheetnames == old.sheetnames
    for a, b in zip(new.worksheets, old.worksheets):
        assert [[c.value for c in row] for row in a.iter_rows()] == [[c.value for c in row] for row in b.iter_rows()]
