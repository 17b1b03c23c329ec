"""SpecForge SpecBundle measurements on H200 that the acceptance-fit tests hold specband to.

Copied from ``../shared/data/specbundle_h200_two_workloads.md`` (source: sgl-project/SpecForge
``docs/spec_bundle/public/raw_data/data.json``, the SpecBundle dashboard, chart "H200";
Llama-3.1-8B-Instruct, batch size 1, temperature 0, harness ``benchmarks/bench_eagle3.py``).
Drafts: ``old`` = lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B, ``specforge`` =
lmsys/SGLang-EAGLE3-Llama-3.1-8B-Instruct-SpecForge. Values: (speed tok/s, accept length).
"""

from __future__ import annotations

import json
from pathlib import Path

#: (workload, draft) -> action -> (measured tok/s, measured accept length).
SPECBUNDLE_H200: dict[tuple[str, str], dict[tuple[int, int, int], tuple[float, float]]] = {
    ("mtbench", "old"): {
        (3, 1, 4): (414.9, 2.931),
        (5, 1, 6): (453.7, 3.554),
        (5, 3, 6): (338.6, 2.939),
        (7, 1, 8): (454.7, 3.907),
        (7, 4, 8): (305.2, 2.909),
    },
    ("mtbench", "specforge"): {
        (3, 1, 4): (404.2, 2.898),
        (5, 1, 6): (446.6, 3.516),
        (5, 3, 6): (346.5, 3.006),
        (7, 1, 8): (450.0, 3.856),
        (7, 4, 8): (308.0, 2.938),
    },
    ("humaneval", "old"): {
        (3, 1, 4): (432.9, 3.047),
        (5, 1, 6): (479.1, 3.745),
        (5, 3, 6): (340.3, 2.943),
        (7, 1, 8): (480.3, 4.096),
        (7, 4, 8): (311.1, 2.934),
    },
    ("humaneval", "specforge"): {
        (3, 1, 4): (465.2, 3.340),
        (5, 1, 6): (548.9, 4.318),
        (5, 3, 6): (377.5, 3.252),
        (7, 1, 8): (571.5, 4.910),
        (7, 4, 8): (330.2, 3.126),
    },
}
#: Baseline (0,0,0) speeds, tok/s, per workload.
BASELINE_TOK_S = {"mtbench": 190.0, "humaneval": 190.9}
#: The two chains a user measures; the rest is predicted.
MEASURED = ((3, 1, 4), (7, 1, 8))
CHAINS_PREDICTED = ((5, 1, 6),)
TREES_PREDICTED = ((5, 3, 6), (7, 4, 8))
COMBOS = tuple(SPECBUNDLE_H200)


def write_bench_file(path: Path, workload: str, draft: str, actions=MEASURED) -> Path:
    """A bench_speculative.py JSONL (the ``import-bench`` format) holding the baseline and
    ``actions`` of one (workload, draft), at batch size 1 (``step_time`` = accept / speed)."""
    rows = [
        {
            "batch_size": 1,
            "steps": 0,
            "topk": 0,
            "num_draft_tokens": 0,
            "acc_length": 1.0,
            "step_time": 1.0 / BASELINE_TOK_S[workload],
            "speed": BASELINE_TOK_S[workload],
        }
    ]
    for action in actions:
        speed, accept = SPECBUNDLE_H200[(workload, draft)][action]
        steps, topk, tokens = action
        rows.append(
            {
                "batch_size": 1,
                "steps": steps,
                "topk": topk,
                "num_draft_tokens": tokens,
                "acc_length": accept,
                "step_time": accept / speed,
                "speed": speed,
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path
