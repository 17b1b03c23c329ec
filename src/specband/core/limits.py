"""Bounds every input of specband is held to, each with its basis, in one place.

The module imports nothing but the standard library, so that CLI option declarations
(typer's ``min``/``max``) and the cold ``specband recommend`` path can use it.

* Batch size (:data:`MAX_BATCH_SIZE`): one bound for sweep rows (``dataset``), ``train``,
  ``recommend``, ``simulate``, ``sweep`` and ``launch`` (``--max-running-requests`` and
  ``--cuda-graph-max-bs``); at most :data:`MAX_DATA_BATCH_SIZES` distinct ones in a data file.
* GPU state readings (:data:`GPU_TEMP_RANGE_C`, :data:`GPU_MEM_MAX_MB`,
  :data:`GPU_UTIL_RANGE_PCT`): a decision state given with ``--state`` and the state
  columns of a loaded sweep row.
* Seeds (:data:`MAX_SEED`): ``train --seed``, ``simulate --seed``, ``evaluate --seed``
  and ``emulate --seed``.
* Counts and durations of the CLI (:data:`MAX_REPEATS`, :data:`MAX_BOOTSTRAP_RESAMPLES`,
  :data:`PORT_RANGE`, :data:`MAX_TIMEOUT_S`, :data:`MAX_NUM_PROMPTS`,
  :data:`MAX_NEW_TOKENS`), declared on the options with typer's own ``min``/``max``.
* Power limits (:data:`POWER_LIMIT_RANGE_W`): ``--power-limit`` of every command
  (:func:`specband.devices.base.check_power_limit_w`).
* File sizes (:data:`MAX_DATA_FILE_BYTES`, :data:`MAX_CONFIG_FILE_BYTES`): every file a
  user names (:func:`specband.files.fileio.read_bytes_bounded`).
"""

from __future__ import annotations

import math
from typing import TypeGuard

#: Largest batch size (concurrent requests, sglang ``--max-running-requests``) accepted
#: anywhere: 2**20. Basis: each running request holds at least one token of KV cache, and
#: one GPU holds a few million tokens at most (an H200's 141 GB at Llama-3.2-1B's 32 KiB per
#: token, 16 layers x 8 KV heads x 64 dims x 2 (K, V) x 2 bytes, is about 4.4 M tokens), so
#: 2**20 requests leave ~4 tokens each: beyond it the number is not a decode batch.
#: sglang itself takes any int, and would pass a 31-digit ``--cuda-graph-max-bs`` on.
MAX_BATCH_SIZE = 1 << 20

#: Most distinct batch sizes in one data file (``train``, ``evaluate``, ``--data``): 4096.
#: Basis: a measured sweep runs every action at every batch size, so 4096 batch sizes x 19
#: actions x ~30 s a run (the study's runs took 30-90 s) is 27 days of one GPU, more than any
#: sweep specband plans (the README's grid has 4-8); ``train`` prints one table row per
#: batch size and algorithm, and reads 4096 in about 5 s on 2 CPU cores (hostile trial N45:
#: 20 000 were crafted to exhaust it).
MAX_DATA_BATCH_SIZES = 4096

#: Largest speculative step count anywhere (sglang ``--speculative-num-steps`` and a schedule's
#: ``candidate_steps``, vLLM's ``num_speculative_tokens`` K): 64. Basis: 8x the deepest chain
#: of sglang's bench grid and of the extended action set (7 steps); an EAGLE3 draft position k
#: is accepted with probability about alpha**k (alpha 0.6-0.9 in the EAGLE-3 paper's tables),
#: under 0.2 % at k = 64, so no engine config goes there. sglang and vLLM take any int
#: (vLLM: ``num_speculative_tokens`` > 0); a crafted 10**9 made the emulator allocate until
#: it was killed (hostile trial N15).
MAX_SPECULATIVE_STEPS = 64

#: Largest ``--speculative-eagle-topk``: 64. Basis: 8x the extended action set's widest
#: tree (topk 8); each step expands topk candidates per request.
MAX_EAGLE_TOPK = 64

#: Largest ``--speculative-num-draft-tokens``: 1024. Basis: 32x the extended action set's
#: largest (32); the target verifies that many tokens per request in one forward pass.
MAX_DRAFT_TOKENS = 1024

#: Most tiers (sglang batch-size keys, vLLM ``[start, end, K]`` ranges) in one schedule file:
#: 4096, one per batch size a data file may hold (:data:`MAX_DATA_BATCH_SIZES`).
MAX_SCHEDULE_TIERS = MAX_DATA_BATCH_SIZES

#: Largest training seed: 2**32 - 1. Basis: scikit-learn's ``random_state`` (gbt) goes to
#: ``numpy.random.RandomState``, which takes seeds in [0, 2**32 - 1]; torch and NumPy's
#: ``SeedSequence`` (the other algorithms) take at least that range.
MAX_SEED = 2**32 - 1

#: Largest ``--repeats`` (``sweep``, ``simulate``): 1000 full passes over the grid. Basis:
#: the README's sweeps use 3; a pass of the default grid (4 batch sizes x 19 actions) is
#: 76 server launches, so 1000 passes are months of GPU time, and ``simulate`` holds
#: repeats x grid rows in memory (1000 x 76 rows of ~1 KB is 76 MB).
MAX_REPEATS = 1000

#: Most shards of one sweep (``sweep --shard K/N``): N <= 10000. Basis: a shard is at least
#: one server launch, and a sweep is spread over machines or jobs, not more than ten thousand
#: of them; the shard planner keeps one load figure per shard in memory.
MAX_SHARDS = 10_000

#: Largest GPU index (``--gpus``, ``--gpu-index``): 0..63. Basis: NVML and
#: ``CUDA_VISIBLE_DEVICES`` number the GPUs of one machine from 0; the largest single-node
#: systems hold 16 (HGX/DGX: 8), so 64 leaves room while catching a typo's huge number.
MAX_GPU_INDEX = 63

#: Largest ``evaluate --bootstrap``: 100000 resamples. Basis: Efron & Tibshirani, "An
#: Introduction to the Bootstrap" (1993) §13.3 advise 1000-2000 resamples for percentile
#: intervals; the resamples are held in memory (a float per row and resample), so
#: 100000 (50x the advice) keeps a 1000-row sweep under 1 GB.
MAX_BOOTSTRAP_RESAMPLES = 100_000

#: TCP port range of ``--port`` (``sweep``, ``launch``): 1..65535, the 16-bit port field
#: (RFC 793) without port 0 (which asks the OS for any port: the polled port would be unknown).
PORT_RANGE = (1, 65535)

#: Longest duration an option may give, seconds: 10**7 (116 days) for ``--launch-timeout``,
#: ``--request-timeout``, ``--cooldown`` and ``emulate --load-time``. Basis: under the
#: emulator these are emulated seconds, which pass ``--time-scale`` times faster (a test
#: holds a launch or a request open with 10**5 emulated s, 1000 s real at 0.01); in real
#: time a launch of the largest model takes tens of minutes and one request seconds, so 10**7
#: leaves orders of magnitude of margin while keeping a typo (1e300) out of ``time.sleep``,
#: which overflows on it.
MAX_TIMEOUT_S = 10_000_000

#: Largest ``sweep --num-prompts``: :data:`MAX_BATCH_SIZE`. Basis: a run sends
#: ``max(num_prompts, batch size)`` requests, and a batch size is at most that.
MAX_NUM_PROMPTS = MAX_BATCH_SIZE

#: Largest ``sweep --max-new-tokens``: 2**20 tokens. Basis: the longest context windows of
#: current models are ~1 M tokens (Llama 3.1 has 128 K); a request cannot decode more.
MAX_NEW_TOKENS = 1 << 20

#: Default speed loss (fraction of tok/s) ``recommend --max-speed-loss`` and ``launch
#: --set-power-limit auto`` accept against the fastest pick when they lower the power limit
#: (:class:`specband.sweeps.limit_table.BandWithinSpeedLoss`). Basis: a default chosen by specband,
#: not a measurement; ``--max-speed-loss`` sets it per call.
DEFAULT_MAX_SPEED_LOSS = 0.02

#: Power limit, W, given with ``--power-limit``: [1, 2000]. Basis: NVML's enforced limits
#: of data-centre GPUs are 300-1200 W (H200 SXM 700 W, B200 1000 W, GB200 1200 W per GPU),
#: laptop GPUs 35-175 W; under 1 W or over 2000 W is no GPU's limit, and energy utilisation
#: divides by it (1e-300 W would make every reward 0).
POWER_LIMIT_RANGE_W = (1.0, 2000.0)

#: GPU temperature, C, a reading may have. Basis: NVML reports the die temperature as an
#: unsigned int in C, and GPUs shut down near 100 C (NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,
#: 90-105 C on current NVIDIA parts); -40 C is the lowest rated ambient of electronics
#: (JEDEC industrial range). [-40, 150] holds every real reading with margin.
GPU_TEMP_RANGE_C = (-40.0, 150.0)
#: GPU memory in use, MB: at most 16 TiB. Basis: the largest single GPUs hold 141-192 GB
#: (H200, B200); 16 TiB leaves two orders of magnitude of margin.
GPU_MEM_MAX_MB = 16.0 * 1024 * 1024
#: GPU utilisation, %: NVML's ``utilization.gpu`` is a percentage of time, [0, 100].
GPU_UTIL_RANGE_PCT = (0.0, 100.0)

#: Physical range of each GPU state column of a sweep row: column -> (low, high, basis).
_TEMP_BASIS = "a GPU temperature in C: GPUs shut down near 100 C, -40 C is the lowest rated ambient"
_MEM_BASIS = "GPU memory in use in MB: the largest GPUs hold under 200 GB, 16 TiB is the bound"
_UTIL_BASIS = "GPU utilisation, a percentage of time"
STATE_FIELD_RANGES: dict[str, tuple[float, float, str]] = {
    "gpu_temp_c_before": (*GPU_TEMP_RANGE_C, _TEMP_BASIS),
    "gpu_temp_c": (*GPU_TEMP_RANGE_C, _TEMP_BASIS),
    "gpu_mem_used_mb_before": (0.0, GPU_MEM_MAX_MB, _MEM_BASIS),
    "gpu_mem_used_mb": (0.0, GPU_MEM_MAX_MB, _MEM_BASIS),
    "gpu_util_pct_before": (*GPU_UTIL_RANGE_PCT, _UTIL_BASIS),
    "gpu_util_pct": (*GPU_UTIL_RANGE_PCT, _UTIL_BASIS),
}

#: Largest sweep file read: 1 GiB. Basis: a row is ~1 KB, so 1 GiB is about a million
#: runs, beyond any sweep (19 actions x a few dozen batch sizes x repeats); the file is
#: read whole into memory, so a larger one (or ``/dev/zero``) is refused before reading.
MAX_DATA_FILE_BYTES = 1 << 30

#: Largest config-like file read (a model folder's ``config.json``, a hardware profile, an
#: adaptive schedule, a Prometheus ``/metrics`` scrape, an artifact's JSON, an AIC
#: reference): 64 MiB. Basis: these files are KB (a ``config.json`` 1-10 KB, an sglang
#: ``/metrics`` scrape tens of KB, a ``tokenizer_config.json`` with its chat template a few
#: hundred KB); 64 MiB leaves two orders of magnitude of margin, and the file is parsed
#: whole in memory. Data files (sweep rows, bench output, prompts) have
#: :data:`MAX_DATA_FILE_BYTES`.
MAX_CONFIG_FILE_BYTES = 64 << 20


def out_of_range(value: float, low: float, high: float) -> str | None:
    """Why ``value`` is not a finite number in ``[low, high]``, or ``None`` when it is.

    Returns:
        ``"must be a number in [low, high], got value"`` (bounds printed with up to 10
        significant digits) or ``None``.
    """
    if math.isfinite(value) and low <= value <= high:
        return None
    return f"must be a number in [{low:.10g}, {high:.10g}], got {value}"


def is_int(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an ``int`` and not a ``bool`` (JSON ``true`` is not a count).

    The one check behind every "must be an integer" message of specband.
    """
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[float]:
    """Whether ``value`` is an ``int`` or ``float`` and not a ``bool`` (NaN and infinities
    included: a JSON reader that rejects them does so first)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_finite_number(value: object) -> TypeGuard[float]:
    """Whether ``value`` is a finite ``int`` or ``float`` and not a ``bool``.

    The one check behind every "must be a finite number" message of specband.
    """
    return is_number(value) and math.isfinite(value)


#: ``specband probe``'s requests (``--max-requests``): 8 by default, at most 64. Basis: a
#: request of a few dozen tokens gives tens of verify steps of an accept histogram, so 8 give
#: hundreds (enough for an accept length to a few percent); 64 bounds what a probe may add to
#: a production server's load (the probe never changes the server, and says how many it sent).
DEFAULT_PROBE_REQUESTS = 8
MAX_PROBE_REQUESTS = 64
#: Largest answer body ``specband probe`` reads from a server, bytes: 8 MiB. Basis: a
#: ``/metrics`` page of vLLM 0.32 serving one model is ~40 KB, sglang's ``/server_info`` a few
#: KB (more with a long ``step_time_dict``), a ``/generate`` answer of 64 tokens under 4 KB.
MAX_PROBE_BODY_BYTES = 8 << 20
#: Largest count of one bin of an accept histogram a probe file holds: 2**53, the largest
#: integer a float (the acceptance reader's number) holds exactly. Basis: a bin counts verify
#: steps, at most a few thousand per probe request (``--max-new-tokens``), so any real count
#: is orders of magnitude below; a 400-digit count would not convert to a float at all.
MAX_HISTOGRAM_COUNT = 1 << 53

#: Largest average board power a row may record, W: the top of :data:`POWER_LIMIT_RANGE_W`
#: (2000 W). Basis: no GPU's limit is above it (B200 1000 W, GB200 1200 W per GPU), and a board
#: draws its limit, not more, over a measured window (hostile trial B07: 1e300 W was trained on).
MAX_BOARD_POWER_W = POWER_LIMIT_RANGE_W[1]

#: Largest energy utilisation (average power / power limit) a row may record: 1.5. Basis: NVML
#: enforces the limit over a window of about a second, so a run's average power stays near or
#: under it; the study's 29 published rows reach 1.010, and a short window may read a few
#: percent over. Half again the limit over a measured run is no GPU (hostile trial B07: 7.5, and
#: 500 W at an 80 W limit, were trained on); a row whose ``avg_power_watts`` is over 1.5x its
#: ``power_limit_watts`` is refused the same way.
MAX_ENERGY_UTILIZATION = 1.5

#: Most decode steps a second, per request: 10**5 (one step per 10 us). Basis: a decode step is
#: one forward pass of the target (dozens of kernel launches of several us each; a 1B model's
#: steps take a few ms on an RTX 4060, under 1 ms nowhere in the published data); 10**5 is ten
#: times the fastest conceivable step rate. A row's ``speed_tok_s`` is at most this x
#: (steps + 1) tokens a step x its batch size (hostile trial B05, B07: 1e308 tok/s was trained
#: on with reward 1.0).
MAX_DECODE_STEPS_PER_S = 100_000.0

#: Range of each measured column of a sweep row besides the GPU state readings (inclusive
#: ``(low, high, basis)``; a row holding a value outside is refused when read). ``step_time_s``
#: and ``avg_output_tokens`` are > 0: a decode step takes time, and a request of no output
#: token is no run (hostile trial B05: step_time 0, completion_tokens 0 and -1e308).
ROW_FIELD_RANGES: dict[str, tuple[float, float, str]] = {
    **STATE_FIELD_RANGES,
    "power_limit_watts": (*POWER_LIMIT_RANGE_W, "a power limit in W (specband.core.limits.POWER_LIMIT_RANGE_W)"),
    "avg_power_watts": (0.0, MAX_BOARD_POWER_W, "board power in W (specband.core.limits.MAX_BOARD_POWER_W)"),
    "energy_utilization": (0.0, MAX_ENERGY_UTILIZATION, "power over the limit (MAX_ENERGY_UTILIZATION)"),
    "step_time_s": (
        1.0 / MAX_DECODE_STEPS_PER_S,
        float(MAX_TIMEOUT_S),
        "a decode step's seconds (MAX_DECODE_STEPS_PER_S)",
    ),
    "avg_output_tokens": (1.0, float(MAX_NEW_TOKENS), "output tokens of a request (MAX_NEW_TOKENS)"),
}

#: Largest ``max_position_embeddings`` (a model's context window, tokens) read from a
#: ``config.json``: 2**30. Basis: the longest context windows of current models are 1-10 M tokens
#: (Llama 4 Scout: 10 485 760); 2**30 is a hundred times that, while a 401-digit value (hostile
#: trial B28) is no model's, and would be printed whole or put in a ``--context-length`` fix.
MAX_CONTEXT_POSITIONS = 1 << 30
