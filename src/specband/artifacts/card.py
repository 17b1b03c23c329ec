"""The model card (``README.md``) that ``specband train`` writes into an artifact folder.

YAML front matter the Hugging Face hub reads (``library_name``, ``license``, ``tags``,
``datasets``, ``base_model``) and a body like the study's card (docs/model_card.txt):
hardware and power limit, target and draft, the I/O contract, the pick per batch size with
its reward and utilisation, how each file loads, where the data came from. Every figure
comes from the sweep or the manifest; what they do not hold is left out, never guessed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from specband import __version__
from specband.artifacts.folder import ARTIFACT_FILES, SweepRecord
from specband.contract.actions import EXTENDED_ACTIONS
from specband.contract.record import row_engine
from specband.contract.reward import band_status
from specband.policies.registry import REGISTRY

if TYPE_CHECKING:
    from specband.artifacts.folder import Manifest
    from specband.artifacts.pick_table import PickRow
    from specband.sweeps.dataset import Sweep

__all__ = ["LICENSE", "RECIPES", "TAGS", "render_model_card"]

#: The licence of what specband writes: specband's own (pyproject.toml).
LICENSE = "apache-2.0"
#: Hub tags of every card (the engine the rows ran on is added: :func:`_engine_tags`).
TAGS: tuple[str, ...] = ("speculative-decoding", "eagle3", "energy", "contextual-bandit")
#: How each model card file loads without specband (docs/model_card.txt, "load" column;
#: :attr:`specband.policies.registry.PolicyEntry.recipe`), in the model card's order.
RECIPES: dict[str, str] = {name: entry.recipe for name, entry in REGISTRY.items()}
_STATE = {
    "contract": "[batch_size/8.0, gpu_temp_c_before/100.0, gpu_mem_used_mb/8192.0, gpu_util_pct/100.0] "
    "(memory and utilisation read after each run, as published)",
    "pre": "[batch_size/8.0, gpu_temp_c_before/100.0, gpu_mem_used_mb_before/8192.0, gpu_util_pct_before/100.0] "
    "(the idle GPU before launch)",
}


def _values(sweep: Sweep, column: str) -> list[str]:
    """Distinct non-empty values of a raw column, in first-seen order."""
    seen: dict[str, None] = {}
    for row in sweep.rows:
        value = row.raw.get(column)
        if value not in (None, ""):
            seen.setdefault(str(value), None)
    return list(seen)


def _yaml_list(key: str, items: Sequence[str]) -> list[str]:
    return [f"{key}:", *(f"- {json.dumps(item)}" for item in items)] if items else []


def _engine_tags(sweep: Sweep) -> list[str]:
    """The engines the rows ran on (a row that names none: the default engine's, the study's)."""
    return list(dict.fromkeys(str(row_engine(r.raw)[0]) for r in sweep.rows))


def _front_matter(sweep: Sweep, dataset_id: str | None) -> list[str]:
    lines = ["---", "library_name: specband", f"license: {LICENSE}"]
    lines += _yaml_list("tags", [*TAGS[:2], *_engine_tags(sweep), *TAGS[2:]])
    lines += _yaml_list("datasets", [dataset_id] if dataset_id else [])
    lines += _yaml_list("base_model", _values(sweep, "target_model") + _values(sweep, "draft_model"))
    return [*lines, "---"]


def _utilizations(sweep: Sweep) -> dict[tuple[int, int], float]:
    """Mean utilisation of each ``(batch size, action index)`` over the successful rows, in
    one pass (one scan per pick would be quadratic in the number of batch sizes)."""
    sums: dict[tuple[int, int], list[float]] = {}
    for r in sweep.rows:
        if r.trainable:
            u = r.utilization(sweep.power_limit_w)
            if u is not None:
                cell = sums.setdefault((r.batch_size, r.action_index), [0.0, 0.0])
                cell[0] += u
                cell[1] += 1
    return {key: total / count for key, (total, count) in sums.items()}


def _fmt(value: float | None, spec: str = ".4f") -> str:
    return "-" if value is None else format(value, spec)


def _picks(manifest: Manifest, sweep: Sweep, picks: Sequence[PickRow]) -> list[str]:

    lines = [
        "| algorithm | batch size | pick (steps, topk, draft) | mean reward | mean utilisation | band | tok/s | "
        "speed-up | rows | repeats |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    utilizations = _utilizations(sweep)
    for p in picks:
        rows = manifest.row_counts.get(p.batch_size, {}).get(p.action, 0)
        stats = manifest.stats.get(p.batch_size, {})
        mine, base = stats.get(p.action), stats.get(0)
        util = utilizations.get((p.batch_size, p.action))
        band = band_status(util)
        band_text = band["status"] if band["status"] in ("in", "unknown") else f"{band['status']} by {band['by']:.3f}"
        speed = "-" if mine is None else f"{mine.speed_tok_s:.1f}"
        speedup = "-" if mine is None or base is None else f"{mine.speed_tok_s / base.speed_tok_s:.2f}x"
        lines.append(
            f"| {p.algorithm} | {p.batch_size} | {tuple(EXTENDED_ACTIONS[p.action])} | {_fmt(p.mean_reward)} | "
            f"{_fmt(util, '.3f')} | {band_text} | {speed} | {speedup} | {rows} | "
            f"{'-' if mine is None else mine.repeats} |"
        )
    return lines


def _provenance(sweep: Sweep) -> str:
    counts: dict[str, int] = {}
    for row in sweep.rows:
        counts[row.provenance] = counts.get(row.provenance, 0) + 1
    derived = sum(1 for r in sweep.rows if r.utilization_origin == "derived")
    text = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
    if derived:
        text += f"; the utilisation of {derived} row(s) is derived (back-computed from a published reward)"
    return text


def _io_contract(manifest: Manifest) -> str:
    """The I/O contract sentence (the extended set says it is not the published 19)."""
    state = f"Input: a 4-float state {_STATE[manifest.features]}."
    if manifest.action_set.is_contract:
        return f"{state} Output: an index into the 19 actions (steps, topk, draft tokens), in this order:"
    n = len(manifest.action_set)
    return (
        f"{state} Action set: **{manifest.action_set.name}** (sglang bench_speculative.py's full grid, not the "
        f"published 19-action contract; `specband.json` lists the triples). Output: an index into these {n} "
        "actions (steps, topk, draft tokens; the first 19 are the contract's), in this order:"
    )


def _energy(manifest: Manifest) -> str:
    """The model card's "energy measured" line: simulated or emulated power is never measured."""
    origin = manifest.origin
    if not manifest.data.energy_in_rewards:
        return "no (rewards from throughput alone)"
    if origin is not None and not origin.power_measured:
        return f"no: the power is {origin.provenance} ({origin.power_source or 'not measured'}), not measured"
    return "yes"


def render_model_card(
    manifest: Manifest, sweep: Sweep, picks: Sequence[PickRow], *, dataset_id: str | None = None
) -> str:
    """The ``README.md`` text of an artifact folder.

    Args:
        manifest: the folder's manifest (features, seed, data, power limit, files).
        sweep: the sweep the policies were trained on (hardware, models, utilisation, provenance).
        picks: every algorithm's pick per measured batch size (:func:`specband.artifacts.pick_table.pick_table`).
        dataset_id: the hub dataset the sweep came from (``org/name``), for ``datasets``.
    """

    data, recorded = manifest.data, manifest.data.sweep or SweepRecord()
    limit = manifest.power_limit_w
    limits = (
        [f"{limit:g} W (given to `specband train`)"]
        if limit
        else [f"{v} W" for v in _values(sweep, "power_limit_watts")]
    )
    targets, drafts = _values(sweep, "target_model"), _values(sweep, "draft_model")
    body = [
        f"# specband policies: {', '.join(manifest.algorithms)}",
        "",
        (
            "Policies that pick sglang's EAGLE3 speculative-decoding flags (speculative_num_steps, "
            "speculative_eagle_topk, speculative_num_draft_tokens) so that GPU energy utilisation lands in a "
            "95-98 % band while decoding fast. Written by `specband train` "
            f"(specband {__version__}, seed {manifest.seed}, features `{manifest.features}`)."
        ),
        *(
            [
                "",
                f"**Trained on SIMULATED rows (`specband simulate`, profile {manifest.origin.profile or '?'}): "
                "every figure here is a simulation, not a measurement; a sweep on the GPU settles them.**",
            ]
            if manifest.origin is not None and manifest.origin.simulated
            else []
        ),
        "",
        "## Hardware and models",
        "",
        f"- GPU: {', '.join(_values(sweep, 'hardware')) or 'not recorded in the data'}",
        f"- power limit: {', '.join(limits) or 'not recorded in the data'}",
        f"- target: {', '.join(targets) or 'not recorded in the data'}",
        f"- draft: {', '.join(drafts) or 'not recorded in the data'}",
        "",
        (
            "Picks are specific to this hardware and model pair: retrain on a sweep of yours before trusting "
            "them elsewhere."
        ),
        "",
        "## I/O contract",
        "",
        _io_contract(manifest),
        "",
        " ".join(f"{i} {tuple(a)}" for i, a in enumerate(manifest.action_set)),
        "",
        "## Pick per batch size",
        "",
        "Mean reward, utilisation (band: in, below or above the 0.95-0.98 band), decode speed and speed-up "
        "over the non-speculative baseline of the picked config over its rows in the training data"
        + (" (SIMULATED figures)." if manifest.origin is not None and manifest.origin.simulated else "."),
        "",
        *_picks(manifest, sweep, picks),
        "",
        "## Files and how they load",
        "",
        "| file | load |",
        "|---|---|",
        *(f"| `{ARTIFACT_FILES[name]}` | {RECIPES[name]} |" for name in manifest.algorithms),
        "",
        (
            "`specband.json` (the manifest, with the sha256 of every file) and each `<algorithm>/specband.json` "
            "are specband's; `specband recommend --models DIR` reads them."
        ),
        "",
        "## Data",
        "",
        (
            f"- file: `{recorded.path}` (sha256 `{recorded.sha256}`), {data.rows} rows, "
            f"{data.training_rows} used for training, format `{recorded.format}`"
        ),
        f"- provenance: {_provenance(sweep)}",
        f"- energy measured: {_energy(manifest)}",
        f"- engine: {manifest.origin.engine_text() if manifest.origin else 'not recorded'}",
        f"- workload: {(manifest.origin.workload if manifest.origin else None) or 'not recorded'}",
        "",
        "## Held-out figures",
        "",
        "`specband train` scores nothing held out; `specband evaluate DATA --out DIR` does.",
        "",
    ]
    return "\n".join([*_front_matter(sweep, dataset_id), "", *body])
