"""A synthetic logged bandit whose true policy values are known exactly (test helper)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


@dataclass(frozen=True)
class SyntheticBandit:
    """Discrete contexts with known probabilities, a known mean reward table ``q`` (K, A),
    a logging policy ``pi_b`` (K, A) with full support and two evaluation policies:
    a deterministic one (``pi_det``) and a stochastic one (``pi_sto``)."""

    context_probs: np.ndarray
    q: np.ndarray
    pi_b: np.ndarray
    pi_det: np.ndarray
    pi_sto: np.ndarray

    @classmethod
    def make(cls, n_contexts: int = 8, n_actions: int = 6, seed: int = 0) -> SyntheticBandit:
        rng = np.random.default_rng(seed)
        context_probs = rng.dirichlet(np.ones(n_contexts) * 2.0)
        q = rng.uniform(0.1, 0.9, size=(n_contexts, n_actions))
        pi_b = softmax(rng.normal(0.0, 1.0, size=(n_contexts, n_actions)))
        # Near-greedy deterministic policy: argmax of a noisy copy of q.
        det = np.argmax(q + rng.normal(0.0, 0.1, size=q.shape), axis=1)
        pi_det = np.eye(n_actions)[det]
        pi_sto = softmax(3.0 * rng.normal(0.0, 1.0, size=(n_contexts, n_actions)))
        return cls(context_probs, q, pi_b, pi_det, pi_sto)

    def true_value(self, pi: np.ndarray) -> float:
        """Exact expected reward of policy ``pi`` (K, A): sum_x P(x) sum_a pi(a|x) q(x, a)."""
        return float(self.context_probs @ (pi * self.q).sum(axis=1))

    def log(self, n: int, seed: int) -> dict[str, np.ndarray]:
        """n logged rounds: contexts, actions drawn from pi_b, Bernoulli(q) rewards."""
        rng = np.random.default_rng(seed)
        x = rng.choice(self.context_probs.size, size=n, p=self.context_probs)
        u = rng.random(n)[:, None]
        a = (u > np.cumsum(self.pi_b[x], axis=1)).sum(axis=1)
        a = np.minimum(a, self.q.shape[1] - 1)
        r = (rng.random(n) < self.q[x, a]).astype(np.float64)
        return {"context": x, "action": a.astype(np.int64), "reward": r, "pscore": self.pi_b[x, a]}
