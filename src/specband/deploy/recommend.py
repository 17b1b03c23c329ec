"""Which answer ``specband recommend``, ``launch`` and ``schedule`` give, decided once:
:func:`answer` takes an :class:`AnswerRequest` (what the command asks) and returns the
typed :data:`~specband.deploy.answers.Answer` (a pick, a power limit, a mix, a first guess
or a schedule's tier picks), with its notes, as data. The commands build the request and
print the answer; they decide nothing.

Only the standard library is imported at module level; the ``lookup_table`` path reads JSON
only (no NumPy, torch or scikit-learn), so a cold ``specband recommend`` stays fast.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from specband.deploy.mixlimit import MixPowerLimitAnswer
    from specband.deploy.table import FirstGuess
    from specband.deploy.transfer import UserSetup
    from specband.sweeps.limit_table import BandWithinSpeedLoss, LimitTable
    from specband.sweeps.origin import DataOrigin

from specband.artifacts.folder import validate_algorithms
from specband.artifacts.load import ModelFolder, load_models, open_folder
from specband.contract.actions import ACTION_SETS, CONTRACT_SET, ActionSet, action_set_field
from specband.contract.actions import action_set as named_action_set
from specband.contract.state import check_gpu_state
from specband.core.batchlist import parse_batch_mix, parse_batch_sizes
from specband.core.errors import ConfigError
from specband.core.limits import DEFAULT_MAX_SPEED_LOSS
from specband.core.optionspec import acceptance_from_field, option
from specband.deploy.answers import (
    Answer,
    Pick,
    PowerLimitAnswer,
    ScheduleAnswer,
    TransferCheck,
)
from specband.deploy.explain import LimitRange, data_notes, explain_pick, pick_origin, unmeasured_notes
from specband.deploy.jointpick import ServingWorkload, workload_field
from specband.deploy.limitanswer import power_limit_answer
from specband.deploy.options import (
    algo_field,
    allow_modified_field,
    allow_transfer_field,
    data_field,
    gpu_field,
    models_field,
    state_field,
    target_field,
    trust_pickle_field,
)
from specband.deploy.table import FirstGuess, explain_field
from specband.deploy.transfer import TransferError, check_scorer_transfer, check_transfer
from specband.engines.base import Engine, default_engine, engine_field, get_engine, runnable_indices
from specband.files.hub import resolve_data_file
from specband.policies.lookup_core import lookup_pick
from specband.sweeps.limit_table import BandWithinSpeedLoss, limit_table, sweep_power_limits
from specband.sweeps.origin import data_origin

__all__ = [
    "POWER_LIMIT_RULES",
    "AnswerRequest",
    "FirstGuessSpec",
    "RecommendRequest",
    "ScheduleSpec",
    "answer",
    "power_limit_answer",
    "recommend",
]


@dataclass(frozen=True)
class RecommendRequest:
    """Every option of ``specband recommend``, checked when it is built (one line each).

    Raises:
        ConfigError: a bad ``--format``, ``--state`` or empty ``--draft-model``; both mix
            options, or ``--batch-size`` with one; neither ``--batch-size`` nor a mix;
            InvalidActionError: an unknown ``--actions``.
    """

    batch_size: str | None = option(
        None,
        "--batch-size",
        "-b",
        help="Concurrent requests (--max-running-requests), or a list (1,8,32,64): one row each in one table. "
        "Required unless --batch-mix or --batch-mix-from is given.",
        panel="pick",
        metavar="N[,N...]",
        show_default=False,
    )
    algo: str = algo_field()
    models: Path | None = models_field()
    state: tuple[float, float, float] | None = state_field(
        "GPU state TEMP_C MEM_MB UTIL_PCT (for 'pre' models: the idle GPU before launch). "
        "Default: the state the folder's picks were made from."
    )
    output_format: str = option(
        "flags", "--format", "-f", help="'flags' (one line) or 'json'.", panel="output", metavar="KIND"
    )
    draft_model: str | None = option(
        None,
        "--draft-model",
        help="EAGLE3 draft model path or id, emitted as --speculative-draft-model-path.",
        panel="setup",
        metavar="PATH",
        give="the EAGLE3 draft model's path or hub id",
        show_default=False,
    )
    data: Path | None = data_field()
    trust_pickle: bool = trust_pickle_field()
    actions: str = action_set_field("the models (an extended folder is read with 'extended' only)", "model")
    allow_modified: bool = allow_modified_field()
    max_speed_loss: float = option(
        DEFAULT_MAX_SPEED_LOSS,
        "--max-speed-loss",
        help="With a sweep (--data) or a folder (--models) over several power limits: the speed loss "
        "(fraction) a lower limit may cost against the fastest pick.",
        panel="pick",
        metavar="F",
        min=0.0,
        max=0.99,
    )
    batch_mix: str | None = option(
        None,
        "--batch-mix",
        help="One pick for a batch-size mix BS:WEIGHT,... (weights normalised), with each batch size's own "
        "pick and the regret beside it.",
        panel="pick",
        metavar="MIX",
        show_default=False,
    )
    batch_mix_from: Path | None = option(
        None,
        "--batch-mix-from",
        help="As --batch-mix, the mix read from sglang's Prometheus metrics text (samples or a histogram of "
        "sglang:num_running_reqs).",
        panel="pick",
        metavar="FILE",
        show_default=False,
    )

    target: str | None = target_field()
    gpu: str | None = gpu_field()
    target_config: str | None = option(
        None,
        "--target-config",
        help="With --gpu: a simulated first guess for this target (config.json, folder, bundled name such as "
        "llama-3.1-8b-instruct, or hub id), labelled with the acceptance it rests on and the calibration error of "
        "this profile and pair; needs --draft-config unless it is a bundled target (its bundled head comes with it).",
        panel="setup",
        metavar="CONFIG",
        show_default=False,
    )
    draft_config: str | None = option(
        None,
        "--draft-config",
        help="With --gpu: the EAGLE3 draft head for the simulated first guess (config.json, folder, bundled name "
        "such as eagle3-llama-3.1-8b-instruct, or hub id); needs --target-config unless it is a bundled head.",
        panel="setup",
        metavar="CONFIG",
        show_default=False,
    )
    acceptance_from: str | None = acceptance_from_field("the simulated first guess (with --gpu)", "setup")
    allow_transfer: bool = allow_transfer_field()
    engine: Engine = engine_field(
        "The engine you run: the flags are its spelling (vLLM: --speculative-config with K = steps) and the "
        "pick one it runs (vLLM: chains only).",
        "setup",
    )
    prompt_tokens: int | None = workload_field("prompt")
    output_tokens: int | None = workload_field("output")
    explain: bool = explain_field()

    def __post_init__(self) -> None:
        object.__setattr__(self, "engine", get_engine(self.engine))  # resolved once, here
        if isinstance(self.batch_size, int):  # a caller in Python may give one batch size as a number
            object.__setattr__(self, "batch_size", str(self.batch_size))
        if self.is_first_guess and self.gpu is None:
            asked = (
                "--acceptance-from makes" if self.acceptance_from is not None else "--target-config/--draft-config make"
            )
            raise ConfigError(f"{asked} a simulated first guess: give --gpu PROFILE")
        if self.is_first_guess and self.is_mix:
            raise ConfigError("--target-config/--draft-config answer for one --batch-size, not a mix")
        if self.output_format not in ("flags", "json"):
            raise ConfigError(f"--format must be 'flags' or 'json', got {self.output_format!r}")
        if self.state is not None:
            check_gpu_state(*self.state, option="--state")
        if self.draft_model is not None and not self.draft_model.strip():
            raise ConfigError("--draft-model: empty; give the EAGLE3 draft model's path or hub id")
        if self.is_mix:
            if self.batch_mix is not None and self.batch_mix_from is not None:
                raise ConfigError("--batch-mix and --batch-mix-from are alternatives; give one")
            if self.batch_size is not None:
                raise ConfigError(
                    "--batch-size is for one batch size; a mix takes --batch-mix or --batch-mix-from alone"
                )
        elif self.batch_size is None:
            raise ConfigError("--batch-size is required (or --batch-mix / --batch-mix-from for a batch-size mix)")
        else:
            parse_batch_sizes(self.batch_size, "--batch-size")  # a bad list, naming the option
        named_action_set(self.actions)  # an unknown --actions, naming the option

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        """The batch sizes asked for, in order (empty for a mix)."""
        return () if self.batch_size is None else tuple(parse_batch_sizes(self.batch_size, "--batch-size"))

    @property
    def action_set(self) -> ActionSet:
        """The set ``--actions`` names: the folder is read against it."""
        return ACTION_SETS[self.actions]

    @property
    def is_first_guess(self) -> bool:
        """A simulated first guess (``--target-config``, ``--draft-config`` or ``--acceptance-from``)."""
        return any(v is not None for v in (self.target_config, self.draft_config, self.acceptance_from))

    @property
    def is_mix(self) -> bool:
        """A pick for a batch-size mix (``--batch-mix`` or ``--batch-mix-from``)."""
        return self.batch_mix is not None or self.batch_mix_from is not None

    def answer_requests(self) -> list[AnswerRequest]:
        """One :meth:`answer_request` per batch size asked (one for a mix)."""
        one = self.answer_request()
        return [replace(one, batch_size=bs) for bs in self.batch_sizes] if self.batch_sizes else [one]

    def answer_request(self) -> AnswerRequest:
        """What :func:`answer` answers for this request (the first batch size asked): a first
        guess, a mix, a power limit when the data holds several, else the pick."""
        first = None
        if self.is_first_guess:
            assert self.gpu is not None  # checked when the request was built
            first = FirstGuessSpec(self.gpu, self.target_config, self.draft_config, self.acceptance_from)
        return AnswerRequest(
            algo=self.algo,
            models=self.models,
            data=self.data,
            batch_size=self.batch_sizes[0] if self.batch_sizes else None,
            batch_mix=self.batch_mix,
            batch_mix_from=self.batch_mix_from,
            first_guess=first,
            state=self.state,
            draft_model=self.draft_model,
            trust_pickle=self.trust_pickle,
            allow_modified=self.allow_modified,
            action_set=self.action_set,
            power_limit="when-several",
            max_speed_loss=self.max_speed_loss,
            allow_transfer=self.allow_transfer,
            engine=self.engine,
            gpu=self.gpu,
            workload=ServingWorkload(self.prompt_tokens, self.output_tokens, "--prompt-tokens/--output-tokens"),
        )


#: When :func:`answer` answers with a power limit (:attr:`AnswerRequest.power_limit`):
#: ``"when-several"`` (``recommend``: when the data holds several limits), ``"required"``
#: (``launch --set-power-limit auto``: data with one limit is refused) or ``"never"``
#: (``launch`` without it: the pick).
POWER_LIMIT_RULES = ("when-several", "required", "never")


@dataclass(frozen=True)
class FirstGuessSpec:
    """A simulated first guess (:func:`specband.deploy.firstguess.first_guess`).

    Attributes:
        profile: the user's GPU as a simulator profile (``--gpu``).
        target_config, draft_config: the models' config.json (``None``: the bundled pair; one
            alone: its bundled pair, :func:`specband.sim.model.model_pair`).
        acceptance_from: measured accept lengths the pair's acceptance is fitted to, or ``None``.
    """

    profile: str
    target_config: str | None = None
    draft_config: str | None = None
    acceptance_from: str | None = None


@dataclass(frozen=True)
class ScheduleSpec:
    """A per-batch-size schedule (``specband schedule``, ``launch --schedule auto``).

    Attributes:
        batch_sizes: the batch sizes to schedule (``None``: the measured ones).
        margin: reward units within which chain configs join a tier's candidates.
        engine: the engine it is for (named in the off reasons; ``None``: the default engine).
        measured_only: score only the configs measured at each batch size.
    """

    batch_sizes: tuple[int, ...] | None = None
    margin: float = 0.0
    engine: Engine | None = None
    measured_only: bool = True

    def __post_init__(self) -> None:
        if self.engine is not None:  # a name given in code is resolved here, once
            object.__setattr__(self, "engine", get_engine(self.engine))


@dataclass(frozen=True)
class AnswerRequest:
    """What a command asks :func:`answer`, whichever command it is (``recommend``:
    :meth:`RecommendRequest.answer_request`; ``launch``; ``schedule``).

    Attributes:
        algo: model card algorithm name.
        models: ``--models`` (an artifact folder or hub id), or ``None``.
        data: ``--data`` (a sweep), or ``None``.
        batch_size: the batch size to answer for (``None``: a mix or a schedule).
        batch_mix, batch_mix_from: the mix (``--batch-mix`` text, or a Prometheus metrics file).
        first_guess: a simulated first guess instead of data (:class:`FirstGuessSpec`).
        schedule: a schedule's tier picks instead of one batch size (:class:`ScheduleSpec`).
        state: the GPU state ``(temp_c, mem_used_mb, util_pct)`` to decide from (``None``:
            the folder's).
        draft_model: the draft the flags carry (``None``: none).
        trust_pickle, allow_modified: how policy files are loaded (:mod:`specband.files.safeload`).
        action_set: the action set the folder (and a ``--data`` sweep) is read against
            (the command's ``--actions``).
        power_limit: when to answer with a power limit (one of :data:`POWER_LIMIT_RULES`).
        max_speed_loss: the speed a lower limit may cost against the fastest pick, fraction.
        allow_transfer: take data from another setup (its differences as notes).
        engine: the engine the answer is for (``--engine``; ``None``: the default engine): its
            flags are the engine's spelling and a pick is one it runs; a schedule's is its
            :attr:`ScheduleSpec.engine`. Data measured on another engine get a note
            (:meth:`~specband.sweeps.origin.DataOrigin.engine_note`).
        gpu: the ``--gpu`` profile (``None``: not named): with models named by a bundled
            name and no data for them, a first guess (:func:`specband.deploy.named.named_first_guess`).
        workload: the prompt and output lengths a first guess's serving power is for.

    Raises:
        ConfigError: an unknown ``power_limit`` rule, or not exactly one of a batch size, a mix
            and a schedule.
    """

    algo: str = "lookup_table"
    models: str | Path | None = None
    data: str | Path | None = None
    batch_size: int | None = None
    batch_mix: str | None = None
    batch_mix_from: Path | None = None
    first_guess: FirstGuessSpec | None = None
    schedule: ScheduleSpec | None = None
    state: tuple[float, float, float] | None = None
    draft_model: str | None = None
    trust_pickle: bool = False
    allow_modified: bool = False
    action_set: ActionSet = CONTRACT_SET
    power_limit: str = "when-several"
    max_speed_loss: float = DEFAULT_MAX_SPEED_LOSS
    allow_transfer: bool = False
    engine: Engine | None = None
    gpu: str | None = None
    workload: ServingWorkload | None = None

    def __post_init__(self) -> None:
        if self.engine is not None:  # a name given in code is resolved here, once
            object.__setattr__(self, "engine", get_engine(self.engine))
        if self.power_limit not in POWER_LIMIT_RULES:
            raise ConfigError(f"power_limit must be one of {', '.join(POWER_LIMIT_RULES)}, got {self.power_limit!r}")
        asked = [self.batch_size is not None, self.is_mix, self.schedule is not None]
        if sum(asked) != 1:
            raise ConfigError("an answer is for one batch size, a batch-size mix or a schedule: give one")

    @property
    def is_mix(self) -> bool:
        """A pick for a batch-size mix."""
        return self.batch_mix is not None or self.batch_mix_from is not None


def answer(request: AnswerRequest, setup: UserSetup | None = None) -> Answer | MixPowerLimitAnswer | FirstGuess:
    """The answer to ``request``: the one place that decides which answer a command gives.

    The rules, in order:

    1. a first guess (``request.first_guess``): the performance model's figures for the pair
       and GPU named, the config and the power limit picked together
       (:class:`~specband.deploy.table.FirstGuess`); no data is read and ``setup`` is not
       checked against it. Also where the data refuses the transfer while ``--gpu`` names a
       profile and the models are named by bundled names (:func:`specband.deploy.named.named_first_guess`);
    2. a batch-size mix: one config for the mix (:class:`~specband.deploy.answers.MixAnswer`);
    3. a schedule: the chain pick per batch size (:class:`~specband.deploy.answers.ScheduleAnswer`);
    4. a power limit (:class:`~specband.deploy.answers.PowerLimitAnswer`), unless
       ``request.power_limit`` is ``"never"``, when the data holds several limits: a folder
       named with ``--models`` whose manifest records them, else (no ``--models``) a
       ``--data`` sweep over several; the embedded default and ``./specband-models`` picked
       up without ``--models`` answer with the pick. ``"required"`` refuses data with one limit;
    5. otherwise the pick of ``--algo`` for the batch size (:func:`recommend`).

    The folder ``--models`` names is resolved once and its ``specband.json`` read once
    (:func:`specband.artifacts.load.open_folder`); the policy is loaded as every command loads
    it (:func:`specband.artifacts.load.load_models`), read against ``request.action_set``.

    Args:
        request: what the command asks.
        setup: the user's target, draft, GPU and power limit, checked against the data's
            (:func:`specband.deploy.transfer.check_transfer`; a power limit's answer does not
            compare the limit, its lever); ``None``: not checked.

    Raises:
        ConfigError: unknown algorithm, a bad mix, ``"required"`` without data over several
        limits; TransferError: the data is from another setup and ``request.allow_transfer``
        is False; ArtifactError, DataError, HubError: as the folder, sweep and hub reading.
    """
    engine = (request.schedule.engine if request.schedule is not None else request.engine) or default_engine()
    if request.first_guess is not None:
        return _first_guess(request, engine)
    if setup is not None and setup.target is not None and setup.draft is not None:
        from specband.doctor.pairs import refuse_local_pair  # lazy: only for a pair named (cold recommend)

        refuse_local_pair(setup.target, setup.draft)  # as doctor calls it an error, before any data is read
    try:
        decided = _answer(request, setup, engine)
    except TransferError as refused:
        from specband.deploy.named import named_first_guess  # lazy: only for a refusal (named models)

        named = named_first_guess(setup) if _may_guess(request) else None
        if request.gpu is None or named is None:
            raise
        guess = _first_guess(replace(request, first_guess=FirstGuessSpec(request.gpu, *named)), engine)
        instead = f"{str(refused).split('. Ways forward', 1)[0]}: a simulated first guess for the models named instead"
        return replace(guess, notes=(*guess.notes, instead), warnings=(*guess.warnings, instead))
    if not isinstance(decided, (Pick, ScheduleAnswer)):  # one the data chose: the engine must run it
        engine.check_actions([decided.action], option=f"--engine {engine.name}: the answer's config")
    what = "this schedule" if request.schedule is not None else "this pick"
    note = None if decided.origin is None else decided.origin.data.engine_note(engine.name, what)
    return decided if note is None else replace(decided, notes=(*decided.notes, note))


def _answer(request: AnswerRequest, setup: UserSetup | None, engine: Engine) -> Answer | MixPowerLimitAnswer:
    """:func:`answer` of a request with data (every rule but the first guess), for ``engine``."""
    mix = _read_mix(request) if request.is_mix else None  # a bad mix is the first error: nothing is read before
    validate_algorithms([request.algo])
    folder = None if request.models is None else open_folder(request.models, request.action_set)
    if mix is not None and (request.data is not None or (folder is not None and folder.manifest.power_limits)):
        from specband.deploy.mix import mix_power_limit_for  # lazy: off the cold path (recommend, --help)

        mix_limited = mix_power_limit_for(
            request.data, folder, mix, setup, max_speed_loss=request.max_speed_loss,
            action_set=request.action_set, draft_model=request.draft_model, allow=request.allow_transfer,
            engine=engine,
        )  # fmt: skip
        if mix_limited is not None:
            return mix_limited
    if mix is not None:
        from specband.deploy.mix import mix_answer  # lazy: off the cold path (recommend, --help)
        from specband.deploy.tiers import load_scorer  # lazy: off the cold path (recommend, --help)

        scorer = load_scorer(
            request.algo, folder, request.data, trust_pickle=request.trust_pickle, action_set=request.action_set
        )
        return mix_answer(
            scorer, mix, setup, state=request.state, draft_model=request.draft_model, allow=request.allow_transfer,
            engine=engine,
        )  # fmt: skip
    if request.schedule is not None:
        return _schedule_answer(request, request.schedule, folder, setup, engine)
    assert request.batch_size is not None  # checked when the request was built
    if request.power_limit != "never":
        limited = _power_limit_answer(request, request.batch_size, folder, setup, engine)
        if limited is not None:
            return limited
    return recommend(
        request.batch_size, request.algo, folder, request.state, request.draft_model, request.data,
        trust_pickle=request.trust_pickle, allow_modified=request.allow_modified, setup=setup,
        allow_transfer=request.allow_transfer, action_set=request.action_set, engine=engine,
    )  # fmt: skip


def _may_guess(request: AnswerRequest) -> bool:
    """A refused transfer may turn into a first guess for models named by a bundled name: a GPU
    profile named, no data named, one batch size (:func:`specband.deploy.named.named_first_guess`)."""
    named = request.gpu is not None and request.batch_size is not None
    return named and request.models is None and request.data is None


def _first_guess(request: AnswerRequest, engine: Engine) -> FirstGuess:
    from specband.deploy.firstguess import first_guess  # lazy: off the cold path (recommend, --help)

    spec = request.first_guess
    assert spec is not None and request.batch_size is not None  # checked when the request was built
    return first_guess(
        request.batch_size,
        spec.profile,
        spec.target_config,
        spec.draft_config,
        draft_model=request.draft_model,
        acceptance_from=spec.acceptance_from,
        engine=engine,
        workload=request.workload,
        max_speed_loss=request.max_speed_loss,
    )


def _read_mix(request: AnswerRequest) -> Mapping[int, float]:
    """The mix of ``--batch-mix`` or ``--batch-mix-from`` (normalised).

    Raises:
        ConfigError: a bad mix or metrics file.
    """

    if request.batch_mix is not None:
        return parse_batch_mix(request.batch_mix)
    from specband.deploy.mix import read_running_requests  # lazy: off the cold path (recommend, --help)

    assert request.batch_mix_from is not None
    return read_running_requests(request.batch_mix_from)


def _schedule_answer(
    request: AnswerRequest, spec: ScheduleSpec, folder: ModelFolder | None, setup: UserSetup | None, engine: Engine
) -> ScheduleAnswer:
    """The chain pick per batch size (:func:`specband.deploy.tiers.pick_chain_tiers`), the
    user's setup checked first (a refused transfer picks nothing)."""
    from specband.deploy.tiers import load_scorer, pick_chain_tiers  # lazy: off the cold path (recommend, --help)

    scorer = load_scorer(
        request.algo, folder, request.data, measured_only=spec.measured_only, trust_pickle=request.trust_pickle,
        action_set=request.action_set,
    )  # fmt: skip
    transfer = None if setup is None else check_scorer_transfer(scorer, setup, allow=request.allow_transfer)
    picks = pick_chain_tiers(scorer, spec.batch_sizes, spec.margin, engine=engine)
    return ScheduleAnswer(
        algorithm=request.algo,
        source=scorer.source,
        picks=tuple(picks),
        origin=replace(pick_origin(scorer.manifest, None), counts=None),
        transfer=transfer,
        notes=(*scorer.notes, *(() if transfer is None else transfer.warnings)),
        manifest=scorer.manifest,
    )


def _power_limit_answer(
    request: AnswerRequest, batch_size: int, folder: ModelFolder | None, setup: UserSetup | None, engine: Engine
) -> PowerLimitAnswer | None:
    """Rule 4 of :func:`answer`: the answer with a limit, or ``None`` (the pick answers).

    Raises:
        ConfigError: ``"required"`` without data over several limits (no data, or a folder
            trained on one limit), or a bad ``max_speed_loss``; DataError: ``"required"`` and
            a sweep with one limit, or a batch size without rows at some limit; TransferError:
            as :func:`answer`.
    """

    selector = BandWithinSpeedLoss(request.max_speed_loss)  # a bad bound is refused before anything is read
    required = request.power_limit == "required"
    table: LimitTable | None
    origin: DataOrigin | None
    if folder is not None:  # --models named: its manifest's table, when it was trained on several limits
        table, origin, label = folder.manifest.power_limits, folder.manifest.origin, folder.given
        if table is None and required:
            what = "has no specband manifest" if folder.manifest.foreign else "was trained on one power limit"
            raise ConfigError(
                f"{folder.given} {what}; a limit is picked from a folder trained on a sweep over several "
                "(sweep/simulate --power-limits) or from such a sweep (--data without --models)"
            )
    elif request.data is not None:  # a sweep without --models: its own table, when it holds several limits
        from specband.sweeps.dataset import load_sweep  # lazy: off the cold path (recommend, --help)

        sweep = load_sweep(resolve_data_file(request.data), action_set=request.action_set)
        if len(sweep_power_limits(sweep)) < 2 and not required:
            return None
        table, origin, label = limit_table(sweep, nearest_to=batch_size), data_origin(sweep), str(request.data)
    elif required:
        raise ConfigError("a power limit is picked from data over several limits: give --data SWEEP or --models DIR")
    else:
        return None  # the embedded default and ./specband-models picked up alone answer with the pick
    if table is None:
        return None
    checked = None
    if setup is not None:  # the power limit is the answer's lever: not compared
        checked = check_transfer(origin, replace(setup, power_limit_w=None), allow=request.allow_transfer, source=label)
    return power_limit_answer(
        table, batch_size, selector=selector, draft_model=request.draft_model, origin=origin, transfer=checked,
        engine=engine,
    )  # fmt: skip


def _gpu_floor(setup: UserSetup | None) -> LimitRange | None:
    """The user's GPU's range of limits as NVML reported it, or ``None`` (the note then takes
    the built-in profile of the data's GPU, :func:`specband.deploy.explain.profile_limit_range`)."""
    if setup is None or setup.power_limit_range_w is None:
        return None
    low, high = setup.power_limit_range_w
    return LimitRange(low, high, f"NVML's constraints on this {setup.gpu_name or 'GPU'}")


def _mask(indices: tuple[int, ...], size: int) -> Any:
    """A ``(size,)`` bool mask of ``indices`` (what a policy's ``act`` takes)."""
    import numpy as np  # a policy other than the lookup table: NumPy is loaded already

    mask = np.zeros(size, dtype=bool)
    mask[list(indices)] = True
    return mask


def recommend(  # noqa: PLR0913
    batch_size: int,
    algo: str = "lookup_table",
    models: str | Path | ModelFolder | None = None,
    telemetry: tuple[float, float, float] | None = None,
    draft_model: str | None = None,
    data_path: str | Path | None = None,
    *,
    trust_pickle: bool = False,
    allow_modified: bool = False,
    setup: UserSetup | None = None,
    allow_transfer: bool = False,
    action_set: ActionSet = CONTRACT_SET,
    engine: Engine | None = None,
) -> Pick:
    """The pick of one algorithm for a batch size (rule 5 of :func:`answer`): a
    :class:`~specband.deploy.answers.Pick`, whose ``to_json()`` is what ``specband recommend
    --format json`` prints and whose ``notes`` go with it, as data: the caller decides
    whether and when to print them.

    Args:
        batch_size: concurrent requests; an unmeasured one uses the nearest measured one.
        algo: model card algorithm name.
        models: artifact folder (or hub id, or a :class:`~specband.artifacts.load.ModelFolder`
            opened already), or ``None`` for ``./specband-models`` or the embedded default.
        telemetry: ``(temp_c, mem_used_mb, util_pct)`` of the GPU, or ``None`` for the
            state the folder's picks were made from.
        draft_model: EAGLE3 draft path for ``--speculative-draft-model-path`` (or ``None``).
        data_path: sweep restricting a foreign folder's picks to measured configs.
        trust_pickle: unpickle joblib files specband cannot vouch for (see
            :mod:`specband.files.safeload`).
        allow_modified: load files whose sha256 no longer matches the folder's manifest.
        setup: the user's target, draft, GPU and power limit, checked against the data's
            (:func:`specband.deploy.transfer.check_transfer`); ``None``: not checked.
        allow_transfer: take a pick whose data came from another setup (the differences
            become notes) instead of stopping.
        action_set: the command's ``--actions``: the folder (and ``data_path``) is read
            against it; the pick's JSON names it when it is not the contract.
        engine: the engine the pick is for (``None``: the default engine): it is chosen among
            the configs the engine runs (a note says when that left some out) and its flags are
            the engine's.

    Raises:
        ConfigError: unknown algorithm, an empty ``draft_model``, no allowed config the engine
        runs; TransferError: the data is
        from another setup and ``allow_transfer`` is False; ArtifactError: unreadable
        folder or an untrusted pickle; DataError: bad sweep; HubError: a hub id not found.
    """
    # The lookup_table path reads JSON only: no NumPy, torch or scikit-learn (cold-fast).

    if draft_model is not None and not draft_model.strip():
        raise ConfigError("draft model: empty; give the EAGLE3 draft model's path or hub id")
    loaded = load_models(
        algo, models, data_path, trust_pickle=trust_pickle, allow_modified=allow_modified, action_set=action_set
    )
    notes = list(loaded.notes)
    manifest, policy, lookup_means = loaded.manifest, loaded.policy, loaded.lookup_means
    source = "embedded (bundled published measurements)" if loaded.source == "embedded" else loaded.source
    checked = TransferCheck()
    if setup is not None:
        checked = check_transfer(manifest.origin, setup, allow=allow_transfer, source=loaded.label)
        notes.extend(checked.warnings)
    notes.extend(data_notes(manifest, source, telemetry))
    measured = manifest.measured_batch_size(batch_size)
    notes.extend(unmeasured_notes(manifest, [batch_size]))
    state = manifest.state_for(batch_size, telemetry)
    engine = engine or default_engine()
    allowed = manifest.allowed_indices(batch_size)
    runnable = runnable_indices(engine, action_set, allowed)
    if not runnable:
        raise ConfigError(f"--engine {engine.name}: none of the configs the data allows here is one it runs")
    left_out = (len(action_set) if allowed is None else len(allowed)) - len(runnable)
    if left_out:
        notes.append(f"picked among the {len(runnable)} config(s) {engine.display_name} runs ({left_out} left out)")
    if lookup_means is not None:
        index = lookup_pick(lookup_means, batch_size if measured is None else measured, runnable, action_set)
    elif allowed is None and not left_out:
        assert policy is not None
        index = policy.act(state, None)
    else:
        assert policy is not None
        index = policy.act(state, _mask(runnable, len(action_set)))
    return Pick(
        algorithm=algo,
        batch_size=batch_size,
        measured_batch_size=measured,
        features=manifest.features,
        state=tuple(float(f"{float(v):.7g}") for v in state),  # float32 precision
        source=source,
        action_index=index,
        action=action_set[index],
        engine=engine,
        draft_model=draft_model,
        mean_reward=None if measured is None else manifest.mean_reward(measured, index),
        origin=pick_origin(manifest, measured),
        explanation=explain_pick(manifest, measured, index, floor=_gpu_floor(setup), runnable=runnable),
        transfer=checked,
        action_set=None if action_set.is_contract else action_set.name,
        notes=tuple(notes),
    )
