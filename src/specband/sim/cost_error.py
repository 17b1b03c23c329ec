"""The calibration error of a profile's cost side: its step time, given the measured accept length.

A simulated speed is ``accept_length / step_time``. Acceptance belongs to the workload
(:mod:`specband.sim.acceptance_fit`); the step time belongs to the GPU, the model pair and the
config, and is what a hardware profile is calibrated for. :func:`cost_error` holds a profile's
step time to the measured rows that carry both a speed and an accept length of one config
(measured step = accept length / speed):

* the published datacenter rows (``published_datacenter.json``, e.g. SpecForge SpecBundle on
  H200: Llama-3.1-8B + EAGLE3, MT-bench, bs 1), simulated with the bundled configs of that pair;
* the published RTX 4060 Laptop live rows (``rtx4060_published_live.jsonl``), with the bundled
  Llama-3.2-1B pair.

Its ``sd`` is the root mean square of the relative errors (a 95 % interval is ``1.96 x sd``
either way); a profile no measured row holds gets :data:`UNHELD_COST_SD`, stated, not measured.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache

from specband.sim.model import SpeculativeDecodingModel, build_model
from specband.sim.profile import HardwareProfile
from specband.sim.published_rows import DRAFT_CONFIG, TARGET_CONFIG, load_published_reference
from specband.sweeps.dataset import load_sweep

__all__ = ["MIN_ROWS", "UNHELD_COST_SD", "CostError", "cost_error"]

#: Relative sd of the step time of a profile that no measured row holds (a datasheet or
#: AIConfigurator-fitted profile, a profile file): 5 %, so that its 95 % interval is the
#: +-10 % the datacenter profiles are held to (``specband.sim.published.TOLERANCE``, issue 19).
UNHELD_COST_SD = 0.05
#: Fewer measured rows than this say too little about a spread: the profile gets UNHELD_COST_SD.
MIN_ROWS = 3
_LIVE_PROFILE = "rtx4060-laptop"


@dataclass(frozen=True)
class CostError:
    """A profile's step-time error against measured rows.

    Attributes:
        profile: the profile's name.
        sd: relative sd of the simulated step time (RMS of the relative errors, or
            :data:`UNHELD_COST_SD`).
        median_abs_error, worst_abs_error: of the rows (``None`` without rows).
        rows: measured rows compared.
        basis: where the figure comes from, in words.
        target, draft: the pair the rows were measured with (``ModelSpec.name``), or ``None``
            without rows.
    """

    profile: str
    sd: float
    median_abs_error: float | None
    worst_abs_error: float | None
    rows: int
    basis: str
    target: str | None = None
    draft: str | None = None

    def describe(self) -> str:
        """One line: the error and its basis."""
        if self.rows < MIN_ROWS or self.median_abs_error is None or self.worst_abs_error is None:
            return f"step time of profile {self.profile}: {self.basis}; sd {self.sd:.1%} stated"
        return (
            f"step time of profile {self.profile} given the measured accept length: "
            f"median {self.median_abs_error:.1%}, worst {self.worst_abs_error:.1%} over {self.rows} rows "
            f"({self.basis}); sd {self.sd:.1%}"
        )


def _published_errors(profile: HardwareProfile) -> tuple[list[float], SpeculativeDecodingModel]:
    pairs: dict[tuple, dict[str, float]] = defaultdict(dict)
    for row in load_published_reference():
        if row.profile != profile.name or not row.criteria or row.value is None or row.action is None:
            continue
        if row.metric in ("speed_tok_s", "accept_length") and row.batch_size is not None:
            pairs[(row.source, row.workload, row.batch_size, row.action)][row.metric] = row.value
    model = build_model(profile, target_config=TARGET_CONFIG, draft_config=DRAFT_CONFIG)
    errors = []
    for (_src, _wl, bs, action), metrics in sorted(pairs.items(), key=lambda kv: str(kv[0])):
        speed = metrics.get("speed_tok_s")
        accept = 1.0 if action.is_baseline else metrics.get("accept_length")
        if speed is None or accept is None:
            continue
        step = model.predict(bs, action, profile.reference_temp_c).step_time_s
        errors.append(step / (accept / speed) - 1.0)
    return errors, model


def _live_errors(profile: HardwareProfile) -> tuple[list[float], SpeculativeDecodingModel]:
    model = build_model(profile)
    errors = []
    for r in load_sweep().rows:
        if not r.trainable or r.speed_tok_s is None or r.accept_length is None:
            continue
        step = model.predict(r.batch_size, r.action, profile.reference_temp_c).step_time_s
        errors.append(step / (r.accept_length / r.speed_tok_s) - 1.0)
    return errors, model


@lru_cache(maxsize=16)
def cost_error(profile: HardwareProfile) -> CostError:
    """The step-time calibration error of ``profile`` (see the module docstring).

    Args:
        profile: the hardware profile (a built-in one is held to the measured rows of its GPU).

    Returns:
        the :class:`CostError`.
    """
    if profile.name == _LIVE_PROFILE:
        errors, model = _live_errors(profile)
        basis = "the published RTX 4060 Laptop live rows, Llama-3.2-1B + EAGLE3"
    else:
        errors, model = _published_errors(profile)
        basis = "published rows with a speed and an accept length, published_datacenter.json"
    abs_errors = [abs(e) for e in errors]
    if len(errors) < MIN_ROWS:
        held = f"{len(errors)} measured row(s), too few for a spread" if errors else "no measured row holds it"
        return CostError(
            profile.name,
            UNHELD_COST_SD,
            max(abs_errors) if errors else None,
            max(abs_errors) if errors else None,
            len(errors),
            f"{held}: half the +-10 % datacenter tolerance, issue 19",
        )
    pair = (model.target.name, model.draft.name)
    rms = math.sqrt(sum(e * e for e in errors) / len(errors))
    return CostError(profile.name, rms, statistics.median(abs_errors), max(abs_errors), len(errors), basis, *pair)
