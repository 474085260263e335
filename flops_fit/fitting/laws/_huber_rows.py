"""Chinchilla's Huber objective for L-BFGS rows of many problems in one evaluation.

``estimators.huber_objective`` evaluates one problem (one set of runs) per call; a forward
chain's refits and their bootstrap resamples are dozens of problems, and evaluating each in
its own call made Approach 3's batched L-BFGS mostly call overhead. Here every row carries its
problem (runs, Huber delta, floor) and its run weights, and one call evaluates them all: the
runs are padded to the longest problem's (the padding weighs nothing and repeats a run, so no
maximum moves), each element is computed as ``huber_objective`` computes it, and each row's sums
stop at its own runs. A matrix-vector product's rounding depends on the rows it is given
(BLAS blocks them), so the products are taken over the same blocks of a problem's rows as
``huber_objective`` takes them (``CHUNK``): every row's value and gradient are those of
``huber_objective`` for its problem, to the bit (tests/test_fit_speed.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flops_fit.fitting.laws.estimators import CHUNK

OVERFLOW = 600.0  # as forms.Chinchilla.log_predict: shift a row's exponents only past this
BLOCK = 16 * CHUNK  # rows evaluated together: a whole grid of starts at once would not stay in cache


class HuberRows:
    """Problems ``(log_n, log_d, log_l, delta, floor)`` and L-BFGS rows over them: problem i has
    ``len(weights[i])`` rows, together and in turn, each weighing the problem's runs by its row
    of ``weights[i]`` (rows, runs)."""

    def __init__(self, problems: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray, float, float]],
                 weights: Sequence[np.ndarray]) -> None:
        self.sizes = np.array([len(p[0]) for p in problems])
        width = int(self.sizes.max())
        self.log_n, self.log_d, self.log_l = (np.stack([_pad(p[i], width) for p in problems]) for i in range(3))
        self.delta = np.array([float(p[3]) for p in problems])
        self.floor = np.array([float(p[4]) for p in problems])
        counts = [len(w) for w in weights]
        self.problem = np.repeat(np.arange(len(problems)), counts)
        self.weights = np.zeros((len(self.problem), width))
        for lo, w in zip(np.cumsum([0, *counts[:-1]]), weights, strict=True):
            self.weights[lo : lo + len(w), : w.shape[1]] = w

    def __call__(self, theta: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Values (k,) and gradients (k, 5) at ``theta`` (k, 5) for ``rows`` (each problem's rows
        together, as ``minimize_batch`` asks for them: ascending), in the log-sum-exp parameters
        (a, b, e, alpha, beta)."""
        theta = np.atleast_2d(theta)
        if len(rows) <= BLOCK:
            return self._block(theta, rows)
        cuts = _blocks(self.problem[rows])
        parts = [self._block(theta[lo:hi], rows[lo:hi]) for lo, hi in zip(cuts[:-1], cuts[1:], strict=True)]
        return np.concatenate([v for v, _ in parts]), np.concatenate([g for _, g in parts])

    def _block(self, theta: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        problem = self.problem[rows]
        starts = _starts(problem)
        width = int(self.sizes[problem[starts]].max())  # the block's longest problem: no wider
        log_n, log_d = self.log_n[:, :width][problem], self.log_d[:, :width][problem]
        weights = self.weights[rows, :width]
        delta = self.delta[problem]
        floor = self.floor[problem]
        with np.errstate(all="ignore"):
            x1 = theta[:, 0:1] - theta[:, 3:4] * log_n
            x2 = theta[:, 1:2] - theta[:, 4:5] * log_d
            e = theta[:, 2:3]
            shift = np.maximum(np.maximum(x1.max(1, keepdims=True), x2.max(1, keepdims=True)), e)
            shift = np.where(shift > OVERFLOW, shift, 0.0)
            p1, p2, p3 = np.exp(x1 - shift), np.exp(x2 - shift), np.exp(e - shift)
            total = p1 + p2 + p3
            r = (np.log(total) + shift) - self.log_l[:, :width][problem]
            same_delta = bool((delta == delta[0]).all())
            bound = delta[0] if same_delta else delta[:, None]
            c = np.clip(r, -bound, bound)
            if (floor != 1.0).any():
                weights = weights * np.where(r > 0, floor[:, None], 1.0)
            huber = (c * (r - 0.5 * c)) * weights
            psi = (c * weights) / total
            g1, g2 = psi * p1, psi * p2
            return self._sums(problem, starts, huber, psi, g1, g2, p3)

    def _sums(self, problem, starts, huber, psi, g1, g2, p3) -> tuple[np.ndarray, np.ndarray]:
        """Each row's value and gradient, its sums over its own problem's runs: the sums over every
        row of problems of one size at once (problems laid out by size share them), the products
        per problem."""
        rows = len(problem)
        values = np.empty(rows)
        grad = np.empty((rows, 5))
        ends = [*starts[1:], rows]
        sizes = self.sizes[problem[starts]].tolist()
        first = 0
        for i, n in enumerate(sizes):
            if i + 1 < len(sizes) and sizes[i + 1] == n:
                continue
            lo, hi = starts[first], ends[i]
            values[lo:hi] = huber[lo:hi, :n].sum(1)
            grad[lo:hi, 0] = g1[lo:hi, :n].sum(1)
            grad[lo:hi, 1] = g2[lo:hi, :n].sum(1)
            grad[lo:hi, 2] = psi[lo:hi, :n].sum(1) * p3[lo:hi, 0]
            first = i + 1
        for lo, hi, n in zip(starts, ends, sizes, strict=True):
            q = problem[lo]
            for b in range(lo, hi, CHUNK):  # the blocks huber_objective multiplies in
                end = min(b + CHUNK, hi)
                grad[b:end, 3] = -(g1[b:end, :n] @ self.log_n[q, :n])
                grad[b:end, 4] = -(g2[b:end, :n] @ self.log_d[q, :n])
        return values, grad


def _starts(problem: np.ndarray) -> list[int]:
    """Where each problem's run of rows starts."""
    if problem[0] == problem[-1]:  # one problem (its rows are together)
        return [0]
    return [0, *(np.flatnonzero(problem[1:] != problem[:-1]) + 1).tolist()]


def _blocks(problem: np.ndarray) -> list[int]:
    """Cuts into blocks of at most BLOCK rows, each starting where a problem's rows start or a whole
    number of BLOCKs into them (so that its products are taken over huber_objective's blocks)."""
    starts = _starts(problem)
    points = [p for lo, hi in zip(starts, [*starts[1:], len(problem)], strict=True)
              for p in range(lo, hi, BLOCK)] + [len(problem)]
    cuts, previous = [0], 0
    for point in points[1:]:
        if point - cuts[-1] > BLOCK:
            cuts.append(previous)
        previous = point
    return [*cuts, len(problem)]


def _pad(values: np.ndarray, width: int) -> np.ndarray:
    """``values`` repeated at their last to ``width`` (a repeat moves no row's maximum)."""
    return np.concatenate([values, np.repeat(values[-1:], width - len(values))])


__all__ = ["HuberRows"]
