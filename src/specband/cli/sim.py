"""``specband simulate``: a simulated sweep from the calibrated performance model, and the
model's calibration report (registered by :func:`register`)."""

from __future__ import annotations

import sys

import typer

from specband.cli.core import say
from specband.cli.options import check_batch_size_list
from specband.limits import MAX_REPEATS, MAX_SEED


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

    @app.command("simulate")
    def simulate(
        profile: str | None = typer.Option(
            None,
            "--profile",
            metavar="PROFILE",
            help="built-in profile (rtx4060-laptop, a100-sxm4-80gb, h100-sxm, h200) or a TOML/JSON file whose "
            "[hardware] sets hardware (the GPU name), power_limit_w, vram_mb, mem_bandwidth_gbs, peak_tflops "
            "and idle_power_w (default: rtx4060-laptop; with --against aic: every profile the reference covers)",
        ),
        target_config: str | None = typer.Option(
            None,
            "--target-config",
            metavar="CONFIG",
            help="target model's Hugging Face config.json, or a bundled name (default: llama-3.2-1b-instruct)",
        ),
        draft_config: str | None = typer.Option(
            None,
            "--draft-config",
            metavar="CONFIG",
            help="EAGLE3 draft head's config.json, or a bundled name (default: eagle3-llama-3.2-1b-instruct)",
        ),
        workload: str | None = typer.Option(
            None,
            "--workload",
            metavar="NAME",
            help="acceptance profile's workload (e.g. mt-bench; default: the model pair's own, mt-bench for the "
            "Llama-3.1-8B pair); a pair or workload no profile covers borrows one and says which",
        ),
        actions: str = typer.Option(
            "contract",
            "--actions",
            metavar="SET",
            help="action set of the sweep: 'contract' (the 19 actions) or 'extended' (sglang "
            "bench_speculative.py's full grid: steps 0-7, topk up to 8, draft tokens up to 32; 44 actions)",
        ),
        batch_sizes: str = typer.Option(
            "1,4,8,16",
            "--batch-sizes",
            metavar="LIST",
            help="batch sizes of a pass, each once, e.g. '1,4,8,16'",
            callback=check_batch_size_list,
        ),
        repeats: int = typer.Option(
            3, "--repeats", min=1, max=MAX_REPEATS, metavar="N", help="full passes over batch sizes x actions"
        ),
        seed: int = typer.Option(
            0, "--seed", metavar="N", help="noise seed: the same seed gives the same file", max=MAX_SEED
        ),
        out: str | None = typer.Option(
            None, "--out", metavar="FILE", help="JSONL file to write (sweep schema); an existing one needs --force"
        ),
        calibration_report: bool = typer.Option(
            False,
            "--calibration-report",
            help="print predicted vs measured for every published row, median/worst errors and targets",
        ),
        against: str = typer.Option(
            "published",
            "--against",
            metavar="REF",
            help="with --calibration-report: 'published' (the RTX 4060 Laptop live rows), 'aic' (bundled "
            "AIConfigurator sglang step times of the datacenter GPUs, plus sglang's docs) or 'published-datacenter' "
            "(published H100/H200 speeds, accept lengths and power, each row with its source)",
        ),
        refit: bool = typer.Option(
            False,
            "--refit",
            help="with --calibration-report: refit the profile to the published rows first; prints each "
            "refitted parameter (before -> after) and the fit costs",
        ),
        write_profile: str | None = typer.Option(
            None, "--write-profile", metavar="FILE", help="with --refit: write the refitted profile to this TOML file"
        ),
        power_limits: str | None = typer.Option(
            None,
            "--power-limits",
            metavar="LIST",
            help="simulate the sweep at each power limit (nvidia-smi -pl): watts '300,450,700', fractions of "
            "the profile's limit '0.6,0.8,1.0', or LOW:HIGH:STEP ('200:700:10'); the limit is applied on top "
            "of the model's power (DVFS)",
        ),
        list_profiles: bool = typer.Option(False, "--list-profiles", help="list the built-in profiles and exit"),
        force: bool = typer.Option(False, "--force", help="replace --out / --write-profile if it exists"),
    ) -> None:
        """Simulate a sweep (rows marked "provenance": "simulated") or print the calibration report."""
        from specband.errors import ConfigError
        from specband.sim import build_model, builtin_profiles, check_out_path, load_profile

        if list_profiles:
            for name in builtin_profiles():
                prof = load_profile(name)
                mark = "calibrated" if prof.calibrated else "UNCALIBRATED (datasheet)"
                if prof.power_source and not prof.power_measured:
                    mark += ", power: published fit"
                elif not prof.power_measured:
                    mark += ", power UNMEASURED"
                typer.echo(
                    f"{name:16} {prof.hardware:18} {prof.power_limit_w:6.0f} W {prof.vram_mb / 1024:6.1f} GiB  {mark}"
                )
            return
        for option, value in (("--target-config", target_config), ("--draft-config", draft_config)):
            if value is not None and not value.strip():
                raise ConfigError(f"{option}: empty; give a config.json path or a bundled name")
        if power_limits is not None and calibration_report:
            raise ConfigError("--power-limits goes with --out (a simulated sweep), not --calibration-report")
        if (refit or write_profile is not None) and not calibration_report:
            raise ConfigError("--refit and --write-profile go with --calibration-report")
        if against not in ("published", "aic", "published-datacenter"):
            raise ConfigError(f"--against must be 'published', 'aic' or 'published-datacenter', got {against!r}")
        if against == "published-datacenter":
            if not calibration_report:
                raise ConfigError("--against goes with --calibration-report")
            if refit or target_config is not None or draft_config is not None or workload is not None:
                raise ConfigError(
                    "--against published-datacenter takes only --profile (the rows name their model pair, "
                    "workload and GPU; the fit is python -m specband.sim.published_fit)"
                )
            from specband.sim.published import format_published_report, published_report

            typer.echo(format_published_report(published_report(profile)))
            return
        if against == "aic":
            if not calibration_report:
                raise ConfigError("--against goes with --calibration-report")
            if target_config is not None or draft_config is not None:
                raise ConfigError(
                    "--target-config/--draft-config do not go with --against aic (the reference names its model pairs)"
                )
        if write_profile is not None and not refit:
            raise ConfigError("--write-profile needs --refit")
        if calibration_report:
            if write_profile is not None:
                check_out_path(write_profile, overwrite=force, option="--write-profile")
            if against == "aic":
                _aic_report(profile, refit=refit, write_profile=write_profile, force=force)
                return
        elif out is None:
            raise ConfigError("--out FILE is required (or --calibration-report / --list-profiles)")
        else:
            out_path = check_out_path(out, overwrite=force)
            from specband.batchlist import parse_batch_sizes

            sizes = parse_batch_sizes(batch_sizes)
            from specband.actions import action_set

            chosen_actions = action_set(actions)
            if seed < 0:
                raise ConfigError(f"--seed must be >= 0, got {seed}")
        profile = profile or "rtx4060-laptop"
        model = build_model(profile, target_config=target_config, draft_config=draft_config, workload=workload)
        for warning in model.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        if calibration_report:
            from specband.sim.calibrate import calibration_report as report_fn
            from specband.sim.calibrate import format_fit, format_report, refit_profile
            from specband.sim.calibrate import write_profile as write_fn
            from specband.sim.model import SpeculativeDecodingModel

            if refit:
                result = refit_profile(model, noise=True)
                fitted = result.profile
                typer.echo(format_fit(result))
                typer.echo("")
                model = SpeculativeDecodingModel(fitted, model.target, model.draft)
                if write_profile is not None:
                    header = f"refitted from profile {profile} by specband simulate --refit"
                    write_fn(fitted, write_profile, header=header, overwrite=force)
                    say(f"wrote {write_profile}", err=True)
            typer.echo(format_report(report_fn(model)))
            return
        from specband.sim import simulate_power_limits, simulate_sweep, write_sweep

        if power_limits is not None:
            from specband.sim.power_limit import resolve_model_power_limits

            limits_w, notes = resolve_model_power_limits(model, power_limits)
            for note in notes:
                say(f"note: {note}", err=True)
            rows = simulate_power_limits(
                model, limits_w, batch_sizes=sizes, repeats=repeats, seed=seed, actions=chosen_actions
            )
            say(
                f"note: {len(limits_w)} power limit(s) {limits_w[0]:g}-{limits_w[-1]:g} W applied on top of the "
                "model's power "
                "(DVFS: power above idle ~ clock^clock_exponent, compute-bound kernel time ~ 1/clock; "
                "specband.sim.power_limit)",
                err=True,
            )
        else:
            rows = simulate_sweep(model, batch_sizes=sizes, repeats=repeats, seed=seed, actions=chosen_actions)
        write_sweep(rows, out_path, overwrite=force)
        errors = sum(1 for r in rows if r["error"])
        mark = "" if model.profile.calibrated else " [UNCALIBRATED profile]"
        if model.profile.power_source and not model.profile.power_measured:
            mark += " [power: published fit, rows carry power_source]"
        elif not model.profile.power_measured:
            mark += " [power UNMEASURED: rows carry power_w_range]"
        if actions != "contract":
            mark += f" [{actions} action set: {len(chosen_actions)} actions]"
        say(
            f"SIMULATED sweep: {len(rows)} rows ({errors} error rows) from profile {model.profile.name}{mark}, "
            f"seed {seed} -> {out_path}"
        )
