"""Float64 NumPy references of the metric losses, with plain loops over anchors and pairs.

Written from the papers' formulas (as 0.17 states them for distances), not
from the implementation: every anchor's positives and negatives are listed
explicitly, then mined or summed one by one.
"""

from __future__ import annotations

import math

import numpy as np


def cosine(a, b):
    return max(1.0 - a @ b / (np.linalg.norm(a) * np.linalg.norm(b)), 0.0)


DISTANCES = {
    "cosine": cosine,
    "l2": lambda a, b: math.sqrt(np.sum((a - b) ** 2)),
    "sql2": lambda a, b: float(np.sum((a - b) ** 2)),
    "l1": lambda a, b: float(np.sum(np.abs(a - b))),
    "snr": lambda a, b: float(np.var(b - a) / np.var(a)),
}


def _pairs(labels, a):
    positives = [j for j in range(len(labels)) if j != a and labels[j] == labels[a]]
    negatives = [j for j in range(len(labels)) if labels[j] != labels[a]]
    return positives, negatives


def _log1p_sum_exp(values):
    return math.log(1.0 + sum(math.exp(v) for v in values))


def _logsumexp(values):
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def _anchors(labels, anchors):
    """The anchors' rows: all of them, or the first `anchors` (the keys follow)."""
    return range(len(labels) if anchors is None else anchors)


def triplet_terms(labels, x, distance, positive, negative, margin, pn=False, anchors=None):
    dist = DISTANCES[distance]
    x = np.float64(x)
    terms = []
    for a in _anchors(labels, anchors):
        positives, negatives = _pairs(labels, a)
        if not positives or not negatives:
            terms.append(0.0)
            continue
        d = {j: dist(x[a], x[j]) for j in positives + negatives}
        pick = max if positive == "hard" else min
        p = pick(positives, key=lambda j: d[j])
        if negative == "hard":
            n = min(negatives, key=lambda j: d[j])
        elif negative == "easy":
            n = max(negatives, key=lambda j: d[j])
        else:
            hardest = max(d[j] for j in positives)
            farther = [j for j in negatives if d[j] > hardest]
            if farther:
                n = min(farther, key=lambda j: d[j])
            else:
                n = max(negatives, key=lambda j: d[j])
        d_an = d[n]
        if pn:
            d_an = min(d_an, dist(x[p], x[n]))
        gap = d[p] - d_an
        terms.append(math.log1p(math.exp(gap)) if margin is None else max(gap + margin, 0.0))
    return np.array(terms)


def circle_terms(labels, x, distance, gamma, margin, paper=True, weights_at=None):
    """`weights_at`: embeddings the weights w_p, w_n are computed from (default `x`)."""
    dist = DISTANCES[distance]
    x = np.float64(x)
    w = x if weights_at is None else np.float64(weights_at)
    terms = []
    for a in range(len(labels)):
        positives, negatives = _pairs(labels, a)
        if not positives or not negatives:
            terms.append(0.0)
            continue
        z_p = []
        for j in positives:
            d = dist(x[a], x[j])
            z_p.append(-gamma * max(dist(w[a], w[j]) + margin, 0.0) * (margin - d))
        z_n = []
        for j in negatives:
            d = dist(x[a], x[j])
            z_n.append(gamma * max(1.0 + margin - dist(w[a], w[j]), 0.0) * (1.0 - margin - d))
        if paper:
            s = _logsumexp(z_p) + _logsumexp(z_n)
            terms.append(max(s, 0.0) + math.log1p(math.exp(-abs(s))))
        else:
            terms.append(_log1p_sum_exp(z_p) + _log1p_sum_exp(z_n))
    return np.array(terms)


def multisim_terms(labels, x, distance, alpha, beta, epsilon, lmda, center, anchors=None):
    dist = DISTANCES[distance]
    x = np.float64(x)
    terms = []
    for a in _anchors(labels, anchors):
        positives, negatives = _pairs(labels, a)
        if not positives or not negatives:
            terms.append(0.0)
            continue
        d = {j: dist(x[a], x[j]) for j in positives + negatives}
        closest_negative = min(d[j] for j in negatives)
        farthest_positive = max(d[j] for j in positives)
        kept_p = [j for j in positives if d[j] > closest_negative - epsilon]
        kept_n = [j for j in negatives if d[j] < farthest_positive + epsilon]
        if not kept_p or not kept_n:
            terms.append(0.0)
            continue
        p = _log1p_sum_exp([alpha * (d[j] + lmda - center) for j in kept_p]) / alpha
        n = _log1p_sum_exp([-beta * (d[j] + lmda - center) for j in kept_n]) / beta
        terms.append(p + n)
    return np.array(terms)


def softnn_terms(labels, x, distance, temperature):
    dist = DISTANCES[distance]
    x = np.float64(x)
    terms = []
    for a in range(len(labels)):
        positives, negatives = _pairs(labels, a)
        if not positives:
            terms.append(0.0)
            continue
        same = sum(math.exp(-dist(x[a], x[j]) / temperature) for j in positives)
        every = same + sum(math.exp(-dist(x[a], x[j]) / temperature) for j in negatives)
        terms.append(-math.log(same / every))
    return np.array(terms)


def supcon_terms(labels, x, temperature):
    x = np.float64(x)
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    terms = []
    for a in range(len(labels)):
        positives, negatives = _pairs(labels, a)
        if not positives:
            terms.append(0.0)
            continue
        others = positives + negatives
        log_norm = _logsumexp([u[a] @ u[j] / temperature for j in others])
        total = 0.0
        for p in positives:
            total += -(u[a] @ u[p] / temperature - log_norm)
        terms.append(total / len(positives))
    return np.array(terms)


def multineg_rank(queries, keys, scale):
    q, k = np.float64(queries), np.float64(keys)
    total = 0.0
    for i in range(len(q)):
        logits = [scale * (q[i] @ k[j]) for j in range(len(k))]
        total += -logits[i] + _logsumexp(logits)
    return total / len(q)


def arcface_terms(labels, cosines, margin, scale):
    cosines = np.float64(cosines)
    terms = []
    for i, y in enumerate(labels):
        logits = []
        for c in range(cosines.shape[1]):
            cos = min(max(cosines[i, c], -1.0), 1.0)
            if c == y:
                theta = math.acos(cos)
                if theta + margin <= math.pi:
                    value = math.cos(theta + margin)
                else:
                    value = cos - margin * math.sin(margin)
                logits.append(scale * value)
            else:
                logits.append(scale * cos)
        terms.append(-logits[y] + _logsumexp(logits))
    return np.array(terms)


def xbm_steps(batches, memory_size, warmup_steps, terms):
    """Cross-batch memory over a sequence of `(labels, x)` batches, with plain lists.

    `terms(labels, x, anchors)` gives the wrapped loss's terms of the first
    `anchors` rows against all rows. The memory is a list of (label,
    embedding) pairs, newest first.

    Returns:
        A list with, per step, the batch's terms and the memory after the step
        (labels and embeddings, newest first).
    """
    memory = []
    steps = []
    for step, (labels, x) in enumerate(batches):
        batch = [(int(label), np.float64(row)) for label, row in zip(labels, x, strict=True)]
        if step < warmup_steps:
            keys = batch
        else:
            keys = batch + memory[: max(memory_size - len(batch), 0)]
            memory = (batch + memory)[:memory_size]
        key_labels = np.array([label for label, _ in keys])
        key_x = np.array([row for _, row in keys])
        steps.append(
            (
                terms(key_labels, key_x, len(batch)),
                np.array([label for label, _ in memory], dtype="int64"),
                np.array([row for _, row in memory]).reshape(len(memory), x.shape[1]),
            )
        )
    return steps


def _unit(v):
    norm = math.sqrt(float(np.sum(v**2)))
    return v / norm if norm > 0 else v


def proxy_anchor_loss(labels, x, proxies, margin, alpha):
    """Kim et al. 2020, eq. 4: per-proxy sums over the batch's positives and negatives."""
    x, proxies = np.float64(x), np.float64(proxies)
    pulled, with_positives, pushed = 0.0, 0, 0.0
    for p in range(len(proxies)):
        s = {i: float(_unit(x[i]) @ _unit(proxies[p])) for i in range(len(x))}
        positives = [i for i in range(len(x)) if labels[i] == p]
        negatives = [i for i in range(len(x)) if labels[i] != p]
        if positives:
            with_positives += 1
            # log(1 + sum e^v) as a log-sum-exp with e^0: no overflow at any alpha.
            pulled += _logsumexp([0.0, *(-alpha * (s[i] - margin) for i in positives)])
        pushed += _logsumexp([0.0, *(alpha * (s[i] + margin) for i in negatives)])
    return (pulled / with_positives if with_positives else 0.0) + pushed / len(proxies)


def proxy_nca_terms(labels, x, proxies, temperature):
    """Teh et al. 2020: -log softmax over all proxies of -||x^ - p^||^2 / T, at the label."""
    x, proxies = np.float64(x), np.float64(proxies)
    terms = []
    for i in range(len(x)):
        logits = [
            -float(np.sum((_unit(x[i]) - _unit(proxies[c])) ** 2)) / temperature
            for c in range(len(proxies))
        ]
        terms.append(_logsumexp(logits) - logits[labels[i]])
    return np.array(terms)
