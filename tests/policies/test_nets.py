"""The hand-written NumPy training of the network policies against torch autograd and
torch.optim.AdamW, and the shared-trajectory cache."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specband.policies import create_policy, nets
from specband.policies.nets import BEHAVIOR_LAYERS, MLP, QNETWORK_LAYERS, TrainSettings, clear_training_cache, train_mlp


def _torch_net(layers: tuple[tuple[int, int], ...]) -> torch.nn.Module:
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            mods: list[torch.nn.Module] = []
            for i, (fan_in, fan_out) in enumerate(layers):
                if i:
                    mods.append(torch.nn.GELU())
                mods.append(torch.nn.Linear(fan_in, fan_out))
            self.net = torch.nn.Sequential(*mods)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

    return Net()


@pytest.fixture
def log() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.random((37, 4)).astype(np.float32)  # 37 rows: the last minibatch has 5
    a = rng.integers(0, 19, 37)
    r = rng.random(37).astype(np.float32)
    return x, a, r


@pytest.mark.parametrize("loss, layers", [("mse", QNETWORK_LAYERS), ("cql", QNETWORK_LAYERS), ("ce", BEHAVIOR_LAYERS)])
def test_two_epochs_match_torch_autograd_and_adamw(loss: str, layers, log) -> None:
    x, a, r = log
    settings = TrainSettings(loss=loss, layers=layers, alpha=0.3, average_last=0.0)
    traj = nets._Trajectory(x, a, r, 11, settings)
    tnet = _torch_net(layers)
    tnet.load_state_dict(nets.state_dict_tensors(MLP(layers, traj.snapshots[0].copy())))
    opt = torch.optim.AdamW(tnet.parameters(), lr=1e-3)
    order = np.random.default_rng(np.random.SeedSequence([11, 3]))
    xt, at, rt = torch.from_numpy(x), torch.from_numpy(a), torch.from_numpy(r)
    for _ in range(2):
        perm = order.permutation(len(a))
        for start in range(0, len(a), 8):
            idx = torch.from_numpy(perm[start : start + 8])
            out = tnet(xt[idx])
            if loss == "ce":
                value = torch.nn.functional.cross_entropy(out, at[idx])
            else:
                qa = out.gather(1, at[idx, None]).squeeze(1)
                value = torch.nn.functional.mse_loss(qa, rt[idx])
                if loss == "cql":
                    value = value + 0.3 * (torch.logsumexp(out, 1) - qa).mean()
            opt.zero_grad()
            value.backward()
            opt.step()
    traj.run(2, {2})
    ours = traj.snapshots[2]
    theirs = MLP.from_state_dict(tnet.state_dict(), layers, "torch").flat
    assert np.abs(ours - traj.snapshots[0]).max() > 1e-3  # it did move
    # float32 sums differ with the CPU's kernels (OpenBLAS, NumPy and ATen pick theirs per CPU), and
    # AdamW's m / sqrt(v) magnifies them where a gradient is near zero: on an AMD EPYC the largest
    # difference is 2.2e-6, 3.0e-6 with OPENBLAS_CORETYPE=Nehalem (it failed the old 2e-6). The
    # parameters move by 4e-3 (median) to 1e-2 in these 10 steps, so a wrong gradient or update
    # differs by about that much: 2e-5 is 7x the kernels' difference and 200x below a step's size.
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=2e-5)


def test_forward_matches_torch_gelu_network(log) -> None:
    x, _, _ = log
    net = MLP.init(QNETWORK_LAYERS, np.random.default_rng(3))
    tnet = _torch_net(QNETWORK_LAYERS)
    tnet.load_state_dict(nets.state_dict_tensors(net))
    with torch.no_grad():
        expected = tnet(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(net.forward(x), expected, atol=1e-6)
    state = tnet.state_dict()
    assert list(state) == ["net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias", "net.4.weight", "net.4.bias"]
    assert tuple(state["net.2.weight"].shape) == (128, 128) and state["net.4.weight"].dtype == torch.float32


def test_init_is_torch_linear_style() -> None:
    net = MLP.init(QNETWORK_LAYERS, np.random.default_rng(0))
    for (fan_in, _), w, b in zip(QNETWORK_LAYERS, net.weights, net.biases, strict=True):
        bound = 1 / np.sqrt(fan_in)
        assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
        assert np.abs(w).max() > 0.9 * bound


def test_cached_and_fresh_results_are_bit_identical(log) -> None:
    x, a, r = log
    settings = TrainSettings()
    clear_training_cache()
    long = train_mlp(x, a, r, seed=4, epochs=300, settings=settings)  # keeps the 200-epoch milestone
    from_cache = train_mlp(x, a, r, seed=4, epochs=200, settings=settings)
    clear_training_cache()
    fresh = train_mlp(x, a, r, seed=4, epochs=200, settings=settings)
    np.testing.assert_array_equal(from_cache.flat, fresh.flat)
    assert not np.array_equal(long.flat, fresh.flat)
    # an epoch count no milestone kept: trained again from scratch, same result as fresh
    clear_training_cache()
    a7 = train_mlp(x, a, r, seed=4, epochs=7, settings=settings)
    train_mlp(x, a, r, seed=4, epochs=9, settings=settings)
    np.testing.assert_array_equal(train_mlp(x, a, r, seed=4, epochs=7, settings=settings).flat, a7.flat)
    # results are copies: changing one does not change the cache
    a7.flat[:] = 0
    assert np.abs(train_mlp(x, a, r, seed=4, epochs=7, settings=settings).flat).max() > 0


def test_mlp_bandit_is_the_first_200_epochs_of_bcqs_q_network(bundled_data) -> None:
    clear_training_cache()
    bcq = create_policy("bcq", seed=3).fit(bundled_data)
    mlp = create_policy("mlp_bandit", seed=3).fit(bundled_data)
    clear_training_cache()
    alone = create_policy("mlp_bandit", seed=3).fit(bundled_data)
    np.testing.assert_array_equal(mlp.net.flat, alone.net.flat)
    assert not np.array_equal(mlp.net.flat, bcq.net.flat)


def test_weight_averaging_window() -> None:
    assert TrainSettings().window(200) == 50
    assert TrainSettings(average_last=0.0).window(600) == 0
    with pytest.raises(Exception, match="average_last"):
        TrainSettings(average_last=2.0)


def test_state_dict_shape_errors() -> None:
    from specband.core.errors import ArtifactError

    net = MLP.init(QNETWORK_LAYERS, np.random.default_rng(0))
    state = net.state_dict_arrays()
    state.pop("net.4.bias")
    with pytest.raises(ArtifactError, match=r"missing \['net.4.bias'\]"):
        MLP.from_state_dict(state, QNETWORK_LAYERS, "q")
    state = net.state_dict_arrays()
    state["net.0.weight"] = np.zeros((128, 5), np.float32)
    with pytest.raises(ArtifactError, match=r"net.0 must be Linear\(4, 128\)"):
        MLP.from_state_dict(state, QNETWORK_LAYERS, "q")
    state = net.state_dict_arrays()
    state["net.2.bias"] = np.full(128, np.nan, np.float32)
    with pytest.raises(ArtifactError, match="NaN"):
        MLP.from_state_dict(state, QNETWORK_LAYERS, "q")
