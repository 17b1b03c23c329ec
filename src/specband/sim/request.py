"""``specband simulate`` as data: :class:`SimulateRequest`, every option declared once
(:mod:`specband.core.optionspec`) and checked when the request is built."""

from __future__ import annotations

from dataclasses import dataclass

from specband.contract.actions import ACTION_SETS, ActionSet, action_set_field
from specband.contract.actions import action_set as named_action_set
from specband.core.batchlist import check_batch_size_bound
from specband.core.errors import ConfigError
from specband.core.limits import MAX_REPEATS, MAX_SEED
from specband.core.optionspec import acceptance_from_field, option
from specband.devices.power_limit import parse_power_limits
from specband.sim.parallel import MAX_TP

__all__ = ["SimulateRequest"]


@dataclass(frozen=True)
class SimulateRequest:
    """Every option of ``specband simulate``.

    Raises:
        ConfigError: an empty config, a calibration option without ``--calibration-report``,
            ``--acceptance-from`` or ``--tp`` with ``--calibration-report``,
            a bad ``--against``, or no ``--out`` for a simulated sweep (one line each).
    """

    profile: str | None = option(
        None,
        "--profile",
        help="Built-in profile (rtx4060-laptop, a100-sxm4-80gb, h100-sxm, h200) or a TOML/JSON file whose "
        "[hardware] sets hardware (the GPU name), power_limit_w, vram_mb, mem_bandwidth_gbs, peak_tflops "
        "and idle_power_w (default: rtx4060-laptop; with --against aic: every profile the reference covers).",
        panel="model",
        metavar="PROFILE",
        show_default=False,
    )
    target_config: str | None = option(
        None,
        "--target-config",
        help="Target model's Hugging Face config.json, or a bundled name (default: llama-3.2-1b-instruct); needs "
        "--draft-config unless it is a bundled target (its bundled head comes with it).",
        panel="model",
        metavar="CONFIG",
        show_default=False,
    )
    draft_config: str | None = option(
        None,
        "--draft-config",
        help="EAGLE3 draft head's config.json, or a bundled name (default: eagle3-llama-3.2-1b-instruct); needs "
        "--target-config unless it is a bundled head.",
        panel="model",
        metavar="CONFIG",
        show_default=False,
    )
    workload: str | None = option(
        None,
        "--workload",
        help="Acceptance profile's workload (e.g. mt-bench; default: the model pair's own, mt-bench for the "
        "Llama-3.1-8B pair); a pair or workload no profile covers borrows one and says which.",
        panel="model",
        metavar="NAME",
        show_default=False,
    )
    acceptance_from: str | None = acceptance_from_field("the simulation")
    tp: int = option(
        1,
        "--tp",
        help="Tensor-parallel degree: the target and its EAGLE3 head split over N GPUs of the profile's kind "
        "(all-reduces over its interconnect); power, utilisation and the limit are per GPU, J/token over all N.",
        panel="model",
        metavar="N",
        min=1,
        max=MAX_TP,
    )
    actions: str = action_set_field("the simulated sweep")
    batch_sizes: str = option(
        "1,4,8,16",
        "--batch-sizes",
        help="Batch sizes of a pass, each once, e.g. '1,4,8,16'.",
        panel="grid",
        metavar="LIST",
        check=check_batch_size_bound,
    )
    repeats: int = option(
        3,
        "--repeats",
        help="Full passes over batch sizes x actions.",
        panel="grid",
        metavar="N",
        min=1,
        max=MAX_REPEATS,
    )
    seed: int = option(
        0, "--seed", help="Noise seed: the same seed gives the same file.", panel="grid", metavar="N", max=MAX_SEED
    )
    out: str | None = option(
        None,
        "--out",
        help="JSONL file to write (sweep schema); an existing one needs --force.",
        panel="output",
        metavar="FILE",
        show_default=False,
    )
    force: bool = option(False, "--force", help="Replace --out / --write-profile if it exists.", panel="output")
    calibration_report: bool = option(
        False,
        "--calibration-report",
        help="Print predicted vs measured for every published row, median/worst errors and targets.",
        panel="calibration",
    )
    against: str = option(
        "published",
        "--against",
        help="With --calibration-report: 'published' (the RTX 4060 Laptop live rows), 'aic' (bundled "
        "AIConfigurator sglang step times of the datacenter GPUs, plus sglang's docs) or 'published-datacenter' "
        "(published H100/H200 speeds, accept lengths and power, each row with its source).",
        panel="calibration",
        metavar="REF",
    )
    refit: bool = option(
        False,
        "--refit",
        help="With --calibration-report: refit the profile to the published rows first; prints each "
        "refitted parameter (before -> after) and the fit costs.",
        panel="calibration",
    )
    write_profile: str | None = option(
        None,
        "--write-profile",
        help="With --refit: write the refitted profile to this TOML file.",
        panel="calibration",
        metavar="FILE",
        show_default=False,
    )
    list_profiles: bool = option(False, "--list-profiles", help="List the built-in profiles and exit.", panel="model")
    power_limits: str | None = option(
        None,
        "--power-limits",
        help="Simulate the sweep at each power limit (nvidia-smi -pl): watts '300,450,700', fractions of the "
        "profile's limit '0.6,0.8,1.0', or LOW:HIGH:STEP ('200:700:5'); the limit is applied on top of the "
        "model's power (DVFS, specband.sim.power_capped).",
        panel="grid",
        metavar="LIST",
        show_default=False,
    )

    def _check_power_limits(self) -> None:
        """``--power-limits``: a list :func:`~specband.devices.power_limit.parse_power_limits`
        takes, with a simulated sweep; ``--acceptance-from`` with a simulated sweep too
        (ConfigError, one line)."""

        if self.tp != 1 and self.calibration_report:
            raise ConfigError("--tp goes with --out (a simulated sweep), not --calibration-report")
        if self.acceptance_from is not None and self.calibration_report:
            raise ConfigError("--acceptance-from goes with --out (a simulated sweep), not --calibration-report")
        if self.power_limits is None:
            return
        if self.calibration_report:
            raise ConfigError("--power-limits goes with --out (a simulated sweep), not --calibration-report")
        parse_power_limits(self.power_limits)

    def __post_init__(self) -> None:

        if self.list_profiles:
            return
        for flag, value in (("--target-config", self.target_config), ("--draft-config", self.draft_config)):
            if value is not None and not value.strip():
                raise ConfigError(f"{flag}: empty; give a config.json path or a bundled name")
        if (self.refit or self.write_profile is not None) and not self.calibration_report:
            raise ConfigError("--refit and --write-profile go with --calibration-report")
        if self.against not in ("published", "aic", "published-datacenter"):
            raise ConfigError(f"--against must be 'published', 'aic' or 'published-datacenter', got {self.against!r}")
        if self.against == "published-datacenter":
            if not self.calibration_report:
                raise ConfigError("--against goes with --calibration-report")
            if self.refit or self.target_config is not None or self.draft_config is not None or self.workload:
                raise ConfigError(
                    "--against published-datacenter takes only --profile (the rows name their model pair, "
                    "workload and GPU; the fit is python -m specband.sim.published_fit)"
                )
        if self.against == "aic":
            if not self.calibration_report:
                raise ConfigError("--against goes with --calibration-report")
            if self.target_config is not None or self.draft_config is not None:
                raise ConfigError(
                    "--target-config/--draft-config do not go with --against aic (the reference names its model pairs)"
                )
        if self.write_profile is not None and not self.refit:
            raise ConfigError("--write-profile needs --refit")
        self._check_power_limits()
        if not self.calibration_report and self.out is None:
            raise ConfigError("--out FILE is required (or --calibration-report / --list-profiles)")
        if self.seed < 0:
            raise ConfigError(f"--seed must be >= 0, got {self.seed}")
        named_action_set(self.actions)  # an unknown --actions, naming the option

    @property
    def action_set(self) -> ActionSet:
        """The set ``--actions`` names: the actions every pass simulates."""
        return ACTION_SETS[self.actions]
