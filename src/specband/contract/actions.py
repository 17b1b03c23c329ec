"""The 19-action contract: EAGLE3 speculative-decoding configurations for sglang.

An *action* is a triple ``(speculative_num_steps, speculative_eagle_topk,
speculative_num_draft_tokens)``, the three sglang launch flags
``--speculative-num-steps``, ``--speculative-eagle-topk`` and
``--speculative-num-draft-tokens``. ``(0, 0, 0)`` is the non-speculative baseline.

The contract (the order is part of it: index ``i`` in every published policy file means
``ACTIONS[i]``) is derived from the grid that sglang's own benchmark script sweeps
(``scripts/playground/bench_speculative.py``): steps ``{0, 1, 3, 5}`` x topk
``{0, 1, 2, 4}`` x draft tokens ``{0, 2, 4, 8, 16}``, iterated in that nesting order,
keeping valid triples, canonicalised and de-duplicated in first-seen order.

Validity rules (sglang 0.5.x, ``python/sglang/srt/server_args.py`` and the bench script):

1. draft budget: ``steps * topk + 1 >= num_draft_tokens`` (a tree of ``steps`` levels of
   ``topk`` candidates plus the root cannot hold more draft tokens; the bench script skips
   the rest);
2. topk = 1 canonicalisation: with ``topk == 1`` the server rewrites
   ``num_draft_tokens = steps + 1`` (a warning, not an error);
3. baseline or all non-zero: ``(0, 0, 0)`` is the baseline; any other triple with a zero
   is invalid.

The **extended** action set (opt-in, ``--actions extended``; :data:`EXTENDED_ACTIONS`) is the
grid that sglang's ``bench_speculative.py`` sweeps now: steps ``{0, 1, 3, 5, 7}`` x topk
``{0, 1, 2, 4, 8}`` x draft tokens ``{0, 2, 4, 8, 16, 32}``, kept by the same three rules. Its
first 19 entries are :data:`ACTIONS` in contract order (an index below 19 means the same triple
in both sets); the 25 triples the contract lacks follow in grid order (44 in all).

A set travels as a value, an :class:`ActionSet` (:data:`ACTION_SETS`): a command's request
carries the one ``--actions`` names, and a sweep, its training data, a manifest and a policy
carry the one they were made with. Actions are checked where they enter (an option, a file,
a request: :func:`validate_action`, :func:`action_index`, :func:`parse_action`); past that
they travel as :class:`Action` values and are trusted (:func:`as_action`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from specband.core.errors import InvalidActionError
from specband.core.limits import is_int
from specband.core.optionspec import option

__all__ = [
    "ACTIONS",
    "ACTION_SETS",
    "ACTION_SET_NAMES",
    "BASELINE_ACTION",
    "BASELINE_INDEX",
    "CONTRACT_SET",
    "EXTENDED_ACTIONS",
    "EXTENDED_GRID_DRAFT_TOKENS",
    "EXTENDED_GRID_STEPS",
    "EXTENDED_GRID_TOPK",
    "EXTENDED_SET",
    "GRID_DRAFT_TOKENS",
    "GRID_STEPS",
    "GRID_TOPK",
    "NUM_ACTIONS",
    "REFERENCE_ACTION",
    "REFERENCE_INDEX",
    "Action",
    "ActionSet",
    "action_index",
    "action_set",
    "action_set_field",
    "action_set_of",
    "as_action",
    "canonicalize",
    "check_baseline_or_nonzero",
    "check_draft_budget",
    "enumerate_actions",
    "parse_action",
    "server_args_kwargs",
    "sglang_cli_args",
    "validate_action",
]


class Action(NamedTuple):
    """One EAGLE3 configuration: the three sglang speculative flags.

    Attributes:
        speculative_num_steps: draft depth (``--speculative-num-steps``), 0 for the baseline.
        speculative_eagle_topk: branching factor per draft step (``--speculative-eagle-topk``).
        speculative_num_draft_tokens: tokens the target verifies per step
            (``--speculative-num-draft-tokens``).

    A plain tuple underneath, so ``Action(3, 4, 8) == (3, 4, 8)``.
    """

    speculative_num_steps: int
    speculative_eagle_topk: int
    speculative_num_draft_tokens: int

    @property
    def is_baseline(self) -> bool:
        """True for ``(0, 0, 0)``, the non-speculative baseline."""
        return self == (0, 0, 0)

    def __str__(self) -> str:
        return f"({self[0]},{self[1]},{self[2]})"


#: Grid values of sglang's bench_speculative.py sweep, in nesting order.
GRID_STEPS: tuple[int, ...] = (0, 1, 3, 5)
GRID_TOPK: tuple[int, ...] = (0, 1, 2, 4)
GRID_DRAFT_TOKENS: tuple[int, ...] = (0, 2, 4, 8, 16)


def _as_triple(triple: Sequence[int]) -> tuple[int, int, int]:
    try:
        steps, topk, draft = triple
    except (TypeError, ValueError):
        raise InvalidActionError(
            f"an action is a triple (speculative_num_steps, speculative_eagle_topk, "
            f"speculative_num_draft_tokens), got {triple!r}"
        ) from None
    for name, value in zip(
        ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"),
        (steps, topk, draft),
        strict=True,
    ):
        if not is_int(value):
            raise InvalidActionError(f"{name} must be an integer, got {value!r}")
        if value < 0:
            raise InvalidActionError(f"{name} must be >= 0, got {value}")
    return int(steps), int(topk), int(draft)


def check_baseline_or_nonzero(triple: Sequence[int]) -> None:
    """Rule 3: ``(0, 0, 0)`` is the baseline; any other triple containing a zero is invalid.

    Raises:
        InvalidActionError: naming rule 3, when exactly some (not all) entries are zero.
    """
    steps, topk, draft = _as_triple(triple)
    zeros = (steps == 0) + (topk == 0) + (draft == 0)
    if 0 < zeros < 3:
        raise InvalidActionError(
            f"{(steps, topk, draft)} breaks rule 3 (baseline or all non-zero): only (0,0,0) may contain a zero"
        )


def check_draft_budget(triple: Sequence[int]) -> None:
    """Rule 1: ``steps * topk + 1 >= num_draft_tokens`` (sglang bench_speculative.py skips
    the rest: the draft tree cannot hold more tokens).

    Raises:
        InvalidActionError: naming rule 1, when the budget is exceeded.
    """
    steps, topk, draft = _as_triple(triple)
    if steps * topk + 1 < draft:
        raise InvalidActionError(
            f"{(steps, topk, draft)} breaks rule 1 (draft budget): steps * topk + 1 = "
            f"{steps * topk + 1} < num_draft_tokens = {draft}"
        )


def canonicalize(triple: Sequence[int]) -> Action:
    """Rule 2: with ``topk == 1`` sglang rewrites ``num_draft_tokens = steps + 1``.

    Only rewrites; does not validate (see :func:`validate_action`).

    Returns:
        the canonical :class:`Action`.
    """
    steps, topk, draft = _as_triple(triple)
    if topk == 1 and steps > 0:
        draft = steps + 1
    return Action(steps, topk, draft)


def validate_action(triple: Sequence[int]) -> Action:
    """Check rules 3 and 1 on the raw triple, then canonicalise (rule 2).

    Does not require membership in the 19 contract actions (see :func:`action_index`).

    Raises:
        InvalidActionError: naming the broken rule.
    """
    check_baseline_or_nonzero(triple)
    check_draft_budget(triple)
    return canonicalize(triple)


def enumerate_actions(
    steps: tuple[int, ...] = GRID_STEPS,
    topk: tuple[int, ...] = GRID_TOPK,
    draft_tokens: tuple[int, ...] = GRID_DRAFT_TOKENS,
) -> tuple[Action, ...]:
    """Valid, canonical, de-duplicated actions of a grid, in first-seen nesting order.

    With the default grid this returns exactly :data:`ACTIONS` (19 actions).
    """
    seen: dict[Action, None] = {}
    for s in steps:
        for k in topk:
            for d in draft_tokens:
                try:
                    action = validate_action((s, k, d))
                except InvalidActionError:
                    continue
                seen.setdefault(action, None)
    return tuple(seen)


#: The 19 contract actions; index i means the same triple in every published file.
ACTIONS: tuple[Action, ...] = enumerate_actions()
NUM_ACTIONS: int = len(ACTIONS)
#: Non-speculative baseline, index 0.
BASELINE_ACTION: Action = Action(0, 0, 0)
BASELINE_INDEX: int = 0
#: Reference configuration of the published study (sglang docs show (3,4,16), which breaks rule 1).
REFERENCE_ACTION: Action = Action(3, 4, 8)
_INDEX: dict[Action, int] = {a: i for i, a in enumerate(ACTIONS)}
REFERENCE_INDEX: int = _INDEX[REFERENCE_ACTION]


#: Grid of sglang's bench_speculative.py sweep behind the extended action set.
EXTENDED_GRID_STEPS: tuple[int, ...] = (0, 1, 3, 5, 7)
EXTENDED_GRID_TOPK: tuple[int, ...] = (0, 1, 2, 4, 8)
EXTENDED_GRID_DRAFT_TOKENS: tuple[int, ...] = (0, 2, 4, 8, 16, 32)
#: The extended action set: the 19 contract actions in contract order, then the rest of the grid.
EXTENDED_ACTIONS: tuple[Action, ...] = ACTIONS + tuple(
    a for a in enumerate_actions(EXTENDED_GRID_STEPS, EXTENDED_GRID_TOPK, EXTENDED_GRID_DRAFT_TOKENS) if a not in _INDEX
)


@dataclass(frozen=True)
class ActionSet:
    """A named action set: what an action index means in every file, score vector and mask
    built against it.

    Attributes:
        name: ``"contract"`` (:data:`ACTIONS`, 19) or ``"extended"`` (:data:`EXTENDED_ACTIONS`,
            44), as ``--actions`` and the files (``action_set`` of a row or a manifest) say.
        actions: the actions in index order; the contract's 19 come first in both sets, so an
            index below 19 means the same triple in either.

    Behaves as the tuple of its actions (``len``, indexing, iteration, ``in``); the index of an
    action is :meth:`index` (a dict lookup).
    """

    name: str
    actions: tuple[Action, ...]
    _index: Mapping[Action, int] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {a: i for i, a in enumerate(self.actions)})

    def __repr__(self) -> str:
        return f"ActionSet({self.name!r}, {len(self.actions)} actions)"

    def __len__(self) -> int:
        return len(self.actions)

    def __iter__(self) -> Iterator[Action]:
        return iter(self.actions)

    def __getitem__(self, index: int) -> Action:
        return self.actions[index]

    def __contains__(self, action: object) -> bool:
        return action in self._index

    @property
    def is_contract(self) -> bool:
        """The 19 contract actions (rows and manifests of this set carry no ``action_set``)."""
        return self.name == "contract"

    def index(self, action: Action) -> int:
        """Index of a (validated, canonical) action in this set.

        Raises:
            InvalidActionError: the action is not in the set (naming ``--actions extended``
                when that set holds it).
        """
        index = self._index.get(action)
        if index is None:
            raise _not_in_set(action, action, self)
        return index


#: Action sets by the name ``--actions`` takes; ``contract`` is the default everywhere.
ACTION_SETS: dict[str, ActionSet] = {
    "contract": ActionSet("contract", ACTIONS),
    "extended": ActionSet("extended", EXTENDED_ACTIONS),
}
#: The 19 contract actions as an :class:`ActionSet` (what a file without ``action_set`` holds).
CONTRACT_SET: ActionSet = ACTION_SETS["contract"]
#: The extended action set (44 actions, the contract's 19 first).
EXTENDED_SET: ActionSet = ACTION_SETS["extended"]


def action_set(name: str) -> ActionSet:
    """The named set (``contract``: the 19; ``extended``: sglang's full grid, 44): where
    ``--actions`` or a file's ``action_set`` enters.

    Raises:
        InvalidActionError: an unknown name (naming the option ``--actions``).
    """
    try:
        return ACTION_SETS[name]
    except (KeyError, TypeError):
        raise InvalidActionError(f"--actions must be one of {', '.join(ACTION_SETS)}, got {name!r}") from None


#: Names ``--actions`` takes, the default first.
ACTION_SET_NAMES: tuple[str, ...] = tuple(ACTION_SETS)


def action_set_of(actions: Iterable[Action]) -> ActionSet:
    """The smallest named set holding every action: :data:`CONTRACT_SET` when all are
    contract actions, else :data:`EXTENDED_SET`.

    Raises:
        InvalidActionError: an action in neither set.
    """
    found = CONTRACT_SET
    for action in actions:
        if action in CONTRACT_SET:
            continue
        if action not in EXTENDED_SET:
            raise InvalidActionError(f"{tuple(action)} is valid for sglang but in neither action set")
        found = EXTENDED_SET
    return found


def action_set_field(what: str = "the sweep's rows", panel: str = "grid") -> Any:
    """The ``--actions contract|extended`` option, declared once for every command that
    takes it (train, evaluate, recommend, schedule, simulate): a dataclass field (see
    :func:`specband.core.optionspec.option`) defaulting to ``contract``.

    Args:
        what: what the action set applies to, for the help text.
        panel: its ``--help`` panel (``model`` where it is the action set of a policy).
    """

    return option(
        "contract",
        "--actions",
        help=f"Action set of {what}: 'contract' (the 19 actions of the published formats) or 'extended' "
        "(sglang bench_speculative.py's full grid: steps 0-7, topk up to 8, draft tokens up to 32; 44 "
        "actions, the contract's 19 first).",
        panel=panel,
        metavar="SET",
    )  # a plain string (the cold-fast parser takes it); the request's __post_init__ checks it (action_set)


def _not_in_set(triple: Sequence[int], action: Action, actions: ActionSet) -> InvalidActionError:
    """The error for a valid action outside ``actions``: naming ``--actions extended`` when
    the extended set holds it."""
    if action in EXTENDED_SET and actions.is_contract:
        return InvalidActionError(
            f"({','.join(map(str, triple))}) (canonical {action}) is valid for sglang but not one of the "
            f"19 contract actions: it is in the extended action set (pass --actions extended)"
        )
    return InvalidActionError(
        f"({','.join(map(str, triple))}) (canonical {action}) is valid for sglang but not one of the "
        f"19 contract actions (run `specband actions`)"
    )


def action_index(triple: Sequence[int], actions: ActionSet = CONTRACT_SET) -> int:
    """Index in ``actions`` (the 19 contract actions by default) of a raw triple, after
    validation and canonicalisation: where a triple read from a file enters.

    Raises:
        InvalidActionError: when a rule is broken or the canonical triple is not in the set.
    """
    action = validate_action(triple)
    index = actions._index.get(action)
    if index is None:
        raise _not_in_set(triple, action, actions)
    return index


def as_action(triple: Sequence[int]) -> Action:
    """``triple`` as an :class:`Action`: an ``Action`` passes as is (it was validated where it
    entered: a file, an option, a request); any other triple is checked and canonicalised
    here (:func:`validate_action`). What the library functions that also take a plain tuple
    from a caller (launch lines, flags, the simulator) call first.

    Raises:
        InvalidActionError: a plain triple that breaks a rule.
    """
    return triple if isinstance(triple, Action) else validate_action(triple)


def parse_action(text: str, actions: ActionSet = CONTRACT_SET) -> Action:
    """Parse ``"3,4,8"``, ``"(3, 4, 8)"`` or an index ``"10"`` into an action of ``actions``
    (the 19 contract actions by default): where an action typed by the user enters.

    Raises:
        InvalidActionError: unparsable text, an index outside the set, or a triple that is
            not in it.
    """
    cleaned = text.strip().strip("()[]")
    parts = [p for p in cleaned.replace(" ", ",").split(",") if p]
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise InvalidActionError(f"cannot parse action {text!r}: expected 'S,K,N' or an index") from None
    if len(values) == 1:
        if not 0 <= values[0] < len(actions):
            raise InvalidActionError(f"action index {values[0]} is outside 0..{len(actions) - 1}")
        return actions[values[0]]
    if len(values) != 3:
        raise InvalidActionError(f"cannot parse action {text!r}: expected 'S,K,N' or an index")
    return actions[action_index(values, actions)]


def sglang_cli_args(triple: Sequence[int], draft_model_path: str | None = None) -> list[str]:
    """sglang ``launch_server`` flags for an action; the baseline gets none.

    Args:
        triple: an :class:`Action` (trusted), or a plain triple (checked and canonicalised
            here, :func:`as_action`).
        draft_model_path: when given, ``--speculative-draft-model-path`` is included.

    Returns:
        e.g. ``["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", D,
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
        "--speculative-num-draft-tokens", "8"]``.

    Raises:
        InvalidActionError: a plain triple that breaks a rule.
    """
    action = as_action(triple)
    if action.is_baseline:
        return []
    args = ["--speculative-algorithm", "EAGLE3"]
    if draft_model_path is not None:
        args += ["--speculative-draft-model-path", str(draft_model_path)]
    args += [
        "--speculative-num-steps",
        str(action.speculative_num_steps),
        "--speculative-eagle-topk",
        str(action.speculative_eagle_topk),
        "--speculative-num-draft-tokens",
        str(action.speculative_num_draft_tokens),
    ]
    return args


def server_args_kwargs(triple: Sequence[int], draft_model_path: str | None = None) -> dict[str, object]:
    """Keyword arguments for sglang's ``ServerArgs`` / ``sglang.Engine`` for an action.

    Field names follow ``python/sglang/srt/server_args.py``. The baseline gets ``{}``; an
    :class:`Action` is trusted, a plain triple checked (:func:`as_action`).

    Raises:
        InvalidActionError: a plain triple that breaks a rule.
    """
    action = as_action(triple)
    if action.is_baseline:
        return {}
    kwargs: dict[str, object] = {"speculative_algorithm": "EAGLE3"}
    if draft_model_path is not None:
        kwargs["speculative_draft_model_path"] = str(draft_model_path)
    kwargs.update(action._asdict())
    return kwargs


#: Indices of the chain configs (topk 1) and the baseline among the 19 actions.
CHAIN_INDICES: tuple[int, ...] = tuple(i for i, a in enumerate(ACTIONS) if a.is_baseline or a[1] == 1)


#: Indices of the tree configs (topk > 1).
TREE_INDICES: tuple[int, ...] = tuple(i for i in range(NUM_ACTIONS) if i not in CHAIN_INDICES)


def chain_and_tree_indices(num_actions: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """:data:`CHAIN_INDICES` and :data:`TREE_INDICES` of the first ``num_actions`` actions of
    :data:`~specband.contract.actions.EXTENDED_ACTIONS` (19: the contract's; 44: the extended set's)."""
    actions = EXTENDED_ACTIONS[:num_actions]
    chain = tuple(i for i, a in enumerate(actions) if a.is_baseline or a[1] == 1)
    return chain, tuple(i for i in range(num_actions) if i not in chain)


def chain_action(steps: int) -> Action:
    """The chain config with ``steps`` draft steps: ``(steps, 1, steps + 1)``, or the
    baseline ``(0, 0, 0)`` for 0 (what an sglang adaptive tier runs at that step count)."""
    return Action(0, 0, 0) if steps == 0 else Action(steps, 1, steps + 1)
