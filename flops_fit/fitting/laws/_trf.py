"""scipy's bounded least squares (``least_squares(method="trf", x_scale="jac")``, exact trust-region
solver, linear loss) for many independent problems at once, one row each, step for step.

A bootstrap refits one law on hundreds of resamples from the same nearby optimum. One scipy
call per resample spends most of its time in Python per step; here each round takes one step
of every unfinished row: their residuals and Jacobians come from one vectorised call and their
SVDs from one stacked ``np.linalg.svd``. The algorithm is scipy's own, transcribed operation by
operation (``scipy/optimize/_lsq/trf.py: trf_bounds``, ``common.py``): Coleman-Li scaling, the
trust-region step by More's root finding on one SVD, reflection at the bounds, the same radius
updates and stopping tests. Its iterates are scipy's to rounding, and so are its answers where
the problem is well posed, which matters because the answer of a loose tolerance (``ftol`` 1e-6)
depends on the path to it, not just on the optimum. ``status`` is scipy's: 0 evaluation limit,
1 gtol, 2 ftol, 3 xtol, 4 ftol and xtol.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

# fun(x, rows) -> (residuals (k, m), Jacobians (k, m, n)) of the problems ``rows`` at points ``x`` (k, n).
BatchResiduals = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
EPS = np.finfo(float).eps
RUNNING = -1


class LeastSquaresBatch(NamedTuple):
    """Per row, as scipy's ``OptimizeResult``: the solution, its cost (half the sum of squared
    residuals), the evaluations made and scipy's status (> 0: converged)."""

    x: np.ndarray
    cost: np.ndarray
    nfev: np.ndarray
    status: np.ndarray


def least_squares_batch(fun: BatchResiduals, x0: np.ndarray, lb: np.ndarray, ub: np.ndarray, *, ftol: float = 1e-8,
                        xtol: float = 1e-8, gtol: float = 1e-8, max_nfev: int = 100) -> LeastSquaresBatch:
    """Each row of ``x0`` (k, n) solved as ``least_squares(..., bounds=(lb, ub), x_scale="jac")`` would."""
    x = _strictly_feasible(np.array(x0, dtype=float, ndmin=2), lb, ub, rstep=1e-10)
    k, n = x.shape
    f, J = fun(x, np.arange(k))
    m = f.shape[1]
    cost = 0.5 * _dot(f, f)
    g = _grad(J, f)
    scale_inv = np.sqrt(np.sum(J ** 2, axis=1))
    scale_inv[scale_inv == 0] = 1
    v, dv = _cl_scaling(x, g, lb, ub)
    v = np.where(dv != 0, v * scale_inv, v)
    Delta = np.sqrt(_dot(x * scale_inv / v ** 0.5, x * scale_inv / v ** 0.5))
    Delta[Delta == 0] = 1.0
    alpha, nfev = np.zeros(k), np.ones(k, dtype=int)
    status, fresh, stopped = np.full(k, RUNNING), np.ones(k, dtype=bool), np.zeros(k, dtype=int)
    # each row's trust-region model, rebuilt after every accepted step
    d, diag_h, g_h, theta = (np.zeros((k, n)), np.zeros((k, n)), np.zeros((k, n)), np.zeros(k))
    J_h, s, V, uf = np.zeros((k, m, n)), np.zeros((k, n)), np.zeros((k, n, n)), np.zeros((k, n))
    while True:
        rows = np.flatnonzero((status == RUNNING) & fresh)
        if rows.size:
            v, dv = _cl_scaling(x[rows], g[rows], lb, ub)
            g_norm = np.max(np.abs(g[rows] * v), axis=1)
            # scipy's loop head: gtol overrides a stop the last step made; else its stop, or the evaluation limit
            ended = (stopped[rows] > 0) | (nfev[rows] == max_nfev)
            status[rows[ended]] = stopped[rows[ended]]
            status[rows[g_norm < gtol]] = 1
            keep = status[rows] == RUNNING
            rows, v, dv, g_norm = rows[keep], v[keep], dv[keep], g_norm[keep]
            si = scale_inv[rows]
            v = np.where(dv != 0, v * si, v)
            d[rows] = v ** 0.5 * (1 / si)
            diag_h[rows] = g[rows] * dv * (1 / si)
            g_h[rows] = d[rows] * g[rows]
            J_h[rows] = J[rows] * d[rows][:, None, :]
            augmented = np.concatenate([J_h[rows], _diagonal(diag_h[rows] ** 0.5)], axis=1)
            U, s[rows], Vt = np.linalg.svd(augmented, full_matrices=False)
            V[rows] = Vt.transpose(0, 2, 1)
            uf[rows] = np.einsum("kmn,km->kn", U[:, :m], f[rows])
            theta[rows] = np.maximum(0.995, 1 - g_norm)
            fresh[rows] = False
        rows = np.flatnonzero(status == RUNNING)
        if rows.size == 0:
            break
        xr, dr, Dr = x[rows], d[rows], Delta[rows]
        p_h, alpha[rows] = _trust_region_steps(m, uf[rows], s[rows], V[rows], Dr, alpha[rows])
        step, step_h, predicted = _select_steps(xr, J_h[rows], diag_h[rows], g_h[rows], dr * p_h, p_h, dr, Dr, lb,
                                                ub, theta[rows])
        x_new = _strictly_feasible(xr + step, lb, ub, rstep=0)
        f_new, J_new = fun(x_new, rows)
        nfev[rows] += 1
        step_h_norm = _norm(step_h)
        finite = np.all(np.isfinite(f_new), axis=1)
        Delta[rows[~finite]] = 0.25 * step_h_norm[~finite]
        cost_new = 0.5 * _dot(f_new, f_new)
        reduction = cost[rows] - cost_new
        Delta_new, ratio = _update_radius(Dr, reduction, predicted, step_h_norm, step_h_norm > 0.95 * Dr)
        stop = np.where(finite, _termination(reduction, cost[rows], _norm(step), _norm(xr), ratio, ftol, xtol), 0)
        going = finite & (stop == 0)
        alpha[rows[going]] *= Dr[going] / Delta_new[going]
        Delta[rows[going]] = Delta_new[going]
        accept = finite & (reduction > 0)
        took = rows[accept]
        x[took], f[took], cost[took], J[took] = x_new[accept], f_new[accept], cost_new[accept], J_new[accept]
        g[took] = _grad(J[took], f[took])
        scale_inv[took] = np.maximum(np.sqrt(np.sum(J[took] ** 2, axis=1)), scale_inv[took])
        stopped[rows] = stop
        # a row's outer iteration ends at an accepted step, a stop or its evaluation limit
        fresh[rows[accept | (stop > 0) | (nfev[rows] >= max_nfev)]] = True
    return LeastSquaresBatch(x, cost, nfev, status)


def _update_radius(Delta, reduction, predicted, step_norm, bound_hit) -> tuple[np.ndarray, np.ndarray]:
    """``common.update_tr_radius``: the next radius and the step's ratio of actual to predicted reduction."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(predicted > 0, reduction / np.where(predicted > 0, predicted, 1.0),
                         np.where((predicted == 0) & (reduction == 0), 1.0, 0.0))
    Delta = np.where(ratio < 0.25, 0.25 * step_norm, np.where((ratio > 0.75) & bound_hit, Delta * 2.0, Delta))
    return Delta, ratio


def _termination(dF, F, dx_norm, x_norm, ratio, ftol, xtol) -> np.ndarray:
    """``common.check_termination``: 4 both, 2 ftol, 3 xtol, 0 neither."""
    f_ok = (dF < ftol * F) & (ratio > 0.25)
    x_ok = dx_norm < xtol * (xtol + x_norm)
    return np.where(f_ok & x_ok, 4, np.where(f_ok, 2, np.where(x_ok, 3, 0)))


def _dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("ki,ki->k", a, b)


def _norm(a: np.ndarray) -> np.ndarray:
    return np.sqrt(_dot(a, a))


def _grad(J: np.ndarray, f: np.ndarray) -> np.ndarray:
    return np.einsum("kmn,km->kn", J, f)


def _diagonal(values: np.ndarray) -> np.ndarray:
    out = np.zeros(values.shape + values.shape[-1:])
    idx = np.arange(values.shape[-1])
    out[:, idx, idx] = values
    return out


def _cl_scaling(x, g, lb, ub) -> tuple[np.ndarray, np.ndarray]:
    """Coleman-Li scaling vector and its derivative (``common.CL_scaling_vector``)."""
    to_upper, to_lower = (g < 0) & np.isfinite(ub), (g > 0) & np.isfinite(lb)
    v = np.where(to_lower, x - lb, np.where(to_upper, ub - x, 1.0))
    dv = np.where(to_lower, 1.0, np.where(to_upper, -1.0, 0.0))
    return v, dv


def _strictly_feasible(x, lb, ub, rstep: float) -> np.ndarray:
    """``common.make_strictly_feasible``: points on (or within rstep of) a bound moved just inside."""
    lb, ub = np.broadcast_to(lb, x.shape), np.broadcast_to(ub, x.shape)
    if rstep == 0:
        lower, upper = x <= lb, x >= ub
        lower_to, upper_to = np.nextafter(lb, ub), np.nextafter(ub, lb)
    else:
        with np.errstate(invalid="ignore"):
            lower_dist, upper_dist = x - lb, ub - x
            lower = np.isfinite(lb) & (lower_dist <= np.minimum(upper_dist, rstep * np.maximum(1, np.abs(lb))))
            upper = np.isfinite(ub) & (upper_dist <= np.minimum(lower_dist, rstep * np.maximum(1, np.abs(ub))))
            lower_to, upper_to = lb + rstep * np.maximum(1, np.abs(lb)), ub - rstep * np.maximum(1, np.abs(ub))
    out = np.where(upper, upper_to, np.where(lower, lower_to, x))
    tight = (out < lb) | (out > ub)
    with np.errstate(invalid="ignore"):  # lb + ub is NaN for (-inf, inf), never tight
        return np.where(tight, 0.5 * (lb + ub), out)


def _trust_region_steps(m: int, uf, s, V, Delta, alpha, rtol: float = 0.01, max_iter: int = 10):
    """``common.solve_lsq_trust_region`` per row: the step in the scaled space and its LM parameter."""
    def phi_and_derivative(a):
        denom = s ** 2 + a[:, None]
        p_norm = _norm(suf / denom)
        return p_norm - Delta, -np.sum(suf ** 2 / denom ** 3, axis=1) / p_norm

    suf = s * uf
    full_rank = s[:, -1] > EPS * m * s[:, 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        gauss_newton = -np.einsum("kij,kj->ki", V, uf / s)
        inside = full_rank & (_norm(gauss_newton) <= Delta)
        upper = _norm(suf) / Delta
        phi, phi_prime = phi_and_derivative(np.zeros_like(Delta))
        lower = np.where(full_rank, -phi / phi_prime, 0.0)
        restart = lambda: np.maximum(0.001 * upper, (lower * upper) ** 0.5)  # noqa: E731
        alpha = np.where(~full_rank & (alpha == 0), restart(), alpha)
        going = ~inside
        for _ in range(max_iter):
            if not going.any():
                break
            outside = (alpha < lower) | (alpha > upper)
            a = np.where(outside, restart(), alpha)
            phi, phi_prime = phi_and_derivative(a)
            upper = np.where(going & (phi < 0), a, upper)
            ratio = phi / phi_prime
            lower = np.where(going, np.maximum(lower, a - ratio), lower)
            alpha = np.where(going, a - (phi + Delta) * ratio / Delta, alpha)
            going &= ~(np.abs(phi) < rtol * Delta)
        p = -np.einsum("kij,kj->ki", V, suf / (s ** 2 + alpha[:, None]))
        p *= (Delta / _norm(p))[:, None]
    return np.where(inside[:, None], gauss_newton, p), np.where(inside, 0.0, alpha)


def _to_bound(x, s, lb, ub) -> tuple[np.ndarray, np.ndarray]:
    """``common.step_size_to_bound`` per row: the stride to the nearest bound along s, and which it hits."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        steps = np.where(s != 0, np.maximum((lb - x) / s, (ub - x) / s), np.inf)
    least = np.min(steps, axis=1)
    return least, (steps == least[:, None]) * np.sign(s).astype(int)


def _quadratic(J, g, s, diag) -> np.ndarray:
    """``common.evaluate_quadratic``: the model's change along s."""
    Js = np.einsum("kmn,kn->km", J, s)
    return 0.5 * (_dot(Js, Js) + _dot(s * diag, s)) + _dot(s, g)


def _line_minimum(a, b, lo, hi, c=0.0) -> tuple[np.ndarray, np.ndarray]:
    """``common.minimize_quadratic_1d``: min of a t^2 + b t + c over [lo, hi], first of ties."""
    with np.errstate(divide="ignore", invalid="ignore"):
        extremum = -0.5 * b / a
    ext_ok = (a != 0) & (lo < extremum) & (extremum < hi)
    y_lo, y_hi = lo * (a * lo + b) + c, hi * (a * hi + b) + c
    y_ext = np.where(ext_ok, extremum * (a * extremum + b) + c, np.inf)
    pick_lo = (y_lo <= y_hi) & (y_lo <= y_ext)
    pick_hi = ~pick_lo & (y_hi <= y_ext)
    t = np.where(pick_lo, lo, np.where(pick_hi, hi, extremum))
    return t, np.where(pick_lo, y_lo, np.where(pick_hi, y_hi, y_ext))


def _select_steps(x, J_h, diag_h, g_h, p, p_h, d, Delta, lb, ub, theta):
    """``trf.select_step`` per row: the trust-region step if it stays inside the bounds, else the
    best of it stepped back from the bound, its reflection and the scaled gradient step."""
    inside = np.all((x + p >= lb) & (x + p <= ub), axis=1)
    p_inside, p_h_inside = p, p_h
    value_inside = _quadratic(J_h, g_h, p_h, diag_h)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        p_stride, hits = _to_bound(x, p, lb, ub)
        r_h = np.where(hits.astype(bool), -p_h, p_h)
        r = d * r_h
        p, p_h = p * p_stride[:, None], p_h * p_stride[:, None]
        x_on_bound = x + p
        # intersect_trust_region(p_h, r_h, Delta): the positive root
        qa, qb, qc = _dot(r_h, r_h), _dot(p_h, r_h), _dot(p_h, p_h) - Delta ** 2
        q = -(qb + np.copysign(np.sqrt(qb * qb - qa * qc), qb))
        to_tr = np.maximum(q / qa, qc / q)
        to_bound, _ = _to_bound(x_on_bound, r, lb, ub)
        r_stride = np.minimum(to_bound, to_tr)
        positive = r_stride > 0
        r_lo = np.where(positive, (1 - theta) * p_stride / r_stride, 0.0)
        r_hi = np.where(positive, np.where(r_stride == to_bound, theta * to_bound, to_tr), -1.0)
        reflect = r_lo <= r_hi
        v, u = np.einsum("kmn,kn->km", J_h, r_h), np.einsum("kmn,kn->km", J_h, p_h)
        a = 0.5 * (_dot(v, v) + _dot(r_h * diag_h, r_h))
        b = _dot(g_h, r_h) + _dot(u, v) + _dot(p_h * diag_h, r_h)
        c = 0.5 * _dot(u, u) + _dot(g_h, p_h) + 0.5 * _dot(p_h * diag_h, p_h)
        stride, r_value = _line_minimum(a, b, r_lo, r_hi, c)
        r_value = np.where(reflect, r_value, np.inf)
        r_h = r_h * stride[:, None] + p_h
        r = r_h * d
        p, p_h = p * theta[:, None], p_h * theta[:, None]
        p_value = _quadratic(J_h, g_h, p_h, diag_h)
        ag_h = -g_h
        ag = d * ag_h
        to_tr = Delta / _norm(ag_h)
        to_bound, _ = _to_bound(x, ag, lb, ub)
        ag_stride = np.where(to_bound < to_tr, theta * to_bound, to_tr)
        v = np.einsum("kmn,kn->km", J_h, ag_h)
        stride, ag_value = _line_minimum(0.5 * (_dot(v, v) + _dot(ag_h * diag_h, ag_h)), _dot(g_h, ag_h),
                                         np.zeros_like(ag_stride), ag_stride)
        ag_h, ag = ag_h * stride[:, None], ag * stride[:, None]
    take_p = (p_value < r_value) & (p_value < ag_value)
    take_r = ~take_p & (r_value < p_value) & (r_value < ag_value)
    pick = lambda a, b, c: np.where(take_p[:, None], a, np.where(take_r[:, None], b, c))  # noqa: E731
    step, step_h = pick(p, r, ag), pick(p_h, r_h, ag_h)
    value = np.where(take_p, p_value, np.where(take_r, r_value, ag_value))
    inside_step = inside[:, None]
    return (np.where(inside_step, p_inside, step), np.where(inside_step, p_h_inside, step_h),
            np.where(inside, -value_inside, -value))
