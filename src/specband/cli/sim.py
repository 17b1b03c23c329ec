"""``specband simulate``: a simulated sweep from the calibrated performance model, and the
model's calibration report (registered by :func:`register`)."""

from __future__ import annotations

import sys

import typer

from specband.cli.output import say
from specband.cli.params import request_command
from specband.sim.request import SimulateRequest


def _aic_report(profile: str | None, *, refit: bool, write_profile: str | None, force: bool) -> None:
    """``--calibration-report --against aic [--refit [--write-profile FILE]]``: compare (and
    refit) one profile, or every profile of the bundled AIC reference."""
    from specband.errors import ConfigError
    from specband.sim.aic import (
        aic_report,
        fit_profile_to_aic,
        format_aic_fit,
        format_aic_report,
        load_aic_reference,
    )

    data = load_aic_reference()
    chosen: list = [profile] if profile is not None else list(data.profiles)
    if write_profile is not None and len(chosen) != 1:
        raise ConfigError("--write-profile with --against aic needs --profile (one profile to write)")
    if refit:
        fits = [fit_profile_to_aic(name, data) for name in chosen]
        for fit in fits:
            typer.echo(format_aic_fit(fit))
        typer.echo("")
        chosen = [fit.profile for fit in fits]
        if write_profile is not None:
            from specband.sim.calibrate import write_profile as write_fn

            header = f"refitted from profile {profile} to {data.label} by specband simulate --refit --against aic"
            write_fn(fits[0].profile, write_profile, header=header, overwrite=force)
            say(f"wrote {write_profile}", err=True)
    typer.echo(format_aic_report(aic_report(chosen, data)))


def register(app: typer.Typer) -> None:
    """Add ``simulate`` to ``app``."""
    app.command("simulate")(simulate)


@request_command(SimulateRequest)
def simulate(request: SimulateRequest) -> None:
    """Simulate a sweep (rows marked "provenance": "simulated") or print the calibration report."""
    from specband.sim import build_model, check_out_path

    r = request
    if r.list_profiles:
        _list_profiles()
        return
    if r.against == "published-datacenter":  # checked: with --calibration-report, --profile alone
        from specband.sim.published import format_published_report, published_report

        typer.echo(format_published_report(published_report(r.profile)))
        return
    if r.calibration_report:
        if r.write_profile is not None:
            check_out_path(r.write_profile, overwrite=r.force, option="--write-profile")
        if r.against == "aic":
            _aic_report(r.profile, refit=r.refit, write_profile=r.write_profile, force=r.force)
            return
    else:
        from specband.batchlist import parse_batch_sizes

        assert r.out is not None  # checked when the request was built
        out_path = check_out_path(r.out, overwrite=r.force)
        sizes = parse_batch_sizes(r.batch_sizes)
        from specband.actions import action_set

        chosen_actions = action_set(r.actions)
    profile = r.profile or "rtx4060-laptop"
    model = build_model(profile, target_config=r.target_config, draft_config=r.draft_config, workload=r.workload)
    for warning in model.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if r.calibration_report:
        _calibration_report(model, profile, r)
        return
    from specband.sim import simulate_power_limits, simulate_sweep, write_sweep

    if r.power_limits is not None:
        from specband.sim.power_limit import resolve_model_power_limits

        limits_w, notes = resolve_model_power_limits(model, r.power_limits)
        for line in notes:
            say(f"note: {line}", err=True)
        rows = simulate_power_limits(
            model, limits_w, batch_sizes=sizes, repeats=r.repeats, seed=r.seed, actions=chosen_actions
        )
        say(
            f"note: {len(limits_w)} power limit(s) {limits_w[0]:g}-{limits_w[-1]:g} W applied on top of the "
            "model's power (DVFS: power above idle ~ clock^clock_exponent, compute-bound kernel time ~ 1/clock; "
            "specband.sim.power_limit)",
            err=True,
        )
    else:
        rows = simulate_sweep(model, batch_sizes=sizes, repeats=r.repeats, seed=r.seed, actions=chosen_actions)
    write_sweep(rows, out_path, overwrite=r.force)
    errors = sum(1 for row in rows if row["error"])
    mark = "" if model.profile.calibrated else " [UNCALIBRATED profile]"
    if model.profile.power_source and not model.profile.power_measured:
        mark += " [power: published fit, rows carry power_source]"
    elif not model.profile.power_measured:
        mark += " [power UNMEASURED: rows carry power_w_range]"
    if r.actions != "contract":
        mark += f" [{r.actions} action set: {len(chosen_actions)} actions]"
    say(
        f"SIMULATED sweep: {len(rows)} rows ({errors} error rows) from profile {model.profile.name}{mark}, "
        f"seed {r.seed} -> {out_path}"
    )


def _list_profiles() -> None:
    from specband.sim import builtin_profiles, load_profile

    for name in builtin_profiles():
        prof = load_profile(name)
        mark = "calibrated" if prof.calibrated else "UNCALIBRATED (datasheet)"
        if prof.power_source and not prof.power_measured:
            mark += ", power: published fit"
        elif not prof.power_measured:
            mark += ", power UNMEASURED"
        typer.echo(f"{name:16} {prof.hardware:18} {prof.power_limit_w:6.0f} W {prof.vram_mb / 1024:6.1f} GiB  {mark}")


def _calibration_report(model: object, profile: str, r: SimulateRequest) -> None:
    """``--calibration-report`` against the published rows (``--refit`` first)."""
    from specband.sim.calibrate import calibration_report as report_fn
    from specband.sim.calibrate import format_fit, format_report, refit_profile
    from specband.sim.calibrate import write_profile as write_fn
    from specband.sim.model import SpeculativeDecodingModel

    if r.refit:
        result = refit_profile(model, noise=True)  # type: ignore[arg-type]
        fitted = result.profile
        typer.echo(format_fit(result))
        typer.echo("")
        model = SpeculativeDecodingModel(fitted, model.target, model.draft)  # type: ignore[attr-defined]
        if r.write_profile is not None:
            header = f"refitted from profile {profile} by specband simulate --refit"
            write_fn(fitted, r.write_profile, header=header, overwrite=r.force)
            say(f"wrote {r.write_profile}", err=True)
    typer.echo(format_report(report_fn(model)))  # type: ignore[arg-type]
