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


def byol_terms(target: np.ndarray, prediction: np.ndarray) -> np.ndarray:
    terms = []
    for z, q in zip(np.float64(target), np.float64(prediction), strict=True):
        cosine = sum(a * b for a, b in zip(q, z, strict=True)) / (
            np.sqrt(sum(a * a for a in q)) * np.sqrt(sum(b * b for b in z))
        )
        terms.append(2.0 - 2.0 * cosine)
    return np.array(terms)


def mocov3_terms(keys: np.ndarray, queries: np.ndarray, temperature: float) -> np.ndarray:
    k, q = _normalise_rows(np.float64(keys)), _normalise_rows(np.float64(queries))
    terms = []
    for i in range(len(q)):
        logits = [q[i] @ k[j] / temperature for j in range(len(k))]
        terms.append(2 * temperature * (-logits[i] + np.log(sum(np.exp(s) for s in logits))))
    return np.array(terms)


def _log_softmax(logits: np.ndarray) -> list[float]:
    total = sum(np.exp(x) for x in logits)
    return [x - np.log(total) for x in logits]


def dino_terms(
    teacher_probabilities: np.ndarray, student_logits: np.ndarray, student_temperature: float
) -> np.ndarray:
    p, s = np.float64(teacher_probabilities), np.float64(student_logits)
    n, teacher_views, k = p.shape
    student_views = s.shape[1]
    terms = []
    for i in range(n):
        cross_entropies = []
        for t in range(teacher_views):
            for v in range(student_views):
                if v == t:
                    continue
                log_q = _log_softmax(s[i, v] / student_temperature)
                cross_entropies.append(-sum(p[i, t, c] * log_q[c] for c in range(k)))
        terms.append(sum(cross_entropies) / len(cross_entropies))
    return np.array(terms)


def dino_teacher_probabilities(
    teacher_logits: np.ndarray, center: np.ndarray, temperature: float
) -> np.ndarray:
    logits = np.float64(teacher_logits)
    out = np.empty_like(logits)
    for index in np.ndindex(logits.shape[:-1]):
        shifted = [(x - c) / temperature for x, c in zip(logits[index], center, strict=True)]
        total = sum(np.exp(x) for x in shifted)
        out[index] = [np.exp(x) / total for x in shifted]
    return out
