"""``specband simulate``: a simulated sweep from the calibrated performance model, and the
model's calibration report (registered by :func:`register`)."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterable
from pathlib import Path

import typer

from specband.cli.output import say
from specband.cli.params import request_command
from specband.cli.progress import progress
from specband.core.errors import ConfigError
from specband.core.tables import print_table, table_console, terminal_width
from specband.doctor.pairs import refuse_named_pair
from specband.files.fileio import write_text_atomic
from specband.sim import builtin_profiles, check_out_path, load_profile
from specband.sim.aic import aic_report, fit_profile_to_aic, format_aic_fit, format_aic_report, load_aic_reference
from specband.sim.calibrate import (
    aic_refitted_provenance,
    check_rows_gpu,
    format_fit,
    format_report,
    refit_profile,
    refitted_provenance,
)
from specband.sim.calibrate import calibration_report as report_fn
from specband.sim.calibrate import write_profile as write_fn
from specband.sim.model import SpeculativeDecodingModel
from specband.sim.profile import DEFAULT_PROFILE
from specband.sim.published import format_published_report, published_report
from specband.sim.request import SimulateRequest
from specband.sim.run import calibration_model, plan_simulation, run_simulation


def _aic_report(profile: str | None, *, refit: bool, write_profile: str | None, force: bool) -> None:
    """``--calibration-report --against aic [--refit [--write-profile FILE]]``: compare (and
    refit) one profile, or every profile of the bundled AIC reference."""

    data = load_aic_reference()
    chosen: list = [profile] if profile is not None else list(data.profiles)
    if write_profile is not None and len(chosen) != 1:
        raise ConfigError("--write-profile with --against aic needs --profile (one profile to write)")
    if refit:
        data_names = list(chosen)
        fits = [fit_profile_to_aic(name, data) for name in chosen]
        for fit in fits:
            typer.echo(format_aic_fit(fit, terminal_width()))
        typer.echo("")
        chosen = [fit.profile for fit in fits]
        if write_profile is not None:
            start = str(profile or data_names[0])  # one profile to write: checked above
            fitted = aic_refitted_provenance(fits[0].profile, _refit_name(write_profile), start, data.label)
            header = f"refitted from profile {start} by specband simulate --refit --against aic\n{fitted.source}"
            write_fn(fitted, write_profile, header=header, overwrite=force)
            say(f"wrote {write_profile}", err=True)
    typer.echo(format_aic_report(aic_report(chosen, data), terminal_width()))


def _refit_name(path: str) -> str:
    """A refitted profile's name: its file's stem, with ``-refitted`` after it when that is a
    shipped profile's name (``--write-profile h100-sxm.toml`` would pass for the shipped one)."""
    stem = Path(path).stem
    return f"{stem}-refitted" if stem in builtin_profiles() else stem


def register(app: typer.Typer) -> None:
    """Add ``simulate`` to ``app``."""
    app.command("simulate")(simulate)


@request_command(SimulateRequest)
def simulate(request: SimulateRequest) -> None:
    """Simulate a sweep (rows marked "provenance": "simulated") or print the calibration report."""
    r = request
    if r.list_profiles:
        _list_profiles()
        return
    if r.calibration_report:
        if r.out is None:
            _report(r)
            return
        # --out: the report goes to the file (all or nothing), the notes stay on stderr
        out = check_out_path(r.out, overwrite=r.force, option="--out")
        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            _report(r)
        write_text_atomic(out, text.getvalue(), error=ConfigError)
        say(f"wrote the calibration report to {out}", err=True)
        return

    refuse_named_pair(r.target_config, r.draft_config)  # as doctor, recommend and launch refuse it
    plan = plan_simulation(r)
    _warn(plan.model.warnings)
    sizes = ",".join(map(str, plan.batch_sizes))
    with progress(f"specband simulate: the sweep at batch sizes {sizes} on {r.profile or DEFAULT_PROFILE}"):
        written = run_simulation(plan)
    for line in written.notes:
        say(f"note: {line}", err=True)
    say(written.summary())


def _warn(warnings: Iterable[str]) -> None:
    for warning in warnings:
        say(f"warning: {warning}", err=True)


def _report(r: SimulateRequest) -> None:
    """``--calibration-report``: against the published datacenter measurements, the AIC
    reference, or the published RTX 4060 Laptop rows (a profile of that GPU only)."""
    if r.against == "published-datacenter":  # checked: with --calibration-report, --profile alone
        typer.echo(format_published_report(published_report(r.profile), terminal_width()))
        return
    if r.against == "aic":
        if r.write_profile is not None:
            check_out_path(r.write_profile, overwrite=r.force, option="--write-profile")
        _aic_report(r.profile, refit=r.refit, write_profile=r.write_profile, force=r.force)
        return

    check_rows_gpu(load_profile(r.profile or DEFAULT_PROFILE), refit=r.refit)  # before anything is fitted
    model = calibration_model(r)
    _warn(model.warnings)
    _calibration_report(model, r.profile or DEFAULT_PROFILE, r)


def _list_profiles() -> None:
    from rich.table import Table

    table = Table(title="built-in simulator profiles", box=None, show_edge=False, pad_edge=False)
    for name, justify in (("profile", "left"), ("hardware", "left"), ("limit W", "right"), ("VRAM GiB", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    table.add_column("calibration")
    for name in builtin_profiles():
        prof = load_profile(name)
        mark = "calibrated" if prof.calibrated else "UNCALIBRATED (datasheet)"
        if prof.power_source and not prof.power_measured:
            mark += ", power: published fit"
        elif not prof.power_measured:
            mark += ", power UNMEASURED" + (
                f" (borrowed from {prof.power_borrowed_from})" if prof.power_borrowed_from else ""
            )
        table.add_row(name, prof.hardware, f"{prof.power_limit_w:.0f}", f"{prof.vram_mb / 1024:.1f}", mark)
    print_table(table, table_console())


def _calibration_report(model: object, profile: str, r: SimulateRequest) -> None:
    """``--calibration-report`` against the published rows (``--refit`` first)."""

    if r.refit:
        with progress(f"specband simulate: refitting {profile} to the published rows"):
            result = refit_profile(model, noise=True)  # type: ignore[arg-type]
        fitted = result.profile
        typer.echo(format_fit(result, terminal_width()))
        typer.echo("")
        model = SpeculativeDecodingModel(fitted, model.target, model.draft)  # type: ignore[attr-defined]
        if r.write_profile is not None:
            fitted = refitted_provenance(result, _refit_name(r.write_profile))
            header = f"refitted from profile {profile} by specband simulate --refit\n{fitted.source}"
            write_fn(fitted, r.write_profile, header=header, overwrite=r.force)
            say(f"wrote {r.write_profile}", err=True)
    with progress("specband simulate: the calibration report"):
        report = report_fn(model)  # type: ignore[arg-type]
    typer.echo(format_report(report, terminal_width()))
