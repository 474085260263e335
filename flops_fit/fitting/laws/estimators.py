"""Estimators that fit any law form (``forms.LawForm``).

- ``fit_projection``: variable projection. For given exponents the loss is linear in the
  form's coefficients, solved exactly by weighted least squares with the form's sign
  constraints; only the exponents are searched (a grid, then Nelder-Mead within bounds).
  A few-parameter problem, far better conditioned than the full one.
- ``huber_objective``: Chinchilla's objective (summed Huber loss on log loss) for a form that
  gives its log prediction and gradient (``log_predict``), evaluated for many parameter rows
  and run weightings at once; ``parametric`` runs batched L-BFGS on it from a grid.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import cache
from typing import NamedTuple

import numpy as np

from flops_fit.fitting.laws._simplex import initial_simplex, minimize_simplex
from flops_fit.fitting.laws.forms import Inputs, LawForm

NM_MAXITER = 1000
FLOOR_ITERATIONS = 30
HUBER_DELTA = 1e-3
CHUNK = 64
ROW_CHUNK = 512  # exponent rows solved per block (the designs are rows x runs x columns)


class Solution(NamedTuple):
    """The exponents, the linear coefficients, the weighted squared error, Nelder-Mead's
    iterations and its status (``_lbfgs.STATUS`` codes)."""

    theta: np.ndarray
    coef: np.ndarray
    ssr: float
    iterations: int
    status: int


@cache
def _supports(columns: int, nonnegative: tuple[bool, ...]) -> list[list[int]]:
    """Column subsets to try when the unconstrained solution breaks a sign: every free column
    always, any subset of the constrained ones, largest first."""
    free = [j for j in range(columns) if not nonnegative[j]]
    held = [j for j in range(columns) if nonnegative[j]]
    return [sorted(free + list(s)) for r in range(len(held) - 1, -1, -1) for s in itertools.combinations(held, r)]


def constrained_lstsq(X: np.ndarray, y: np.ndarray, w: np.ndarray,
                      nonnegative: tuple[bool, ...]) -> tuple[np.ndarray, float]:
    """Weighted least squares with the flagged coefficients >= 0, exactly (the best feasible
    support), and its squared error. Columns should be of order one (normal equations)."""
    Xw = X * w[:, None]
    G, h, yy = Xw.T @ X, Xw.T @ y, float((w * y) @ y)
    try:
        c = np.linalg.solve(G, h)
        if all(c[j] >= 0 for j in range(c.size) if nonnegative[j]):  # the usual case
            return c, yy - float(c @ h)
    except np.linalg.LinAlgError:
        pass
    best, best_ssr = np.zeros(X.shape[1]), yy
    for support in _supports(X.shape[1], nonnegative):
        if not support:
            continue
        sub = np.ix_(support, support)
        try:
            c = np.linalg.solve(G[sub], h[support])
        except np.linalg.LinAlgError:
            continue
        if all(c[i] >= 0 for i, j in enumerate(support) if nonnegative[j]):
            ssr = yy - float(c @ h[support])  # at the LS solution of a support, c.G.c = c.h
            if ssr < best_ssr:
                best_ssr, best = ssr, np.zeros(X.shape[1])
                best[support] = c
    return best, best_ssr


def floor_solve(solve: Callable, X: np.ndarray, y: np.ndarray, w: np.ndarray, floor: float) -> tuple[np.ndarray, float]:
    """``solve(X, y, weights)`` with residuals where the law lies above a run weighted ``floor``
    times (asymmetric least squares, an expectile: reweighted until the sides settle).
    ``floor`` 1 is plain weighted least squares."""
    coef, ssr = solve(X, y, w)
    if floor == 1.0:
        return coef, ssr
    side = np.ones_like(w)
    for _ in range(FLOOR_ITERATIONS):
        new = np.where(X @ coef > y, floor, 1.0)
        if np.array_equal(new, side):
            break
        side = new
        coef, ssr = solve(X, y, w * side)
    return coef, ssr


def fit_projection(form: LawForm, x: Inputs, loss: np.ndarray, weights: np.ndarray, *,
                   start: np.ndarray | None = None, floor: float = 1.0) -> Solution:
    """Variable projection of ``form`` on runs ``x`` (inputs of order one keep it well conditioned):
    the best exponents on the form's grid (or from ``start``), then Nelder-Mead within its bounds."""
    if start is None:
        grid = np.array(list(itertools.product(form.grid, repeat=len(form.nonlinear))), dtype=float)
        ssr = profile_rows(form, grid, x, loss, np.asarray(weights, float)[None], np.zeros(len(grid), int), floor)[1]
        start = grid[int(np.argmin(np.where(np.isnan(ssr), np.inf, ssr)))]
    return fit_projection_rows(form, x, loss, np.asarray(weights, float)[None], np.asarray(start, float), floor)[0]


def fit_projection_rows(form: LawForm, x: Inputs, loss: np.ndarray, weights: np.ndarray, start: np.ndarray,
                        floor: float = 1.0) -> list[Solution]:
    """``fit_projection`` from ``start`` for each row of run weights ``weights`` (R, n) at once (a
    bootstrap's resamples): scipy's Nelder-Mead on every row together (``_simplex``), each row's
    path the one ``scipy.optimize.minimize`` would take."""
    reps = weights.shape[0]
    bounds = tuple(float(b) for b in form.bounds)
    simplex = initial_simplex(np.repeat(np.atleast_2d(start), reps, axis=0), bounds)
    out = minimize_simplex(lambda t, rows: profile_rows(form, t, x, loss, weights, rows, floor)[1], simplex,
                           xatol=1e-6, fatol=form.fatol, maxiter=NM_MAXITER, bounds=bounds)
    coef, ssr = profile_rows(form, out.x, x, loss, weights, np.arange(reps), floor)
    return [Solution(out.x[i].copy(), coef[i], float(ssr[i]), int(out.iterations[i]), int(out.status[i]))
            for i in range(reps)]


def profile_rows(form: LawForm, theta: np.ndarray, x: Inputs, loss: np.ndarray, weights: np.ndarray,
                 rows: np.ndarray, floor: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """The projected problem at each row of exponents ``theta`` (m, q) under run weights
    ``weights[rows]``: the best coefficients (m, p) and their squared error (m,), as
    ``floor_solve`` with ``constrained_lstsq`` gives them one at a time."""
    signs = tuple(name in form.nonnegative for name in form.linear)
    out_coef = np.zeros((len(theta), len(form.linear)))
    out_ssr = np.zeros(len(theta))
    for lo in range(0, len(theta), ROW_CHUNK):
        part = slice(lo, lo + ROW_CHUNK)
        X = form.design_rows(theta[part], x)
        out_coef[part], out_ssr[part] = floor_solve_rows(X, loss, weights[rows[part]], signs, floor)
    return out_coef, out_ssr


def floor_solve_rows(X: np.ndarray, y: np.ndarray, w: np.ndarray, nonnegative: tuple[bool, ...],
                     floor: float) -> tuple[np.ndarray, np.ndarray]:
    """``floor_solve`` with ``constrained_lstsq`` for each row of designs ``X`` (m, n, p) and
    weights ``w`` (m, n), each row reweighted until its own sides settle."""
    coef, ssr = constrained_lstsq_rows(X, y, w, nonnegative)
    if floor == 1.0:
        return coef, ssr
    side = np.ones_like(w)
    todo = np.arange(len(X))
    for _ in range(FLOOR_ITERATIONS):
        new = np.where((X[todo] @ coef[todo][:, :, None])[:, :, 0] > y, floor, 1.0)
        moved = ~np.all(new == side[todo], axis=1)
        todo, new = todo[moved], new[moved]
        if todo.size == 0:
            break
        side[todo] = new
        coef[todo], ssr[todo] = constrained_lstsq_rows(X[todo], y, w[todo] * new, nonnegative)
    return coef, ssr


def constrained_lstsq_rows(X: np.ndarray, y: np.ndarray, w: np.ndarray,
                           nonnegative: tuple[bool, ...]) -> tuple[np.ndarray, np.ndarray]:
    """``constrained_lstsq`` for each row of designs ``X`` (m, n, p) and weights ``w`` (m, n):
    the unconstrained solutions at once, the best feasible support only where a sign breaks
    (every support of every such row in one batched solve: ``_support_systems``)."""
    Xw = X * w[:, :, None]
    Xt = np.swapaxes(Xw, 1, 2)
    G, h, yy = Xt @ X, Xt @ y, (w * y) @ y
    held = np.array(nonnegative, dtype=bool)
    c = _solve_rows(G, h)
    ok = np.all(c[:, held] >= 0, axis=1) & np.all(np.isfinite(c), axis=1)
    coef = np.where(ok[:, None], c, 0.0)
    ssr = np.where(ok, yy - np.einsum("ij,ij->i", np.where(ok[:, None], c, 0.0), h), yy)
    bad = np.flatnonzero(~ok)
    if bad.size:
        masks = _support_masks(X.shape[2], nonnegative)  # (s, p): the supports in constrained_lstsq's order
        Gs, hs = _support_systems(G[bad], h[bad], masks)
        cs = _solve_rows(Gs.reshape(-1, *Gs.shape[2:]), hs.reshape(-1, hs.shape[2])).reshape(hs.shape)
        s = yy[bad, None] - np.einsum("bsp,bsp->bs", np.nan_to_num(cs), hs)
        feasible = np.all(np.isfinite(cs), axis=2) & np.all((cs >= 0) | ~held, axis=2)
        s = np.where(feasible & (s < ssr[bad, None]), s, np.inf)
        first = s.argmin(1)  # the first support at the least error: the one-at-a-time search's choice
        found = np.isfinite(s[np.arange(bad.size), first])
        take = bad[found]
        coef[take] = cs[np.flatnonzero(found), first[found]]
        ssr[take] = s[np.flatnonzero(found), first[found]]
    return coef, ssr


@cache
def _support_masks(columns: int, nonnegative: tuple[bool, ...]) -> np.ndarray:
    """The non-empty ``_supports`` as boolean column masks (supports, columns)."""
    masks = np.zeros((0, columns), dtype=bool)
    for support in _supports(columns, nonnegative):
        if support:
            row = np.zeros((1, columns), dtype=bool)
            row[0, support] = True
            masks = np.vstack([masks, row])
    return masks


def _support_systems(G: np.ndarray, h: np.ndarray, masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's normal equations restricted to each support, padded to full size: the columns
    outside a support get the identity and a zero right-hand side, so their coefficients solve
    to exactly 0 and the support's own block is solved as if alone. (b, s, p, p) and (b, s, p)."""
    inside = masks[:, :, None] & masks[:, None, :]
    eye = np.eye(masks.shape[1], dtype=bool)[None] & ~masks[:, :, None]
    Gs = np.where(inside[None], G[:, None], 0.0) + eye[None]
    hs = np.where(masks[None], h[:, None], 0.0)
    return Gs, hs


def _solve_rows(G: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Each row's G c = h; NaN where a row's system is singular (``constrained_lstsq`` skips it)."""
    try:
        return np.linalg.solve(G, h[:, :, None])[:, :, 0]
    except np.linalg.LinAlgError:
        out = np.full(h.shape, np.nan)
        for i in range(len(G)):
            try:
                out[i] = np.linalg.solve(G[i], h[i])
            except np.linalg.LinAlgError:
                pass
        return out


def huber_objective(form: LawForm, theta: np.ndarray, logs: Inputs, log_l: np.ndarray, weights: np.ndarray,
                    delta: float = HUBER_DELTA, floor: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Summed (weighted) Huber loss of log loss and its gradient for each row of ``theta`` (k, p).

    ``logs`` are the form's inputs in logs; ``weights`` is (k, n) or (n,): run multiplicities
    (1 for a plain fit, bootstrap counts). ``floor`` multiplies the loss of residuals where the
    law lies above the run (1: Chinchilla's symmetric loss; more fits the floor of the runs;
    still continuously differentiable, as Huber's loss is flat at zero).
    """
    theta = np.atleast_2d(theta)
    if theta.shape[0] > CHUNK:  # small blocks stay in cache and avoid re-faulting big temporaries
        parts = [huber_objective(form, theta[i : i + CHUNK], logs, log_l,
                                 weights if weights.ndim == 1 else weights[i : i + CHUNK], delta, floor)
                 for i in range(0, theta.shape[0], CHUNK)]
        return np.concatenate([v for v, _ in parts]), np.concatenate([g for _, g in parts])
    with np.errstate(all="ignore"):
        predicted, backward = form.log_predict(theta, logs)
        r = predicted - log_l
        c = np.clip(r, -delta, delta)  # Huber's derivative; its value is c (r - c/2)
        if floor != 1.0:
            weights = weights * np.where(r > 0, floor, 1.0)
        return ((c * (r - 0.5 * c)) * weights).sum(1), backward(c * weights)


__all__ = ["HUBER_DELTA", "Solution", "constrained_lstsq", "constrained_lstsq_rows", "fit_projection", "fit_projection_rows",
           "floor_solve", "floor_solve_rows", "huber_objective", "profile_rows"]
