"""What a probed server's config gives, and what the config and the power limit picked together
would give, per batch size, on the GPU's calibrated profile (simulated): the second half of
``specband probe``.

The acceptance is fitted to the probe file as ``--acceptance-from`` fits it
(:func:`specband.sim.model.build_model` with ``acceptance_from``), starting from the pair's
bundled acceptance; a plain server gives no measured acceptance, so the bundled (or borrowed)
one is used and named. The batch sizes answered are ``-b``'s, by default the engine's tiers
(:data:`SERVER_TIERS`) and the batch sizes the server was seen running. For each, the
performance model's figures of every config the engine runs
(:class:`specband.deploy.modelsource.ModelSource`: tok/s with its 95 % interval, the server's
power with prefill mixed in where the profile has a serving fit, utilisation, J/token):

* **now**: the server's own config at the GPU's limit now (NVML's when read, else the profile's);
* **the pick**: the config and the limit picked together
  (:func:`specband.deploy.jointpick.joint_pick`, as a first guess picks them): a limit inside
  the band by the model's own figures, or the answer says the band cannot be reached;
* the best config at the limit now is in the notes (for a GPU whose limit cannot be changed).

The rows make one :class:`~specband.deploy.table.AnswerTable`, as ``recommend`` prints it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specband.contract.actions import as_action
from specband.core.errors import SpecbandError
from specband.deploy.explain import LimitRange
from specband.deploy.firstguess import guess_from
from specband.deploy.jointpick import Candidate, ServingWorkload
from specband.deploy.modelsource import ModelSource, profile_range
from specband.deploy.table import AnswerTable, answer_table, current_row, table_row
from specband.engines.base import Engine
from specband.engines.probing import ServerReading
from specband.engines.schedule_files import SGLANG_DEFAULT_ADAPTIVE_CONFIG
from specband.sim.model import build_model
from specband.sim.profile import builtin_profiles, load_profile
from specband.sim.speed_interval import acceptance_notes

__all__ = ["SERVER_TIERS", "ProbeSimulation", "profile_for_gpu", "simulate_probe"]

#: The batch sizes a server is answered for by default: sglang 0.5.23's default adaptive tiers
#: (``DEFAULT_ADAPTIVE_CONFIG`` keys, :data:`specband.engines.schedule_files.SGLANG_DEFAULT_ADAPTIVE_CONFIG`);
#: vLLM has no tiers of its own, so a vLLM server takes the same ladder.
SERVER_TIERS: tuple[int, ...] = tuple(sorted(int(k) for k in SGLANG_DEFAULT_ADAPTIVE_CONFIG))


@dataclass(frozen=True)
class ProbeSimulation:
    """What ``specband probe`` prints as simulated.

    Attributes:
        profile: the profile's name; hardware: its GPU.
        acceptance: where the acceptance comes from (``"fitted to 1 config of probe.json"``,
            ``"profile NAME"``, ``"borrowed NAME"``).
        residuals: one line per fitted config (measured vs fitted accept length).
        current_limit_w: the GPU's limit now, W, and ``limit_source`` where it came from.
        table: per batch size the server's config now (``role`` ``"current"``) and the pick
            (:class:`~specband.deploy.table.AnswerTable`).
        best_at_current: per batch size the best config by reward at the limit now.
        notes: lines to print beside them (the pair, the calibration, the power, what was assumed).
    """

    profile: str
    hardware: str
    acceptance: str
    residuals: tuple[str, ...]
    current_limit_w: float
    limit_source: str
    table: AnswerTable
    best_at_current: dict[int, Candidate]
    notes: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """JSON of the simulation (every figure labelled with its source)."""
        return {
            "provenance": "simulated",
            "profile": self.profile,
            "hardware": self.hardware,
            "acceptance": self.acceptance,
            "current_limit_w": self.current_limit_w,
            "limit_source": self.limit_source,
            "table": self.table.to_json(),
            "best_at_current": {str(bs): c.to_json() for bs, c in self.best_at_current.items()},
            "notes": list(self.notes),
        }


def profile_for_gpu(gpu_name: str | None) -> str | None:
    """The built-in profile whose GPU model (the first part of its ``hardware``: ``H200`` of
    ``H200_SXM_141GB``, ``RTX4060`` of ``RTX4060_Laptop``) is in the name NVML reports
    (``"NVIDIA H200"`` -> ``h200``; letters and digits compared, case ignored), or ``None``."""
    if not gpu_name:
        return None
    name = "".join(c for c in gpu_name.lower() if c.isalnum())
    for profile in builtin_profiles():
        model = load_profile(profile).hardware.split("_")[0].lower()
        if model and model in name:
            return profile
    return None


def _local_config(path: str | None) -> str | None:
    if path and (Path(path) / "config.json").is_file():
        return path
    return None


def _configs(
    reading: ServerReading, target: str | None, draft: str | None
) -> tuple[str | None, str | None, str | None]:
    """The pair to simulate and the note about it: ``--target-config``/``--draft-config`` when
    given (one alone only of a bundled pair, :func:`specband.sim.model.model_pair`), else the
    server's own folders when both are local, else the bundled pair."""
    if target is not None or draft is not None:
        return target, draft, None
    local_target, local_draft = _local_config(reading.target), _local_config(reading.draft)
    if local_target and local_draft:
        return local_target, local_draft, f"simulated pair: the server's own folders ({local_target}, {local_draft})"
    return (
        None,
        None,
        (
            "simulated pair: the bundled Llama-3.2-1B pair (the server's "
            + ("draft is not named" if reading.draft is None else "models are not local folders")
            + "; pass --target-config and --draft-config for its sizes)"
        ),
    )


def _range(model: Any, limits_w: tuple[float, float] | None) -> tuple[LimitRange, str | None]:
    """The GPU's range: NVML's when it read one, else the profile's (and a note when NVML's makes none)."""
    profile = profile_range(model)
    if limits_w is None:
        return profile, None
    low, high = limits_w
    if not 0 < low < high:
        return profile, f"NVML's limits {low:g}-{high:g} W make no range: the profile's are used"
    return LimitRange(low, high, "NVML's constraints on the server's GPU (measured)"), None


def _current(
    source: ModelSource, reading: ServerReading, bs: int, limit_w: float, notes: list[str]
) -> Candidate | None:
    try:
        found = source.figure(bs, as_action(reading.action), limit_w)
    except SpecbandError as exc:
        notes.append(f"the server's config {tuple(reading.action)} cannot be simulated: {exc}")
        return None
    if found is None:
        notes.append(f"batch size {bs}: the server's config {tuple(reading.action)} does not fit in memory here")
    return found


def simulate_probe(
    reading: ServerReading,
    probe_file: Path,
    engine: Engine,
    profile: str,
    *,
    current_limit_w: float | None = None,
    limits_w: tuple[float, float] | None = None,
    target_config: str | None = None,
    draft_config: str | None = None,
    batch_sizes: Sequence[int] | None = None,
    workload: ServingWorkload | None = None,
) -> ProbeSimulation:
    """Simulate the probed server's configs on ``profile`` (see the module docstring).

    Args:
        reading: what the probe read; probe_file: the probe file written from it (its
            acceptance is fitted through ``--acceptance-from``'s reader).
        engine: the server's engine (the configs it can run).
        profile: a built-in profile or a profile file.
        current_limit_w: the GPU's limit as NVML read it (``None``: the profile's).
        limits_w: the GPU's ``(min, max)`` limits as NVML read them (``None``: the profile's range).
        target_config, draft_config: the pair's configs (both or neither).
        batch_sizes: the batch sizes to answer (``None``: :data:`SERVER_TIERS` and those seen).
        workload: the prompt and output lengths the serving power is for (``None``: the fit's).

    Raises:
        ConfigError: a bad profile or config, or one of the two configs alone.
    """
    target, draft, pair_note = _configs(reading, target_config, draft_config)
    measured = reading.acceptance is not None and reading.action != (0, 0, 0)
    inner = build_model(
        profile, target_config=target, draft_config=draft, acceptance_from=probe_file if measured else None
    )
    notes = [pair_note] if pair_note else []
    notes += list(inner.warnings)
    rng, range_note = _range(inner, limits_w)
    notes += [range_note] if range_note else []
    current, limit_source = rng.max_w, "the profile's default" if limits_w is None else "NVML's maximum"
    if current_limit_w is not None and rng.min_w <= current_limit_w <= rng.max_w:
        current, limit_source = float(current_limit_w), "NVML (measured)"
    elif current_limit_w is not None:
        notes.append(f"NVML's limit {current_limit_w:g} W is outside {round(rng.min_w, 1):g}-{round(rng.max_w, 1):g} "
                     "W: the highest is taken as the limit now")  # fmt: skip
    sizes = sorted(set(batch_sizes) if batch_sizes else {*SERVER_TIERS, *reading.batch_sizes_seen})
    source = ModelSource(inner, engine.actions, workload=workload, limit_range=rng, default_limit_w=current)
    rows, answers, best = [], [], {}
    for bs in sizes:
        try:
            guess = guess_from(source, bs, calibration_profile=profile, draft_model=reading.draft, engine=engine)
        except SpecbandError as exc:  # no config fits in memory at this batch size
            notes.append(str(exc))
            continue
        answers.append(guess)
        now = _current(source, reading, bs, current, notes)
        if now is not None:
            rows.append(current_row(guess, now))
        rows.append(table_row(guess))
        at_current = source.candidates(bs, current)
        if at_current:
            best[bs] = max(at_current, key=lambda c: (c.reward, c.speed_tok_s.value))
            b = best[bs]
            util = "" if b.utilization is None else f", utilisation {b.utilization.value:.3f}"
            notes.append(
                f"bs {bs}: best at the limit now ({current:g} W): {b.action}, {b.speed_tok_s.value:.1f} tok/s{util}"
            )
    if not answers:
        raise SpecbandError(f"no batch size of {sizes} fits in memory on {inner.profile.name}")
    notes += [line for line in acceptance_notes(inner) if not line.startswith("fit residual")]
    table = _with_rows(answer_table(answers, reading.draft), rows, notes)
    fit = inner.acceptance.fit
    return ProbeSimulation(
        profile=inner.profile.name,
        hardware=inner.profile.hardware,
        acceptance=inner.acceptance.source,
        residuals=tuple(fit.residual_lines()) if fit is not None else (),
        current_limit_w=current,
        limit_source=limit_source,
        table=table,
        best_at_current=best,
        notes=tuple(notes),
    )


def _with_rows(table: AnswerTable, rows: list[Any], notes: list[str]) -> AnswerTable:
    """``table`` with the server's config now beside each pick, and the probe's notes first."""
    return dataclasses.replace(table, rows=tuple(rows), notes=(*notes, *table.notes))
