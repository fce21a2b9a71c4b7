"""ADI benchmarks; prints a table and writes JSON.

CPU (this machine): the American Heston put (S = K = 100, T = 1, r = 5 %, q = 0, v0 = theta =
0.04, kappa = 1.5, xi = 0.3, rho = -0.9) on a 200 x 100 grid with 100 time steps and the
Modified Craig-Sneyd scheme, ours against QuantLib's FdHestonVanillaEngine (same grid sizes,
same scheme, no damping steps), both measured here (best of ``--repeat`` runs), errors against
a fine-grid reference: our solver at 800 x 400 x 400 and 1600 x 800 x 800, Richardson-
extrapolated (second order), cross-checked with QuantLib at its finest affordable grid.

GPU (``--gpu``, needs CuPy): one 3-D ADI step on an ``n^3`` FP64 grid (Heston-Hull-White
operator) for Douglas, MCS and HV, with the per-phase split; a batch of American Heston puts
(200 x 100 grid, 100 steps, MCS; strikes x expiries) in options per second, with the device
time loop and the whole call (host grids and Greeks included) reported apart.

Defaults (``--defaults``, CPU): the accurate default of ``optiond.kernels.adi.defaults`` (160 x 80
and 80 x 40 Richardson pair, 50 steps or 80 a year) against the earlier default (one 200 x 100
grid, 100 steps): time per option and the largest error on the hard European sets (against the
semi-analytic engine) and on Ikonen & Toivanen's American puts (v0 = 0.0625, published values).

Usage: ``python bench/adi.py [--cpu] [--gpu] [--defaults] [--out FILE] [--repeat R] [--n3 256] [--batch 1000] [--quick]``
(default: ``--cpu`` and ``--defaults``, plus ``--gpu`` when a device is present).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from optiond.kernels import adi as A  # noqa: E402

CASE = dict(spot=100.0, strike=100.0, expiry=1.0, rate=0.05, dividend_yield=0.0, v0=0.04, kappa=1.5, theta=0.04, xi=0.3, rho=-0.9)


def _ql_american(grid, scheme="mcs"):
    import QuantLib as ql

    today = ql.Date(15, 1, 2025)
    ql.Settings.instance().evaluationDate = today
    dc = ql.Actual365Fixed()
    c = CASE
    rts = ql.YieldTermStructureHandle(ql.FlatForward(today, c["rate"], dc))
    qts = ql.YieldTermStructureHandle(ql.FlatForward(today, c["dividend_yield"], dc))
    proc = ql.HestonProcess(rts, qts, ql.QuoteHandle(ql.SimpleQuote(c["spot"])), c["v0"], c["kappa"], c["theta"], c["xi"], c["rho"])
    model = ql.HestonModel(proc)
    opt = ql.VanillaOption(ql.PlainVanillaPayoff(ql.Option.Put, c["strike"]), ql.AmericanExercise(today, today + 365))
    desc = {"mcs": ql.FdmSchemeDesc.ModifiedCraigSneyd(), "hv": ql.FdmSchemeDesc.Hundsdorfer()}[scheme]
    t_grid, x_grid, v_grid = grid
    opt.setPricingEngine(ql.FdHestonVanillaEngine(model, t_grid, x_grid, v_grid, 0, desc))
    t0 = time.perf_counter()
    p = opt.NPV()
    return p, time.perf_counter() - t0


def _best(f, repeat):
    out, best = None, float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = f()
        best = min(best, time.perf_counter() - t0)
    return out, best


def bench_cpu(repeat: int, quick: bool) -> dict:
    ours = lambda g, N: A.heston_price("put", "american", **CASE, scheme="mcs", grid=g, time_steps=N, rannacher=2)  # noqa: E731
    ours((200, 100), 100)  # compile
    res, t_ours = _best(lambda: ours((200, 100), 100), repeat)
    ql_res = [_ql_american((100, 200, 100)) for _ in range(repeat)]
    p_ql, t_ql = ql_res[0][0], min(t for _, t in ql_res)
    # fine-grid reference: Richardson on two fine grids of our solver
    fine = [(800, 400, 400), (1600, 800, 800)] if not quick else [(400, 200, 200), (800, 400, 400)]
    pf = [ours(g[:2], g[2])["price"] for g in fine]
    ref = pf[1] + (pf[1] - pf[0]) / 3.0
    ql_fine_grid = (1000, 400, 200)
    p_ql_fine, t_ql_fine = _ql_american(ql_fine_grid)
    out = {
        "case": dict(CASE, kind="put", style="american"),
        "grid": [200, 100], "time_steps": 100, "scheme": "modified-craig-sneyd", "rannacher_steps": 2,
        "ours": {"price": res["price"], "seconds": t_ours, "error": res["price"] - ref, "delta": res["delta"], "gamma": res["gamma"]},
        "quantlib": {"price": p_ql, "seconds": t_ql, "error": p_ql - ref, "engine": "FdHestonVanillaEngine(tGrid=100, xGrid=200, vGrid=100, dampingSteps=0, ModifiedCraigSneyd)"},
        "speedup": t_ql / t_ours,
        "reference": {"price": ref, "how": f"Richardson on ours at {fine[0]} and {fine[1]} (n_s, n_v, steps)", "ours_fine": pf,
                      "quantlib_fine": {"grid_t_x_v": list(ql_fine_grid), "price": p_ql_fine, "seconds": t_ql_fine}},
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "python": platform.python_version()},
    }
    return out


def bench_defaults(repeat: int) -> dict:
    from optiond.kernels.adi import defaults
    from optiond.kernels.heston import cpu as analytic

    hard = [dict(kind=kind, spot=100.0, strike=K, expiry=T, rate=0.03, dividend_yield=0.01, v0=0.04, kappa=kappa,
                 theta=0.04, xi=xi, rho=-0.9)
            for T, xi, kappa, Ks in ((10.0, 1.0, 1.5, (50.0, 100.0, 200.0)), (0.5, 1.5, 2.0, (70.0, 100.0, 130.0)))
            for K in Ks for kind in ("put", "call")]
    it = [(dict(kind="put", spot=S, strike=10.0, expiry=0.25, rate=0.1, dividend_yield=0.0, v0=0.0625, kappa=5.0,
                theta=0.16, xi=0.9, rho=0.1), ref)
          for S, ref in zip((8.0, 9.0, 10.0, 11.0, 12.0), (2.000000, 1.107621, 0.520030, 0.213677, 0.082044))]
    settings = {"earlier (200x100, 100 steps)": dict(grid=(200, 100), time_steps=100),
                "default (Richardson 160x80 + 80x40, 50 steps or 80/year)": dict(
                    grid=defaults.GRID, time_steps=defaults.MIN_TIME_STEPS, steps_per_year=defaults.STEPS_PER_YEAR,
                    richardson=True)}

    def one(c, style, kw):
        c = dict(c)
        kind = c.pop("kind")
        return A.heston_price(kind, style, **c, **kw)["price"]

    out = {}
    for name, kw in settings.items():
        one(it[0][0], "american", kw)  # compile
        eu = [(one(c, "european", kw), float(analytic.heston_batch(
            np.array([c["kind"] == "call"], np.int8), *(np.array([c[f]]) for f in ("spot", "strike", "expiry", "rate",
                                                                                   "dividend_yield", "v0", "kappa", "theta",
                                                                                   "xi", "rho")), greeks=False)[0][0]))
              for c in hard]
        am = [(one(c, "american", kw), ref) for c, ref in it]
        _, t_case = _best(lambda: one(dict(CASE, kind="put"), "american", kw), repeat)
        _, t_short = _best(lambda: one(it[2][0], "american", kw), repeat)
        _, t_long = _best(lambda: one(hard[3], "european", kw), max(1, repeat // 2))
        out[name] = {"settings": {k: (list(v) if isinstance(v, tuple) else v) for k, v in kw.items()},
                     "max_err_european_hard": max(abs(p - r) for p, r in eu),
                     "max_err_american_ikonen_toivanen": max(abs(p - r) for p, r in am),
                     "seconds_american_put_T1": t_case, "seconds_american_put_T0.25": t_short,
                     "seconds_european_T10": t_long}
        print(f"  {name}: European hard max err {out[name]['max_err_european_hard']:.2e}, IT American max err "
              f"{out[name]['max_err_american_ikonen_toivanen']:.2e}; {t_case*1e3:.1f} ms (T=1 put), "
              f"{t_short*1e3:.1f} ms (T=0.25), {t_long*1e3:.1f} ms (T=10)", flush=True)
    return out


def bench_gpu(n3: int, batch: int, quick: bool) -> dict:
    from optiond.kernels import gpu as kernel_gpu
    from optiond.kernels.adi import _bench
    from optiond.kernels.adi import gpu as G

    out = {"device": kernel_gpu.device_label()}
    steps3 = []
    for scheme in ("do", "mcs", "hv"):
        for axis2 in ("tiled", "plain") if scheme == "do" else ("tiled",):
            r = _bench.time_step3(n3, scheme=scheme, steps=10 if not quick else 3, axis2=axis2)
            steps3.append(r)
            print(f"  3-D {n3}^3 {r['scheme']:22s} axis2={axis2:5s} {r['ms_per_step']:.3f} ms/step "
                  f"(explicit {r['ms_explicit']:.3f}, sweeps {', '.join(f'{x:.3f}' for x in r['ms_sweep'])})", flush=True)
    out["step3d"] = steps3
    # batch of American puts: strikes x expiries
    ne = 10
    nk = max(1, batch // ne)
    K = np.repeat(np.linspace(70.0, 130.0, nk), ne)
    T = np.tile(np.linspace(0.25, 2.5, ne), nk)
    n = K.size
    args = (CASE["spot"], K, T, CASE["rate"], CASE["dividend_yield"], CASE["v0"], CASE["kappa"], CASE["theta"], CASE["xi"], CASE["rho"])
    G.heston_price_batch("put", "american", *args[:1], K[:2], T[:2], *args[3:], grid=(200, 100), time_steps=100)  # warm-up
    t0 = time.perf_counter()
    r = G.heston_price_batch("put", "american", *args, grid=(200, 100), time_steps=100, scheme="mcs")
    wall = time.perf_counter() - t0
    ok = int((r["status"] == "ok").sum())
    out["batch"] = {"options": n, "ok": ok, "grid": [200, 100], "time_steps": 100, "scheme": "mcs", "style": "american",
                    "solve_s": r["solve_s"], "wall_s": wall, "options_per_s_solve": n / r["solve_s"], "options_per_s_wall": n / wall,
                    "price_sample": [float(x) for x in r["price"][:5]]}
    print(f"  batch {n} American puts 200x100x100 MCS: device loop {r['solve_s']*1e3:.1f} ms ({n / r['solve_s']:.0f} options/s), "
          f"whole call {wall*1e3:.1f} ms ({n / wall:.0f} options/s)", flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--defaults", action="store_true", help="the default discretisation against the earlier one")
    ap.add_argument("--out", help="write the JSON here (default: print it last)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--n3", type=int, default=256)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--quick", action="store_true", help="coarser references and fewer repeats")
    a = ap.parse_args(argv)
    if not a.cpu and not a.gpu and not a.defaults:
        a.cpu = a.defaults = True
        try:
            from optiond.kernels import gpu as kernel_gpu

            a.gpu = kernel_gpu.available()
        except Exception:  # noqa: BLE001
            a.gpu = False
    result = {"bench": "adi", "when": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if a.cpu:
        c = bench_cpu(a.repeat, a.quick)
        result["cpu"] = c
        print(f"CPU American put 200x100x100 MCS  (reference {c['reference']['price']:.6f})")
        print(f"  ours      {c['ours']['price']:.6f}  err {c['ours']['error']:+.2e}  {c['ours']['seconds']*1e3:7.1f} ms")
        print(f"  QuantLib  {c['quantlib']['price']:.6f}  err {c['quantlib']['error']:+.2e}  {c['quantlib']['seconds']*1e3:7.1f} ms")
        print(f"  speed-up {c['speedup']:.1f}x; QuantLib fine {c['reference']['quantlib_fine']['price']:.6f}")
    if a.defaults:
        print("CPU default discretisation")
        result["defaults"] = bench_defaults(a.repeat)
    if a.gpu:
        print("GPU")
        result["gpu"] = bench_gpu(a.n3, a.batch, a.quick)
    text = json.dumps(result, indent=2, default=float)
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            f.write(text)
        print(f"wrote {a.out}")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
