"""IsoFLOP slices: each budget's profile fitted with the shape a Chinchilla law gives it.

At a fixed budget C, L = E + A/N^alpha + B/D^beta with D = C/(kN) is, in x = log N,

    L(x) = e + a exp(-alpha x) + b exp(beta x)

with e, a, b set by the budget and alpha, beta shared by every budget. A parabola in x
is the second-order Taylor expansion of this curve; its vertex slides toward the flatter
side by a few percent over a wide size grid (the third derivative is (beta - alpha) times
the second), so a parabola's minimum is a biased observed optimum. Fitting the slice itself
removes that bias: the exponents are fitted jointly over the budgets (variable projection:
a grid, then Nelder-Mead, over (alpha, beta), with each budget's e, a, b by weighted least
squares), and each budget's minimum is exact for its curve,
x* = log(alpha a / (beta b)) / (alpha + beta).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flops_fit.fitting.laws._simplex import minimize_simplex

GRID = np.geomspace(0.04, 2.5, 18)  # starting exponents, both alpha and beta
XATOL = 1e-6  # Nelder-Mead's stop, in log exponent
WARM_XATOL = 1e-3  # a bootstrap draw, started at the full data's exponents: 0.1% is plenty
Group = tuple[np.ndarray, np.ndarray, np.ndarray]  # (log N, loss, weights) of one budget


def _stack(groups: Sequence[Group]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The budgets' runs as padded (budgets, runs) arrays of log N about each budget's mean,
    loss and weight (0 for padding), and those means."""
    width = max(x.size for x, _, _ in groups)
    u, y, w = (np.zeros((len(groups), width)) for _ in range(3))
    centres = np.array([np.average(x, weights=wt) for x, _, wt in groups])
    for i, (x, loss, wt) in enumerate(groups):
        u[i, :x.size], y[i, :x.size], w[i, :x.size] = x - centres[i], loss, wt
    return u, y, w, centres


def _solve(stack, alpha: np.ndarray, beta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Summed weighted squared residuals for each (alpha, beta) pair (any shape P), and each
    budget's (e, a, b) about its mean log N, shape P + (budgets, 3)."""
    u, y, w, _ = stack
    al, be = np.asarray(alpha)[..., None, None], np.asarray(beta)[..., None, None]
    with np.errstate(all="ignore"):  # exponents far too large overflow: their error is infinite
        design = np.stack(np.broadcast_arrays(np.ones_like(u), np.exp(-al * u), np.exp(be * u)), -1)
        sw = np.sqrt(w)[..., None]
        xw = design * sw
        gram = np.einsum("...ni,...nj->...ij", xw, xw) + 1e-12 * np.eye(3)
        rhs = np.einsum("...ni,...n->...i", xw, y * sw[..., 0])
        finite = np.isfinite(gram).all((-2, -1)) & np.isfinite(rhs).all(-1)
        gram = np.where(finite[..., None, None], gram, np.eye(3))
        c = np.linalg.solve(gram, np.where(finite[..., None], rhs, 0.0)[..., None])[..., 0]
        r = np.einsum("...ni,...i->...n", design, c) - y
        sse = np.einsum("...gn->...", w * r * r)
    return np.where(finite.all(-1) & np.isfinite(sse), sse, np.inf), c


def fit_slices(groups: Sequence[Group], start: tuple[float, float] | None = None
               ) -> tuple[float, float, list[tuple[float, float]]]:
    """Shared (alpha, beta) and each budget's (log N, loss) at its slice's minimum.

    ``start`` (exponents of a fit of similar runs, e.g. the full data for a bootstrap draw)
    skips the starting grid. A budget whose fitted slice has no interior minimum (a or b not
    positive) gets NaNs; the caller decides whether a minimum outside the size grid counts.
    """
    from scipy.optimize import minimize

    stack = _stack(groups)
    tolerance = WARM_XATOL if start is not None else XATOL
    if start is None:
        alpha, beta = np.meshgrid(GRID, GRID, indexing="ij")
        sse, _ = _solve(stack, alpha, beta)
        i = np.unravel_index(np.nanargmin(sse), sse.shape)
        start = (alpha[i], beta[i])
    res = minimize(lambda p: float(_solve(stack, *np.exp(p))[0]), np.log(start), method="Nelder-Mead",
                   options={"xatol": tolerance, "fatol": np.inf, "maxiter": 300,
                            "initial_simplex": np.log(start) + np.array([[0, 0], [0.05, 0], [0, 0.05]])})
    a_, b_ = (float(v) for v in np.exp(res.x))
    _, coefs = _solve(stack, a_, b_)
    return a_, b_, _optima(a_, b_, coefs, stack[3])


def fit_slices_many(draws: Sequence[Sequence[Group]], start: tuple[float, float]
                    ) -> list[tuple[float, float, list[tuple[float, float]]]]:
    """``fit_slices(groups, start)`` for each of many ``draws`` (a bootstrap's), warm-started at
    ``start``: one Nelder-Mead over every draw at once (``_simplex``, scipy's path per draw), the
    draws' runs padded to one array (padding and missing budgets weigh nothing)."""
    stacks = [_stack(groups) for groups in draws]
    budgets, width = max(st[0].shape[0] for st in stacks), max(st[0].shape[1] for st in stacks)
    u, y, w = (np.zeros((len(draws), budgets, width)) for _ in range(3))
    for i, (ui, yi, wi, _) in enumerate(stacks):
        u[i, :ui.shape[0], :ui.shape[1]], y[i, :ui.shape[0], :ui.shape[1]] = ui, yi
        w[i, :ui.shape[0], :ui.shape[1]] = wi
    first = np.log(start) + np.array([[0, 0], [0.05, 0], [0, 0.05]])
    out = minimize_simplex(lambda p, rows: _solve((u[rows], y[rows], w[rows], None), *np.exp(p).T)[0],
                           np.repeat(first[None], len(draws), axis=0), xatol=WARM_XATOL, fatol=np.inf,
                           maxiter=300)
    exponents = np.exp(out.x)
    _, coefs = _solve((u, y, w, None), exponents[:, 0], exponents[:, 1])
    results = []
    for (a_, b_), coef, stack in zip(exponents, coefs, stacks, strict=True):
        results.append((float(a_), float(b_), _optima(float(a_), float(b_), coef[:len(stack[3])], stack[3])))
    return results


def _optima(a_: float, b_: float, coefs: np.ndarray, centres: np.ndarray) -> list[tuple[float, float]]:
    """Each budget's (log N, loss) at its fitted slice's minimum (NaNs without one)."""
    optima = []
    for (e, ca, cb), centre in zip(coefs, centres):
        if not (ca > 0 and cb > 0):
            optima.append((np.nan, np.nan))
            continue
        u = np.log(a_ * ca / (b_ * cb)) / (a_ + b_)
        optima.append((float(centre + u), float(e + ca * np.exp(-a_ * u) + cb * np.exp(b_ * u))))
    return optima


def slice_curve(group: Group, exponents: tuple[float, float], at: np.ndarray) -> np.ndarray:
    """One budget's fitted slice at log N = ``at``, given the shared ``exponents`` (alpha, beta)."""
    alpha, beta = exponents
    stack = _stack([group])
    _, coefs = _solve(stack, alpha, beta)
    e, ca, cb = coefs[0]
    u = np.asarray(at) - stack[3][0]
    return e + ca * np.exp(-alpha * u) + cb * np.exp(beta * u)


def slice_residuals(groups: Sequence[Group], exponents: tuple[float, float]) -> tuple[list[np.ndarray], np.ndarray]:
    """Each budget's fitted slice at its own runs, and every run's residual scaled up for the
    parameters fitted (3 per budget and the 2 shared exponents), for a residual bootstrap."""
    stack = _stack(groups)
    _, coefs = _solve(stack, *exponents)
    fitted, residuals = [], []
    for (x, y, w), (e, ca, cb), centre in zip(groups, coefs, stack[3]):
        u = x - centre
        f = e + ca * np.exp(-exponents[0] * u) + cb * np.exp(exponents[1] * u)
        fitted.append(f)
        residuals.append((y - f)[w > 0])
    r = np.concatenate(residuals)
    spare = r.size - 3 * len(groups) - 2
    return fitted, r * np.sqrt(r.size / spare) if spare > 0 else r


__all__ = ["fit_slices", "fit_slices_many", "slice_curve", "slice_residuals"]
