"""Independent float64 NumPy implementations of the self-supervised losses' formulas."""

from __future__ import annotations

import numpy as np


def _normalise_rows(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def simsiam(p: np.ndarray, z: np.ndarray) -> float:
    p, z = _normalise_rows(np.float64(p)), _normalise_rows(np.float64(z))
    return -float(np.mean([p[i] @ z[i] for i in range(len(p))]))


def simclr(z1: np.ndarray, z2: np.ndarray, temperature: float) -> float:
    n = len(z1)
    u = _normalise_rows(np.concatenate([z1, z2]).astype(np.float64))
    total = 0.0
    for k in range(2 * n):
        positive = (k + n) % (2 * n)
        sims = {j: u[k] @ u[j] / temperature for j in range(2 * n) if j != k}
        total += -sims[positive] + np.log(sum(np.exp(s) for s in sims.values()))
    return total / (2 * n)


def barlow(za: np.ndarray, zb: np.ndarray, lambda_: float, epsilon: float) -> float:
    def standardise(z):
        z = np.float64(z)
        return (z - z.mean(axis=0)) / np.sqrt(z.var(axis=0) + epsilon)

    a, b = standardise(za), standardise(zb)
    n, d = a.shape
    c = np.array([[np.sum(a[:, i] * b[:, j]) / n for j in range(d)] for i in range(d)])
    on = sum((1.0 - c[i, i]) ** 2 for i in range(d))
    off = sum(c[i, j] ** 2 for i in range(d) for j in range(d) if i != j)
    return on + lambda_ * off


def vicreg(
    za: np.ndarray,
    zb: np.ndarray,
    lambda_: float,
    mu: float,
    nu: float,
    gamma: float,
    epsilon: float,
) -> float:
    za, zb = np.float64(za), np.float64(zb)
    n, d = za.shape
    invariance = np.sum((za - zb) ** 2) / (n * d)

    def variance(z):
        std = np.sqrt(np.var(z, axis=0, ddof=1) + epsilon)
        return np.mean(np.maximum(0.0, gamma - std))

    def covariance(z):
        cov = np.cov(z, rowvar=False)
        return sum(cov[i, j] ** 2 for i in range(d) for j in range(d) if i != j) / d

    return (
        lambda_ * invariance
        + mu * (variance(za) + variance(zb)) / 2
        + nu * (covariance(za) + covariance(zb))
    )
