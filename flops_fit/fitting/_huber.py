"""Chinchilla's Approach 3 objective: summed Huber loss on log loss, LSE parameterisation.

theta = (a, b, e, alpha, beta); prediction log L = LSE(a - alpha log N, b - beta log D, e),
so A, B, E = exp(a), exp(b), exp(e) stay positive without bounds. Evaluated for many
parameter vectors and many run weightings at once (rows), which is what makes the
initialisation grid and the bootstrap fast.
"""

from __future__ import annotations

import numpy as np

HUBER_DELTA = 1e-3
CHUNK = 64


def objective(theta: np.ndarray, log_n: np.ndarray, log_d: np.ndarray, log_l: np.ndarray,
              weights: np.ndarray, delta: float = HUBER_DELTA, floor: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Summed (weighted) Huber loss and its gradient for each row of ``theta`` (k, 5).

    ``weights`` is (k, n) or (n,): run multiplicities (1 for a plain fit, bootstrap counts).
    ``floor`` multiplies the loss of residuals where the law lies above the run (1: Chinchilla's
    symmetric loss; more fits the floor of the runs; still continuously differentiable, as
    Huber's loss is flat at zero). Returns values (k,) and gradients (k, 5).
    """
    theta = np.atleast_2d(theta)
    if theta.shape[0] > CHUNK:  # small blocks stay in cache and avoid re-faulting big temporaries
        parts = [objective(theta[i : i + CHUNK], log_n, log_d, log_l,
                           weights if weights.ndim == 1 else weights[i : i + CHUNK], delta, floor)
                 for i in range(0, theta.shape[0], CHUNK)]
        return np.concatenate([v for v, _ in parts]), np.concatenate([g for _, g in parts])
    with np.errstate(all="ignore"):
        return _objective(theta, log_n, log_d, log_l, weights, delta, floor)


def _objective(theta, log_n, log_d, log_l, weights, delta, floor):
    x1 = theta[:, 0:1] - theta[:, 3:4] * log_n
    x2 = theta[:, 1:2] - theta[:, 4:5] * log_d
    e = theta[:, 2:3]
    # Shift by the row's largest exponent only where exp could overflow (rare: wild starts).
    shift = np.maximum(np.maximum(x1.max(1, keepdims=True), x2.max(1, keepdims=True)), e)
    shift = np.where(shift > 600.0, shift, 0.0)
    p1 = np.exp(x1 - shift)
    p2 = np.exp(x2 - shift)
    p3 = np.exp(e - shift)
    total = p1 + p2 + p3
    r = np.log(total) + (shift - log_l)
    c = np.clip(r, -delta, delta)  # Huber's derivative; value = c (r - c/2)
    if floor != 1.0:
        weights = weights * np.where(r > 0, floor, 1.0)
    value = ((c * (r - 0.5 * c)) * weights).sum(1)
    psi = c * weights / total
    g1, g2 = psi * p1, psi * p2
    grad = np.empty((theta.shape[0], 5))
    grad[:, 0] = g1.sum(1)
    grad[:, 1] = g2.sum(1)
    grad[:, 2] = psi.sum(1) * p3[:, 0]
    grad[:, 3] = -(g1 @ log_n)
    grad[:, 4] = -(g2 @ log_d)
    return value, grad
