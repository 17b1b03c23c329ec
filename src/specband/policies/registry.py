"""The one list of the eight policies: what each is called, where its code lives, which
files it writes, how they load.

Everything that lists algorithms reads :data:`REGISTRY`: :data:`specband.policies.ALGORITHMS`
and ``EXTENDED_ALGORITHMS``, :func:`specband.policies.policy_class`, each class's
``artifact_file`` and ``needs_torch`` (:class:`specband.policies.base.Policy` fills them in
from its entry), :data:`specband.policies.nets.TORCH_ALGORITHMS`, the folder layout of
:mod:`specband.artifacts.folder` (``ARTIFACT_FILES``, ``PICKLED_ALGORITHMS``) and the
loading recipes of the model card (:data:`specband.artifacts.card.RECIPES`).

This module imports no NumPy, torch or scikit-learn, and :func:`specband.policies.policy_class`
imports only the one policy's module, so the ``lookup_table`` path of
``specband recommend`` stays cold-fast.

The files and recipes are the published model card's (docs/FACTS.md §5, docs/model_card.txt,
"load" column).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from specband.core.errors import ConfigError
from specband.policies.files import SIDECAR_FILE

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["REGISTRY", "PolicyEntry", "policy_entry"]


@dataclass(frozen=True)
class PolicyEntry:
    """One algorithm of the model card.

    Attributes:
        name: the model card's name, also the folder ``<artifact folder>/<name>/``.
        module: the dotted module that defines ``POLICY``, the algorithm's
            :class:`~specband.policies.base.Policy` subclass (imported only when asked for).
        artifact_file: the model card's file inside ``<name>/`` (``save`` returns its path).
        copies: the pickle-free copies specband writes beside ``artifact_file`` and loads
            first (skops for a joblib file, safetensors for a torch file); the model
            card's recipes ignore them.
        pickled: whether ``artifact_file`` is a pickle (joblib), unpickled only when
            specband wrote it or the user trusts it (:mod:`specband.files.safeload`); its
            ``load`` takes ``trust_pickle``.
        needs_torch: whether writing ``artifact_file`` needs torch (a ``.pth`` file);
            fitting never does.
        extended: whether the algorithm is trained and evaluated on the extended action
            set (``--actions extended``): only ``lookup_table``'s file names triples
            (``{"config": [s, k, d]}``); every other file is a 19-action format
            (``QNetwork(4, 19)``, ``action_idx/19`` features, ``(19, 3)`` action arrays)
            whose loaders must never be handed an index outside 0-18.
        recipe: how ``artifact_file`` loads without specband, as the model card's
            "Files and how they load" table prints it (Markdown).
    """

    name: str
    module: str
    artifact_file: str
    copies: tuple[str, ...] = ()
    pickled: bool = False
    needs_torch: bool = False
    extended: bool = False
    recipe: str = ""

    @property
    def path(self) -> str:
        """The model card file relative to the artifact folder, ``<name>/<artifact_file>``."""
        return f"{self.name}/{self.artifact_file}"

    @property
    def files(self) -> tuple[str, ...]:
        """Every file ``save`` writes inside ``<name>/``: the model card file, its
        pickle-free copies and the sidecar (:data:`~specband.policies.files.SIDECAR_FILE`)."""
        return (self.artifact_file, *self.copies, SIDECAR_FILE)


_QNETWORK_RECIPE = "`QNetwork(4, 19).load_state_dict(torch.load(..., weights_only=True))`"

#: The eight algorithms, in the model card's order (name -> entry; read-only).
REGISTRY: Mapping[str, PolicyEntry] = MappingProxyType(
    {
        entry.name: entry
        for entry in (
            PolicyEntry(
                name="mlp_bandit",
                module="specband.policies.mlp_bandit",
                artifact_file="policy.pth",
                copies=("policy.safetensors",),
                needs_torch=True,
                recipe=_QNETWORK_RECIPE,
            ),
            PolicyEntry(
                name="lookup_table",
                module="specband.policies.lookup_table",
                artifact_file="model.json",
                extended=True,
                recipe='`json.load(open(...))`: `{batch_size: {"config": [...], "mean_reward": ...}}`',
            ),
            PolicyEntry(
                name="linucb",
                module="specband.policies.linucb",
                artifact_file="model.npz",
                recipe="`np.load(...)`: theta, A, actions",
            ),
            PolicyEntry(
                name="thompson_sampling",
                module="specband.policies.thompson_sampling",
                artifact_file="model.npz",
                recipe="`np.load(...)`: mean, cov, actions",
            ),
            PolicyEntry(
                name="gbt",
                module="specband.policies.gbt",
                artifact_file="model.joblib",
                copies=("model.skops",),
                pickled=True,
                recipe="`joblib.load(...)`: GradientBoostingRegressor on `[state, action_idx/19]` "
                "(pickle; specband loads `gbt/model.skops` instead)",
            ),
            PolicyEntry(
                name="doubly_robust",
                module="specband.policies.doubly_robust",
                artifact_file="model.joblib",
                copies=("model.skops",),
                pickled=True,
                recipe="`joblib.load(...)`: LinearRegression on `[state, action_idx/19]`; the IPS correction "
                "is in `doubly_robust/specband.json` (pickle; specband loads `doubly_robust/model.skops` instead)",
            ),
            PolicyEntry(
                name="cql",
                module="specband.policies.cql",
                artifact_file="policy.pth",
                copies=("policy.safetensors",),
                needs_torch=True,
                recipe=_QNETWORK_RECIPE,
            ),
            PolicyEntry(
                name="bcq",
                module="specband.policies.bcq",
                artifact_file="policy.pth",
                copies=("policy.safetensors",),
                needs_torch=True,
                recipe="`torch.load(..., weights_only=True)`: dict with behavior_state_dict, q_state_dict, actions",
            ),
        )
    }
)


def policy_entry(name: str) -> PolicyEntry:
    """The registry entry of a model card name.

    Raises:
        ConfigError: an unknown name (``unknown algorithm 'x'; expected one of: ...``).
    """
    entry = REGISTRY.get(name) if isinstance(name, str) else None
    if entry is None:
        raise ConfigError(f"unknown algorithm {name!r}; expected one of: {', '.join(REGISTRY)}")
    return entry
