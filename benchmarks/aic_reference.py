"""Query NVIDIA AIConfigurator (AIC) for reference decode-step times of the bundled model pairs
and write them as specband's committed calibration data (``src/specband/data/aic_reference.json``).

Run it in a separate virtual environment with the ``aic`` extra (AIC pins its own packages):

    python3 -m venv /work/venv-aic && /work/venv-aic/bin/pip install 'aiconfigurator==0.12.0'
    /work/venv-aic/bin/python benchmarks/aic_reference.py [--out FILE] [--systems h100_sxm,h200_sxm,a100_sxm]

Then fit the profiles offline with ``specband simulate --calibration-report --against aic --refit``.

Every figure comes from ``aiconfigurator.cli.api.cli_estimate`` (the function behind
``aiconfigurator cli estimate``) in ``static_gen`` mode, backend ``sglang``, TP 1, bf16, its
``SILICON`` database (measured GEMM/attention kernels), ISL = the profile's mean prompt
(``PROMPT_TOKENS``) and OSL = 512 (the sweep's ``max_new_tokens``), so the mean context over
the generation equals the simulator's ``prompt_tokens + 256``. Records:

* ``decode``: the target's non-speculative decode step at ``bs`` requests = AIC's TPOT;
* ``verify``: a target forward over ``bs x N`` tokens = AIC's MTP step with ``nextn = N - 1``
  (``generation_latency / (OSL / (1 + nextn_accepted))``, ``nextn_accepted = 1``) times
  ``L / (L + nextn)``, which removes AIC's MTP-layer cost (``mtp_scale_factor`` in
  aiconfigurator_core/sdk/models/helpers.py scales each step by ``(L + nextn) / L``); an
  approximation: AIC scales the whole step, lm_head included;
* ``draft``: one forward of the EAGLE3 head at ``bs`` tokens, approximated as a one-layer
  ``LlamaForCausalLM`` with the head's hidden, intermediate, head and draft-vocab sizes (AIC
  does not load ``LlamaForCausalLMEagle3``; the head's 3h -> h fc layer is left out).

The script prints each record as it goes; it imports nothing from specband.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import logging
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "src" / "specband" / "data" / "models"
DEFAULT_OUT = ROOT / "src" / "specband" / "data" / "aic_reference.json"

#: (target config, draft config) of the bundled pairs (``specband/data/models``).
PAIRS = (
    ("llama-3.1-8b-instruct", "eagle3-llama-3.1-8b-instruct"),
    ("llama-3.2-1b-instruct", "eagle3-llama-3.2-1b-instruct"),
)
#: AIC system -> specband profile.
SYSTEMS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200", "a100_sxm": "a100-sxm4-80gb"}
DECODE_BATCH_SIZES = (1, 2, 4, 8, 12, 16)
SPEC_BATCH_SIZES = (1, 4, 8, 16)
NUM_DRAFT_TOKENS = (4, 8, 16)
#: mean prompt of the sweep workload (rtx4060-laptop's fitted ``prompt_tokens``, inherited by the
#: datacenter profiles), and its output length.
PROMPT_TOKENS = 269
OUTPUT_TOKENS = 512


def _estimate(model_dir: Path, system: str, bs: int, nextn: int = 0):
    from aiconfigurator.cli.api import cli_estimate

    kwargs = {"nextn": nextn, "nextn_accepted": 1.0} if nextn else {}
    return cli_estimate(
        model_path=str(model_dir),
        system_name=system,
        mode="static_gen",
        backend_name="sglang",
        database_mode="SILICON",
        isl=PROMPT_TOKENS,
        osl=OUTPUT_TOKENS,
        batch_size=bs,
        tp_size=1,
        **kwargs,
    )


def _model_dir(tmp: Path, name: str, config: dict) -> Path:
    folder = tmp / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _draft_as_llama(draft: dict) -> dict:
    """The EAGLE3 head as a one-layer LlamaForCausalLM over its draft vocabulary."""
    config = dict(draft)
    config["architectures"] = ["LlamaForCausalLM"]
    config["vocab_size"] = draft.get("draft_vocab_size") or draft["vocab_size"]
    config.pop("draft_vocab_size", None)
    return config


def _records_for(
    system: str, target_dir: Path, draft_dir: Path, layers: int, pair: tuple[str, str], skipped: list[str]
) -> list[dict]:
    from aiconfigurator_core.sdk.errors import PerfDataNotAvailableError

    records = []

    def add(kind: str, bs: int, tokens: int, model_dir: Path, nextn: int = 0, **extra) -> None:
        where = f"{system} {model_dir.name} {kind} bs {bs} tokens {tokens}"
        try:
            r = _estimate(model_dir, system, bs, nextn=nextn)
        except PerfDataNotAvailableError as exc:
            skipped.append(f"{where}: {' '.join(str(exc).split())[:160]}")
            print(f"skipped {where}: AIC has no data", file=sys.stderr, flush=True)
            return
        if nextn:
            steps = OUTPUT_TOKENS / 2.0  # nextn_accepted = 1: two tokens per step
            step_ms = float(r.raw["generation_latency"]) / steps * layers / (layers + nextn)
        else:
            step_ms = float(r.tpot)
        rec = {
            "system": system,
            "profile": SYSTEMS[system],
            "target": pair[0],
            "draft": pair[1],
            "kind": kind,
            "batch_size": bs,
            "tokens": tokens,
            "step_ms": round(step_ms, 5),
            "backend_version": r.backend_version,
            **extra,
        }
        print(json.dumps(rec), flush=True)
        records.append(rec)

    for bs in DECODE_BATCH_SIZES:
        add("decode", bs, bs, target_dir)
    for bs in SPEC_BATCH_SIZES:
        for n in NUM_DRAFT_TOKENS:
            add("verify", bs, bs * n, target_dir, nextn=n - 1, num_draft_tokens=n)
        add("draft", bs, bs, draft_dir)
    return records


def main(argv: list[str] | None = None) -> int:
    """Query AIC and write the reference file; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    args = parser.parse_args(argv)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        print(f"error: --systems: unknown {unknown}; expected some of {list(SYSTEMS)}", file=sys.stderr)
        return 2
    logging.disable(logging.WARNING)
    records: list[dict] = []
    skipped: list[str] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for pair in PAIRS:
            target = json.loads((MODELS / f"{pair[0]}.json").read_text())
            draft = json.loads((MODELS / f"{pair[1]}.json").read_text())
            target_dir = _model_dir(tmp, pair[0], target)
            draft_dir = _model_dir(tmp, pair[1], _draft_as_llama(draft))
            for system in systems:
                records += _records_for(system, target_dir, draft_dir, int(target["num_hidden_layers"]), pair, skipped)
    bad = [r for r in records if not (math.isfinite(r["step_ms"]) and r["step_ms"] > 0)]
    if bad:
        print(f"error: AIC returned no usable step time for {bad[0]}", file=sys.stderr)
        return 1
    data = {
        "source": "NVIDIA AIConfigurator (aiconfigurator.cli.api.cli_estimate), benchmarks/aic_reference.py",
        "aiconfigurator_version": importlib.metadata.version("aiconfigurator"),
        "aiconfigurator_core_version": importlib.metadata.version("aiconfigurator-core"),
        "date": datetime.date.today().isoformat(),
        "query": {
            "mode": "static_gen",
            "backend": "sglang",
            "database_mode": "SILICON",
            "tp_size": 1,
            "dtype": "bfloat16",
            "isl": PROMPT_TOKENS,
            "osl": OUTPUT_TOKENS,
            "stride": 32,
            "verify": "MTP step with nextn = N - 1, nextn_accepted = 1, x L / (L + nextn)",
            "draft": "one-layer LlamaForCausalLM with the EAGLE3 head's sizes and draft vocabulary",
        },
        "docs": [
            {
                "profile": "h100-sxm",
                "target": "llama-3.1-8b-instruct",
                "kind": "decode",
                "batch_size": 1,
                "tok_s": 158.34,
                "step_ms": round(1000.0 / 158.34, 5),
                "source": "sglang docs, Speculative Decoding, Performance Highlights: SGLang w/o speculative, "
                "1x H100, Llama-3.1-8B-Instruct, MT-bench (https://docs.sglang.io/advanced_features/"
                "speculative_decoding.html)",
            }
        ],
        "skipped": skipped,
        "records": records,
    }
    Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {len(records)} records to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
