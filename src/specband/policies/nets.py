"""The small neural networks of the ``mlp_bandit``, ``cql`` and ``bcq`` policies, trained
in NumPy, stored as torch ``state_dict`` files.

Networks (model card, docs/FACTS.md §5):

* ``QNetwork(4, 19)``: ``net.0`` Linear(4, 128), GELU, ``net.2`` Linear(128, 128), GELU,
  ``net.4`` Linear(128, 19), i.e. an ``nn.Sequential`` named ``net``;
* BCQ's behaviour network: ``net.0`` Linear(4, 128), GELU, ``net.2`` Linear(128, 19).

GELU is the exact (erf) form, as ``torch.nn.GELU()``. Parameters are initialised as
``torch.nn.Linear`` does (weights and biases uniform in ``±1/sqrt(fan_in)``) from NumPy
generators derived from the seed, and trained with AdamW (Loshchilov & Hutter 2019;
the update of ``torch.optim.AdamW``: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight
decay 0.01) on minibatches of 8 rows in a fresh random order each epoch.

Why NumPy and not torch autograd: these nets are tiny (19.6 k parameters, 8-row
minibatches), so torch's per-operation overhead dominates; one torch training step
measured about 0.75-1.0 ms on the 2-core development machine against about 0.13 ms for
the hand-written step below, and the three policies take about 32 000 steps on a 228-row
sweep. The hand-written gradients and AdamW update are checked against torch autograd and
``torch.optim.AdamW`` in ``tests/policies/test_nets.py``. torch is imported only to read
and write ``.pth`` files, and lazily (:func:`require_torch`): torch is the ``specband[torch]``
extra. Without it these policies still load from the safetensors copy specband writes beside
each ``.pth`` (read as NumPy arrays), but cannot be saved, nor loaded from a bare ``.pth``.

Losses (gradient with respect to the network output ``q``, shape (B, 19)):

* ``"mse"``: mean over the minibatch of ``(q[a] - r)^2`` on the taken action only;
* ``"cql"``: ``"mse"`` plus ``alpha * mean(logsumexp(q) - q[a])``, the CQL(H) penalty of
  Kumar et al. 2020 ("Conservative Q-Learning for Offline RL", eq. 4) in the one-step
  (bandit) case;
* ``"ce"``: cross-entropy of the softmax of ``q`` against the logged action (BCQ's
  behaviour model, Fujimoto et al. 2019, "Benchmarking Batch Deep RL Algorithms").

Deviation from the published recipe: with lr 1e-3 and 8-row minibatches the last iterate
keeps moving by 0.01-0.04 in reward around the fit (measured on the bundled data), as much as
the gap between the two best configs at batch size 1 (0.015). The result is therefore the
average of the epoch-end parameters over the last quarter of the epochs (stochastic weight
averaging; ``average_last``, 0 restores the last iterate), which brings that to about 0.01.

Training runs with the same seed share work: the ``mse`` trajectory of the MLP bandit (200
epochs) is the first 200 epochs of BCQ's Q-network trajectory (300 epochs), so a finished
trajectory is cached per (data, seed, loss, hyper-parameters) with snapshots at the epochs
asked for; a cached result is bit-identical to a fresh run.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy import special

from specband.core.errors import ArtifactError, ConfigError, MissingExtraError
from specband.core.limits import is_int
from specband.files.safeload import check_file_size, check_safetensors_header, check_zip_members
from specband.policies.base import Policy, PolicyConfig, as_states, check_int, check_number, write_bytes_atomic
from specband.policies.registry import REGISTRY
from specband.sweeps.dataset import TrainingData

__all__ = [
    "BEHAVIOR_LAYERS",
    "MLP",
    "QNETWORK_LAYERS",
    "SAFETENSORS_SUFFIX",
    "TORCH_ALGORITHMS",
    "NetConfig",
    "QNetworkPolicy",
    "TrainSettings",
    "clear_training_cache",
    "gelu",
    "load_state_dict",
    "require_torch",
    "safetensors_bytes",
    "save_torch",
    "save_torch_atomic",
    "state_dict_tensors",
    "torch_available",
    "train_mlp",
]

#: The algorithms whose artifact is a torch ``.pth`` file (model card): saving them needs torch
#: (:attr:`specband.policies.registry.PolicyEntry.needs_torch`).
TORCH_ALGORITHMS: tuple[str, ...] = tuple(e.name for e in REGISTRY.values() if e.needs_torch)

#: (fan_in, fan_out) of each Linear of QNetwork(4, 19) (model card).
QNETWORK_LAYERS: tuple[tuple[int, int], ...] = ((4, 128), (128, 128), (128, 19))
#: (fan_in, fan_out) of each Linear of BCQ's behaviour network (model card).
BEHAVIOR_LAYERS: tuple[tuple[int, int], ...] = ((4, 128), (128, 19))

_SQRT_HALF = np.float32(1.0 / math.sqrt(2.0))
_INV_SQRT_2PI = np.float32(1.0 / math.sqrt(2.0 * math.pi))

# seed-sequence tags of the independent random streams
_STREAM_INIT = {"mse": 1, "cql": 1, "ce": 2}
_STREAM_ORDER = 3


_erf = special.erf
_ndtr = special.ndtr


def gelu(z: np.ndarray) -> np.ndarray:
    """Exact GELU ``z * Phi(z)`` (as ``torch.nn.GELU()``), elementwise, same shape and dtype."""
    return z * (0.5 * (1.0 + _erf(z * _SQRT_HALF)))


@dataclass
class MLP:
    """A stack of Linear layers with GELU between them, parameters in one flat float32 buffer.

    Attributes:
        layers: ``(fan_in, fan_out)`` of each Linear.
        flat: (n_params,) float32 buffer holding every weight and bias.
        weights: per layer a (fan_in, fan_out) view of ``flat`` (the transpose of torch's
            ``weight``).
        biases: per layer a (fan_out,) view of ``flat``.
    """

    layers: tuple[tuple[int, int], ...]
    flat: np.ndarray
    weights: list[np.ndarray] = field(init=False, repr=False)
    biases: list[np.ndarray] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.weights, self.biases = _views(self.layers, self.flat)

    @staticmethod
    def size(layers: Sequence[tuple[int, int]]) -> int:
        """Number of parameters of a layer stack."""
        return sum(i * o + o for i, o in layers)

    @classmethod
    def init(cls, layers: Sequence[tuple[int, int]], rng: np.random.Generator) -> MLP:
        """Parameters drawn as ``torch.nn.Linear`` draws them: weight and bias uniform in
        ``[-1/sqrt(fan_in), 1/sqrt(fan_in)]``."""
        layers = tuple(layers)
        net = cls(layers, np.zeros(cls.size(layers), dtype=np.float32))
        for (fan_in, _), w, b in zip(layers, net.weights, net.biases, strict=True):
            bound = 1.0 / math.sqrt(fan_in)
            w[...] = rng.uniform(-bound, bound, size=w.shape)
            b[...] = rng.uniform(-bound, bound, size=b.shape)
        return net

    def copy(self) -> MLP:
        """An independent copy."""
        return MLP(self.layers, self.flat.copy())

    def forward(self, x: np.ndarray) -> np.ndarray:
        """Network output for inputs ``x`` (n, fan_in of the first layer); returns (n, fan_out
        of the last layer) float64."""
        h = np.asarray(x, dtype=np.float32)
        last = len(self.layers) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = h @ w + b
            if i < last:
                h = gelu(h)
        return h.astype(np.float64)

    # ------------------------------------------------------------------ torch format
    def state_dict_arrays(self) -> dict[str, np.ndarray]:
        """``{"net.0.weight": (out, in), "net.0.bias": (out,), "net.2.weight": ...}`` as
        float32 arrays, torch's layout (Linear layers at even indices of ``net``)."""
        out: dict[str, np.ndarray] = {}
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            out[f"net.{2 * i}.weight"] = np.ascontiguousarray(w.T)
            out[f"net.{2 * i}.bias"] = b.copy()
        return out

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any], layers: Sequence[tuple[int, int]], what: str) -> MLP:
        """Rebuild from a torch ``state_dict`` (tensors or arrays).

        Raises:
            ArtifactError: a missing or extra key, or a wrong shape, naming ``what``.
        """
        layers = tuple(layers)
        if not isinstance(state, Mapping):
            raise ArtifactError(f"{what}: expected a state_dict (a dict of tensors), got {type(state).__name__}")
        expected = {f"net.{2 * i}.{kind}" for i in range(len(layers)) for kind in ("weight", "bias")}
        keys = set(state)
        if keys != expected:
            missing = sorted(expected - keys)
            extra = sorted(keys - expected)
            raise ArtifactError(
                f"{what}: state_dict keys differ from the model card's: missing {missing}, unexpected {extra}"
            )
        net = cls(layers, np.zeros(cls.size(layers), dtype=np.float32))
        for i, ((fan_in, fan_out), w, b) in enumerate(zip(layers, net.weights, net.biases, strict=True)):
            weight = _to_numpy(state[f"net.{2 * i}.weight"])
            bias = _to_numpy(state[f"net.{2 * i}.bias"])
            if weight.shape != (fan_out, fan_in) or bias.shape != (fan_out,):
                raise ArtifactError(
                    f"{what}: net.{2 * i} must be Linear({fan_in}, {fan_out}) (weight ({fan_out}, {fan_in}), "
                    f"bias ({fan_out},)), got weight {weight.shape}, bias {bias.shape}"
                )
            if not (np.isfinite(weight).all() and np.isfinite(bias).all()):
                raise ArtifactError(f"{what}: net.{2 * i} holds NaN or Infinity")
            w[...] = weight.T
            b[...] = bias
        return net


def _views(layers: Sequence[tuple[int, int]], flat: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    weights, biases, pos = [], [], 0
    for fan_in, fan_out in layers:
        weights.append(flat[pos : pos + fan_in * fan_out].reshape(fan_in, fan_out))
        pos += fan_in * fan_out
        biases.append(flat[pos : pos + fan_out])
        pos += fan_out
    return weights, biases


def _to_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value, dtype=np.float32)


# ---------------------------------------------------------------------- training
@dataclass(frozen=True)
class TrainSettings:
    """Hyper-parameters of one training run (docs/FACTS.md §5: AdamW lr 1e-3, minibatch 8).

    Attributes:
        loss: ``"mse"``, ``"cql"`` or ``"ce"`` (see the module docstring).
        layers: ``(fan_in, fan_out)`` of each Linear.
        lr: AdamW learning rate.
        batch_size: rows per minibatch (the last minibatch of an epoch may be smaller).
        weight_decay: AdamW decoupled weight decay (torch's default 0.01).
        betas: AdamW moment decay rates.
        eps: AdamW denominator constant.
        alpha: CQL penalty weight (``"cql"`` only), in reward units.
        average_last: fraction of the epochs at the end whose epoch-end parameters are
            averaged into the result (stochastic weight averaging, Izmailov et al. 2018,
            "Averaging Weights Leads to Wider Optima and Better Generalization"); 0 returns
            the last iterate, as the published study did.
    """

    loss: str = "mse"
    layers: tuple[tuple[int, int], ...] = QNETWORK_LAYERS
    lr: float = 1e-3
    batch_size: int = 8
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    alpha: float = 0.0
    average_last: float = 0.25

    def window(self, epochs: int) -> int:
        """Number of final epochs averaged for a run of ``epochs`` epochs (0 = none)."""
        return min(epochs, round(self.average_last * epochs))

    def __post_init__(self) -> None:
        if self.loss not in ("mse", "cql", "ce"):
            raise ConfigError(f"unknown loss {self.loss!r}; expected mse, cql or ce")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"learning rate must be > 0, got {self.lr}")
        if self.batch_size < 1:
            raise ConfigError(f"minibatch size must be >= 1, got {self.batch_size}")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ConfigError(f"weight decay must be >= 0, got {self.weight_decay}")
        if not (math.isfinite(self.alpha) and self.alpha >= 0):
            raise ConfigError(f"CQL alpha must be >= 0, got {self.alpha}")
        if not (math.isfinite(self.average_last) and 0.0 <= self.average_last <= 1.0):
            raise ConfigError(f"average_last must be in [0, 1], got {self.average_last}")


class _Trajectory:
    """One training run that can be continued epoch by epoch (see :func:`train_mlp`)."""

    def __init__(
        self, states: np.ndarray, actions: np.ndarray, rewards: np.ndarray, seed: int, settings: TrainSettings
    ) -> None:
        self.settings = settings
        self.x = np.ascontiguousarray(states, dtype=np.float32)
        self.a = np.asarray(actions, dtype=np.int64)
        self.r = np.asarray(rewards, dtype=np.float32)
        init_rng = np.random.default_rng(np.random.SeedSequence([seed, _STREAM_INIT[settings.loss]]))
        self.order_rng = np.random.default_rng(np.random.SeedSequence([seed, _STREAM_ORDER]))
        self.net = MLP.init(settings.layers, init_rng)
        n = self.net.flat.size
        self.grad = np.zeros(n, dtype=np.float32)
        self.grad_w, self.grad_b = _views(settings.layers, self.grad)
        self.m = np.zeros(n, dtype=np.float32)
        self.v = np.zeros(n, dtype=np.float32)
        self.tmp = np.zeros(n, dtype=np.float32)
        self._rows: dict[int, np.ndarray] = {}
        self.step = 0
        self.epoch = 0
        # epoch -> parameters at the end of that epoch, and the running sum of epoch-end
        # parameters up to it (float64), kept for the epochs asked for
        self.snapshots: dict[int, np.ndarray] = {0: self.net.flat.copy()}
        self.cumsum = np.zeros(n, dtype=np.float64)
        self.cumsums: dict[int, np.ndarray] = {0: self.cumsum.copy()}

    def needed(self, epochs: int) -> set[int]:
        """Epochs whose snapshot and running sum a result after ``epochs`` epochs needs."""
        return {epochs, epochs - self.settings.window(epochs)}

    def has(self, epochs: int) -> bool:
        return all(e in self.snapshots for e in self.needed(epochs))

    def result(self, epochs: int) -> np.ndarray:
        """Parameters after ``epochs`` epochs, averaged over the final window."""
        window = self.settings.window(epochs)
        if window <= 1:
            return self.snapshots[epochs].copy()
        mean = (self.cumsums[epochs] - self.cumsums[epochs - window]) / window
        return mean.astype(np.float32)

    def run(self, epochs: int, keep: set[int]) -> None:
        n = self.x.shape[0]
        bs = self.settings.batch_size
        while self.epoch < epochs:
            order = self.order_rng.permutation(n)
            for start in range(0, n, bs):
                self._step(order[start : start + bs])
            self.epoch += 1
            self.cumsum += self.net.flat
            if self.epoch in keep:
                self.snapshots[self.epoch] = self.net.flat.copy()
                self.cumsums[self.epoch] = self.cumsum.copy()

    def _step(self, idx: np.ndarray) -> None:
        """One AdamW step on the minibatch ``idx`` (hand-written forward and backward)."""
        s = self.settings
        x = self.x[idx]
        batch = idx.shape[0]
        weights, biases = self.net.weights, self.net.biases
        last = len(weights) - 1
        inputs = [x]
        pre: list[np.ndarray] = []
        cdfs: list[np.ndarray] = []
        h = x
        for i in range(last + 1):
            z = h @ weights[i]
            z += biases[i]
            if i < last:
                cdf = _ndtr(z)  # Phi(z) = 0.5 * (1 + erf(z / sqrt 2))
                pre.append(z)
                cdfs.append(cdf)
                h = z * cdf
                inputs.append(h)
            else:
                h = z
        q = h
        n_out = q.shape[1]
        taken = self._taken(idx, n_out)  # flat positions of (row, taken action) in q
        if s.loss == "mse" or (s.loss == "cql" and s.alpha == 0):
            g = np.zeros_like(q)
            g.reshape(-1)[taken] = (q.reshape(-1)[taken] - self.r[idx]) * np.float32(2.0 / batch)
        elif s.loss == "cql":
            # d/dq [alpha * (logsumexp(q) - q[a])] = alpha * (softmax(q) - onehot(a))
            g = _softmax(q)
            g *= np.float32(s.alpha / batch)
            g.reshape(-1)[taken] += (q.reshape(-1)[taken] - self.r[idx]) * np.float32(2.0 / batch) - np.float32(
                s.alpha / batch
            )
        else:  # "ce": d/dlogits of the cross-entropy = softmax - onehot
            g = _softmax(q)
            g.reshape(-1)[taken] -= 1.0
            g *= np.float32(1.0 / batch)
        for i in range(last, -1, -1):
            np.matmul(inputs[i].T, g, out=self.grad_w[i])
            np.add.reduce(g, axis=0, out=self.grad_b[i])
            if i > 0:
                g = g @ weights[i].T
                z = pre[i - 1]
                # GELU'(z) = Phi(z) + z * phi(z), phi(z) = exp(-z^2 / 2) / sqrt(2 pi)
                deriv = z * z
                deriv *= np.float32(-0.5)
                np.exp(deriv, out=deriv)
                deriv *= z
                deriv *= _INV_SQRT_2PI
                deriv += cdfs[i - 1]
                g *= deriv
        self._adamw()

    def _taken(self, idx: np.ndarray, n_out: int) -> np.ndarray:
        rows = self._rows.get(idx.shape[0])
        if rows is None:
            rows = self._rows[idx.shape[0]] = np.arange(idx.shape[0]) * n_out
        return rows + self.a[idx]

    def _adamw(self) -> None:
        """torch.optim.AdamW's update (decoupled weight decay, bias-corrected moments).

        The moments are kept scaled, ``m' = m / (1 - b1)`` and ``v' = v / (1 - b2)``, which
        saves two passes over the parameters; the update is the same up to rounding.
        """
        s = self.settings
        b1, b2 = s.betas
        self.step += 1
        p, g, m, v, tmp = self.net.flat, self.grad, self.m, self.v, self.tmp
        p *= np.float32(1.0 - s.lr * s.weight_decay)
        m *= np.float32(b1)
        m += g
        v *= np.float32(b2)
        np.multiply(g, g, out=tmp)
        v += tmp
        bc1 = 1.0 - b1**self.step
        bc2 = 1.0 - b2**self.step
        # denom = sqrt(v / bc2) + eps = sqrt(v') * sqrt((1 - b2) / bc2) + eps
        np.sqrt(v, out=tmp)
        tmp *= np.float32(math.sqrt((1.0 - b2) / bc2))
        tmp += np.float32(s.eps)
        np.divide(m, tmp, out=tmp)
        # step = lr / bc1 * m / denom = lr * (1 - b1) / bc1 * m' / denom
        tmp *= np.float32(s.lr * (1.0 - b1) / bc1)
        p -= tmp


def _softmax(z: np.ndarray) -> np.ndarray:
    e = z - np.maximum.reduce(z, axis=1, keepdims=True)
    np.exp(e, out=e)
    e /= np.add.reduce(e, axis=1, keepdims=True)
    return e


#: Epoch counts whose parameters a trajectory keeps while it runs: the default epochs of the
#: three network policies (docs/FACTS.md §5), so any of them can be served from a longer run.
_MILESTONES = frozenset({200, 300, 600})
_CACHE: OrderedDict[tuple[Any, ...], _Trajectory] = OrderedDict()
_CACHE_SIZE = 6


def clear_training_cache() -> None:
    """Forget every cached training trajectory (see :func:`train_mlp`)."""
    _CACHE.clear()


def _fingerprint(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for arr in arrays:
        arr = np.ascontiguousarray(arr)
        h.update(str((arr.dtype.str, arr.shape)).encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def train_mlp(
    states: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray | None,
    *,
    seed: int,
    epochs: int,
    settings: TrainSettings,
) -> MLP:
    """Train a network on logged rows and return its parameters after ``epochs`` epochs.

    Args:
        states: (n, fan_in) contexts.
        actions: (n,) int action indices (the taken action / the class for ``"ce"``).
        rewards: (n,) rewards in reward units (ignored for ``"ce"``).
        seed: seeds the initialisation and the minibatch order (independent streams).
        epochs: passes over the data (>= 1).
        settings: loss and optimiser settings.

    Returns:
        an independent :class:`MLP`: the epoch-end parameters averaged over the last
        ``settings.window(epochs)`` epochs (the last iterate when that is 0 or 1). Same
        inputs give bit-identical parameters, whether the result comes from a fresh run or
        from a cached longer run with the same settings.

    Raises:
        ConfigError: ``epochs < 1`` or no rows.
    """
    if not is_int(epochs) or epochs < 1:
        raise ConfigError(f"epochs must be an integer >= 1, got {epochs!r}")
    n = int(np.asarray(actions).shape[0])
    if n == 0:
        raise ConfigError("no rows to train on")
    r = (
        np.zeros(n, dtype=np.float32)
        if rewards is None or settings.loss == "ce"
        else np.asarray(rewards, dtype=np.float32)
    )
    key = (
        _fingerprint(np.asarray(states, dtype=np.float32), np.asarray(actions, dtype=np.int64), r),
        int(seed),
        settings,
    )
    traj = _CACHE.get(key)
    if traj is not None and not traj.has(epochs) and traj.epoch > min(traj.needed(epochs)):
        traj = None  # went past what it needs without keeping it: start again
    if traj is None:
        traj = _Trajectory(states, actions, r, int(seed), settings)
        _CACHE[key] = traj
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    _CACHE.move_to_end(key)
    if not traj.has(epochs):
        keep = set(traj.needed(epochs))
        for milestone in _MILESTONES:
            keep |= traj.needed(milestone)
        traj.run(epochs, keep)
    return MLP(settings.layers, traj.result(epochs))


# ---------------------------------------------------------------------- torch files
def torch_available() -> bool:
    """Whether torch can be imported (the ``specband[torch]`` extra), without importing it."""
    import importlib.util

    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def require_torch(needed_for: str) -> Any:
    """The ``torch`` module, imported on first use.

    Raises:
        MissingExtraError: torch is not installed; one line naming ``needed_for`` and
            ``pip install 'specband[torch]'``.
    """
    try:
        import torch
    except ImportError:
        raise MissingExtraError("torch", "torch", needed_for) from None
    return torch


def save_torch(obj: Any, path: Any) -> None:
    """``torch.save`` of plain tensors, lists and dicts (loadable with ``weights_only=True``)
    to a path or a binary file object.

    Raises:
        MissingExtraError: torch is not installed.
    """
    torch = require_torch(f"writing {path if isinstance(path, (str, Path)) else 'a .pth file'}")

    torch.save(obj, path if hasattr(path, "write") else str(path))


def state_dict_tensors(net: MLP) -> dict[str, Any]:
    """The network as a torch ``state_dict`` (an ordered dict of float32 CPU tensors).

    Raises:
        MissingExtraError: torch is not installed.
    """
    torch = require_torch("a torch state_dict (.pth file)")

    return OrderedDict((k, torch.from_numpy(v)) for k, v in net.state_dict_arrays().items())


#: Suffix of the pickle-free copy written beside each ``.pth`` file.
SAFETENSORS_SUFFIX = ".safetensors"
_LISTS_KEY = "specband_lists"  # safetensors metadata: keys that were lists of ints


def _flatten(obj: Any, prefix: str, out: dict[str, Any], lists: list[str]) -> None:
    torch = require_torch("a safetensors copy of a .pth file")

    if isinstance(obj, dict):
        for key, value in obj.items():
            _flatten(value, f"{prefix}{key}/", out, lists)
    elif isinstance(obj, list):
        out[prefix[:-1]] = torch.tensor(obj, dtype=torch.int64)
        lists.append(prefix[:-1])
    else:
        out[prefix[:-1]] = obj.contiguous()


def safetensors_bytes(obj: Any) -> bytes:
    """``obj`` (a state_dict, or a dict of state_dicts and int lists, as the ``.pth`` files
    hold) in the safetensors format: nested keys joined with ``/``, lists as int64 tensors
    named in the metadata."""
    from safetensors.torch import save

    tensors: dict[str, Any] = {}
    lists: list[str] = []
    _flatten(obj, "", tensors, lists)
    return save(tensors, metadata={_LISTS_KEY: ",".join(lists)})


def _load_safetensors(path: Path) -> Any:
    """The object :func:`safetensors_bytes` wrote (nested dicts rebuilt, lists restored),
    its tensors as NumPy arrays (so that reading needs no torch)."""
    from safetensors import safe_open

    check_safetensors_header(path)  # sizes and keys checked before a tensor is allocated
    try:
        with safe_open(str(path), framework="np") as fh:
            lists = set(filter(None, (fh.metadata() or {}).get(_LISTS_KEY, "").split(",")))
            flat = {key: fh.get_tensor(key) for key in fh.keys()}  # noqa: SIM118 - safe_open has no __iter__
    except Exception as exc:
        raise ArtifactError(f"{path}: not a readable safetensors file ({exc})") from None
    out: dict[str, Any] = OrderedDict()
    for key, tensor in flat.items():
        *parents, leaf = key.split("/")
        node = out
        for parent in parents:
            node = node.setdefault(parent, OrderedDict())
        node[leaf] = tensor.tolist() if key in lists else tensor
    return out


def load_state_dict(path: str | Path) -> Any:
    """The tensors of a ``.pth`` file: from the safetensors copy beside it when there is
    one (no pickle at all, no torch; NumPy arrays), else ``torch.load(path,
    map_location="cpu", weights_only=True)`` (torch's restricted unpickler: tensors and
    plain containers only).

    Raises:
        ArtifactError: missing file or a file torch cannot read with ``weights_only=True``.
        MissingExtraError: a bare ``.pth`` file (no safetensors copy) and no torch installed.
    """
    p = Path(path)
    if p.with_suffix(SAFETENSORS_SUFFIX).is_file():
        return _load_safetensors(p.with_suffix(SAFETENSORS_SUFFIX))
    if not p.is_file():
        raise ArtifactError(f"{p}: no such file")
    torch = require_torch(f"{p} (a .pth file without a {SAFETENSORS_SUFFIX} copy)")
    import zipfile

    check_file_size(p)
    if zipfile.is_zipfile(p):
        check_zip_members(p)  # a torch file is a zip: its members are bounded before loading
    try:
        return torch.load(str(p), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types (pickle, zip, RuntimeError)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ArtifactError(f"{p}: not a torch file loadable with weights_only=True ({first})") from None


# ---------------------------------------------------------------------- policies
@dataclass(frozen=True)
class NetConfig(PolicyConfig):
    """Training settings shared by the network policies (docs/FACTS.md §5: AdamW lr 1e-3,
    minibatch 8, MSE on the taken action's Q).

    Attributes:
        epochs: passes over the logged rows; >= 1.
        lr: AdamW learning rate; > 0.
        batch_size: rows per minibatch; >= 1.
        weight_decay: AdamW decoupled weight decay (torch's default 0.01); >= 0.
        average_last: fraction of final epochs whose parameters are averaged (see the
            module docstring); in [0, 1], 0 = the last iterate (published).
    """

    epochs: int = 200
    lr: float = 1e-3
    batch_size: int = 8
    weight_decay: float = 0.01
    average_last: float = 0.25

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("network", "epochs", self.epochs)
        check_number("network", "lr", self.lr, low=0.0, low_open=True)
        check_int("network", "batch_size", self.batch_size)
        check_number("network", "weight_decay", self.weight_decay, low=0.0)
        check_number("network", "average_last", self.average_last, low=0.0, high=1.0)

    def train_settings(self, loss: str = "mse", **extra: Any) -> TrainSettings:
        """The :class:`TrainSettings` of these settings for a loss."""
        return TrainSettings(
            loss=loss,
            lr=self.lr,
            batch_size=self.batch_size,
            weight_decay=self.weight_decay,
            average_last=self.average_last,
            **extra,
        )


class QNetworkPolicy(Policy):
    """A policy whose scores are the outputs of one ``QNetwork(4, 19)`` saved as a torch
    ``state_dict`` (``mlp_bandit``, ``cql``). Subclasses choose the loss.

    Attributes:
        net: the fitted :class:`MLP` (``None`` before fitting).
    """

    config_class = NetConfig

    def __init__(self, config: NetConfig | None = None) -> None:
        super().__init__(config)
        self.net: MLP | None = None

    def _settings(self, data: TrainingData) -> TrainSettings:
        return self.config.train_settings("mse")

    def fit(self, data: TrainingData) -> QNetworkPolicy:
        """Train the network on the logged rows (see :func:`train_mlp`).

        Raises:
            DataError: no rows.
        """
        self._check_data(data)
        settings = self._settings(data)
        self.net = train_mlp(
            data.states, data.actions, data.rewards, seed=self.config.seed, epochs=self.config.epochs, settings=settings
        )
        self.fit_info = {"rows": len(data), **self._fit_extras(settings)}
        self._fitted = True
        return self

    def _fit_extras(self, settings: TrainSettings) -> dict[str, Any]:
        return {}

    def scores(self, states: np.ndarray) -> np.ndarray:
        """The network's Q-values, shape (n, 19) (or (19,))."""
        self._require_fitted()
        x, single = as_states(states)
        assert self.net is not None
        out = self.net.forward(x)
        return out[0] if single else out

    def save(self, directory: str | Path) -> Path:
        """Write ``<name>/policy.pth`` (the QNetwork ``state_dict``) and the sidecar.

        Raises:
            ArtifactError: not fitted, or the file cannot be written.
            MissingExtraError: torch is not installed (the ``.pth`` file needs it).
        """
        self._require_fitted()
        assert self.net is not None
        path = self.artifact_path(directory)
        require_torch(f"writing {path}")
        save_torch_atomic(state_dict_tensors(self.net), path)
        self._write_sidecar(directory)
        return path

    @classmethod
    def load(cls, directory: str | Path) -> QNetworkPolicy:
        """Read ``<name>/policy.pth`` with ``weights_only=True``.

        Raises:
            ArtifactError: missing file, not a torch file, or keys/shapes other than
                QNetwork(4, 19)'s.
        """
        path = Path(directory) / cls.name / cls.artifact_file
        state = load_state_dict(path)
        policy, _ = cls._from_sidecar(directory)
        policy.net = MLP.from_state_dict(state, QNETWORK_LAYERS, str(path))
        policy._fitted = True
        return policy


def save_torch_atomic(obj: Any, path: str | Path) -> Path:
    """``torch.save`` to a temporary file in the same folder, then a rename; the
    safetensors copy (:func:`safetensors_bytes`, preferred when loading) beside it.

    Raises:
        ArtifactError: the file cannot be written.
    """
    import io

    require_torch(f"writing {path}")
    buf = io.BytesIO()
    save_torch(obj, buf)
    write_bytes_atomic(Path(path).with_suffix(SAFETENSORS_SUFFIX), safetensors_bytes(obj))
    return write_bytes_atomic(path, buf.getvalue())
