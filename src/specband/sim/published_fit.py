"""Fit of the datacenter profiles to the published rows (:mod:`specband.sim.published`).

``python -m specband.sim.published_fit`` prints the fitted values that
``specband/data/profiles/h200.toml``, ``h100-sxm.toml`` and ``a100-sxm4-80gb.toml`` hold.
Each fit is ``scipy.optimize.least_squares`` (trust-region reflective, bounded) on log errors:

1. **H200 step costs** (:data:`H200_STEP_PARAMETERS`) on SpecBundle's six bs-1 speeds, with
   AIConfigurator's 8B decode steps of the H200 (``aic_reference.json``) as extra rows, so
   that the baseline sits between the two references (SpecBundle's 190 tok/s is 8 % below
   AIC's 206);
2. **H100 speculative costs** (:data:`H100_STEP_PARAMETERS`) on the EAGLE-3 paper's Table 3
   speed-ups (a chain of 3 at bs 2-64; an L8 loss, close to minimax, as they are not monotone
   in bs); the tree costs and the per-step draft overhead are the H200's (same GH100 chip; no
   tree was measured on the H100);
3. **decode-window power** (:data:`DECODE_POWER`, shared by the H100 and H200: the same chip):
   kept as fitted in issue 19 (to the pure-decode range of the H200 study, 137-300 W, and,
   through the exponential mixing rule this module no longer uses, ML.ENERGY's three serving
   powers). The decode range pins two numbers (its ends), not three fractions: refitted to it
   alone the fractions move to (0, 0.190, 1.548) and the simulated decode power at bs 16-64
   by up to 15 %, inside the range's slack; they are kept, so that every decode-window figure
   built on them stays;
4. **serving power** (:data:`SERVING_PARAMETERS`, one parameter) on the H100 serving rows whose
   ``role`` is ``"fit"`` (ML.ENERGY at 8, 32 and 128 sequences) through
   :mod:`specband.sim.serving`; the rows whose ``role`` is ``"held-out"`` are not seen by the fit:
   their RMS relative error is the profile's ``serving_power_rel_sd``
   (:func:`serving_held_out_errors`);
5. **borrowed power**: a built-in profile whose power was neither measured nor fitted (the
   A100) takes the decode-window fractions of the nearest measured class
   (:func:`specband.sim.serving.nearest_measured_class`), applied to its own idle-to-limit
   headroom, and names it (``power_borrowed_from``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from specband.sim.aic import load_aic_reference, simulated_step_ms
from specband.sim.profile import HardwareProfile, builtin_profiles, load_profile
from specband.sim.published import _model, load_published_reference, simulate_row
from specband.sim.published_rows import PublishedRow
from specband.sim.serving import nearest_measured_class, serving_estimate

__all__ = [
    "DECODE_POWER",
    "H100_STEP_PARAMETERS",
    "H200_STEP_PARAMETERS",
    "SERVING_PARAMETERS",
    "fit_all",
    "serving_held_out_errors",
]

H200_STEP_PARAMETERS: dict[str, tuple[float, float]] = {
    "bandwidth_efficiency": (0.5, 1.0),
    "host_overhead_spec_s": (0.0, 0.005),
    "spec_draft_step_overhead_s": (0.0, 0.002),
    "tree_overhead_s": (0.0, 0.005),
    "tree_node_overhead_s": (0.0, 0.0001),
}
H100_STEP_PARAMETERS: dict[str, tuple[float, float]] = {
    # AIC's fit (0.216) makes a 256-token verify 3x slower than its weight read; a bf16 GEMM
    # of that size reaches well over half of peak, so the bound is 0.7, not 1
    "compute_efficiency": (0.05, 0.7),
    "host_overhead_spec_s": (0.0, 0.005),
    "host_overhead_verify_token_s": (0.0, 0.0002),
}
#: Decode-window power fractions of the GH100 profiles (see the module docstring, stage 3).
DECODE_POWER: dict[str, float] = {
    "busy_power_frac": 6.39536e-17,
    "mem_power_frac": 0.194112,
    "compute_power_frac": 1.23766,
}
SERVING_PARAMETERS: dict[str, tuple[float, float]] = {"serving_busy_power_frac": (0.0, 3.0)}
#: What the serving fit was fitted to (the ``serving_power_source`` it writes).
SERVING_SOURCE = (
    "ML.ENERGY Leaderboard v3, H100 SXM 700 W, vLLM 0.11.1, Llama-3.1-8B-Instruct, lm-arena-chat, "
    "8/32/128 sequences (held out: 16-1024)"
)


def _fit(
    profile: HardwareProfile,
    params: dict[str, tuple[float, float]],
    residuals: Callable[[HardwareProfile], list[float]],
    start: dict[str, float] | None = None,
) -> dict[str, float]:
    from scipy.optimize import least_squares

    names = list(params)
    lo = np.array([params[n][0] for n in names])
    hi = np.array([params[n][1] for n in names])
    x0 = np.array([float((start or {}).get(n, getattr(profile, n))) for n in names])
    x0 = np.clip(x0, lo + 1e-9 * (hi - lo), hi - 1e-9 * (hi - lo))

    def fun(x: np.ndarray) -> np.ndarray:
        return np.array(residuals(profile.with_values(**dict(zip(names, map(float, x), strict=True)))))

    result = least_squares(fun, x0, bounds=(lo, hi), x_scale=np.maximum(hi - lo, 1e-6) / 10, diff_step=1e-4)
    return {n: float(f"{v:.6g}") for n, v in zip(names, result.x, strict=True)}


def fit_all() -> dict[str, dict[str, float | str]]:
    """Fit the three stages in turn; returns profile name -> fitted values."""

    rows = load_published_reference()
    aic = [s for s in load_aic_reference().steps if s.profile == "h200" and s.kind == "decode" and "8b" in s.target]

    def step_res(prof: HardwareProfile, name: str) -> list[float]:
        out = []
        for r in rows:
            if r.profile == name and r.criteria and r.metric in ("speed_tok_s", "speedup"):
                sim = simulate_row(r, prof)
                assert isinstance(sim, float) and r.value
                out.append(math.log(sim / r.value))
        return out

    h200 = load_profile("h200")

    def h200_res(prof: HardwareProfile) -> list[float]:
        model = _model(prof, None)
        return step_res(prof, "h200") + [math.log(simulated_step_ms(model, s) / s.step_ms) for s in aic]

    fit200 = _fit(h200, H200_STEP_PARAMETERS, h200_res)
    h200 = h200.with_values(**fit200)
    shared = {k: fit200[k] for k in ("spec_draft_step_overhead_s", "tree_overhead_s", "tree_node_overhead_s")}
    h100 = load_profile("h100-sxm").with_values(**shared)
    # the four speed-ups are not monotone in bs (1.32 at bs 32, 1.38 at bs 64): an L8 loss
    # (residuals r |r|**3, close to minimax) spreads the error instead of giving one row all of it
    fit100 = _fit(h100, H100_STEP_PARAMETERS, lambda prof: [100 * r * abs(r) ** 3 for r in step_res(prof, "h100-sxm")])
    h100 = h100.with_values(**fit100)

    h100 = h100.with_values(**DECODE_POWER)
    fits, _held = _serving_rows(rows, "h100-sxm")
    fitserv = _fit(
        h100, SERVING_PARAMETERS, lambda prof: _serving_residuals(prof, fits), start={"serving_busy_power_frac": 0.5}
    )
    h100 = h100.with_values(**fitserv, serving_power_source=SERVING_SOURCE)
    held = serving_held_out_errors(h100, rows)
    sd = float(f"{math.sqrt(sum(e * e for e in held) / len(held)):.6g}")
    out: dict[str, dict[str, float | str]] = {
        "h200": {**fit200, **DECODE_POWER},
        "h100-sxm": {
            **shared,
            **fit100,
            **DECODE_POWER,
            **fitserv,
            "serving_power_rel_sd": sd,
            "serving_power_source": SERVING_SOURCE,
        },
    }
    fitted = {name: load_profile(name).with_values(**values) for name, values in out.items()}
    for name in builtin_profiles():
        prof = load_profile(name)
        if name in out or prof.power_measured or prof.power_source:
            continue
        measured = [
            p
            for p in (fitted.get(n, load_profile(n)) for n in builtin_profiles())
            if p.power_measured or p.power_source
        ]
        near = nearest_measured_class(prof, candidates=measured)
        if near is not None:
            out[name] = {**{k: getattr(near, k) for k in DECODE_POWER}, "power_borrowed_from": near.name}
    return out


def _serving_rows(rows: tuple[PublishedRow, ...], profile: str) -> tuple[list[PublishedRow], list[PublishedRow]]:
    serving = [r for r in rows if r.metric == "serving_power_w" and r.profile == profile and r.criteria]
    return [r for r in serving if r.role == "fit"], [r for r in serving if r.role == "held-out"]


def _serving_residuals(profile: HardwareProfile, rows: list[PublishedRow]) -> list[float]:
    model = _model(profile, None)
    out = []
    for r in rows:
        assert r.value and r.batch_size and r.action
        out.append(math.log(serving_estimate(model, r.batch_size, r.action).power_w / r.value))
    return out


def serving_held_out_errors(
    profile: HardwareProfile | None = None, rows: tuple[PublishedRow, ...] | None = None
) -> list[float]:
    """Relative errors (``simulated / measured - 1``) of the serving power on the held-out H100
    rows (``role`` ``"held-out"``), in file order.

    Args:
        profile: the profile to simulate (default: the committed ``h100-sxm``).
        rows: the published rows (default: the bundled ones).
    """
    _fits, held = _serving_rows(rows if rows is not None else load_published_reference(), "h100-sxm")
    model = _model(profile if profile is not None else load_profile("h100-sxm"), None)
    out = []
    for r in held:
        assert r.value and r.batch_size and r.action
        out.append(serving_estimate(model, r.batch_size, r.action).power_w / r.value - 1.0)
    return out


if __name__ == "__main__":  # pragma: no cover
    for name, values in fit_all().items():
        print(f"[{name}]")
        for k, v in values.items():
            print(f"{k} = {v!r}")
