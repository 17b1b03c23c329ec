"""Write the synthetic batch-size trace ``benchmarks/data/govern_trace_synthetic.csv`` that
``bench_govern.py`` replays in simulation (run it to regenerate; the same seed gives the same file).

The trace is synthetic, not taken from a public trace: requests arrive as a Poisson process whose
rate steps through five 5-minute levels chosen so that the mean number in service is 1, 8, 32,
8 and 1 (Little's law: rate = level / mean service time), then a 5-minute stretch of bursts (30 s
at level 24 every 90 s over a level-4 floor); each request stays in service for a lognormal
time (median 4 s, sigma 0.6, a decode of a few hundred tokens). The batch size at each second
is the number of requests in service (an M(t)/G/infinity queue), capped at 64. 1800 rows.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

OUT = Path(__file__).parent / "data" / "govern_trace_synthetic.csv"
SEED = 0
MEDIAN_S, SIGMA = 4.0, 0.6
CAP = 64


def level(t: float) -> float:
    """The mean concurrency asked for at second ``t``."""
    steps = [1.0, 8.0, 32.0, 8.0, 1.0]
    if t < 1500:
        return steps[int(t // 300)]
    return 24.0 if (t - 1500) % 90 < 30 else 4.0


def main() -> None:
    rng = random.Random(SEED)
    mean_service = MEDIAN_S * math.exp(SIGMA**2 / 2)
    ends: list[float] = []
    rows = []
    for second in range(1800):
        t = float(second)
        rate = level(t) / mean_service
        arrivals = 0
        budget = rng.expovariate(1.0)
        while budget < rate:  # Poisson arrivals in this second
            arrivals += 1
            budget += rng.expovariate(1.0)
        for _ in range(arrivals):
            ends.append(t + rng.uniform(0, 1) + rng.lognormvariate(math.log(MEDIAN_S), SIGMA))
        ends = [e for e in ends if e > t]
        rows.append((t, min(CAP, len(ends))))
    header = (
        "# a batch-size trace for benchmarks/bench_govern.py: SYNTHETIC, not from a public trace\n"
        "# benchmarks/make_govern_trace.py, seed 0: Poisson arrivals at levels 1, 8, 32, 8, 1 (5 min each), "
        "then bursts; lognormal service, median 4 s; batch size = requests in service\n"
    )
    OUT.write_text(header + "t_s,batch_size\n" + "".join(f"{t:.0f},{bs}\n" for t, bs in rows))
    print(f"wrote {OUT} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
