"""Approach 3 by variable projection: Chinchilla's law, (alpha, beta) searched, E, A, B >= 0 by NNLS.

For each candidate (alpha, beta) the loss is linear in E, A and B, so they are solved exactly:
a two-parameter problem far better conditioned than the five-parameter one (``projection``).
"""

from __future__ import annotations

from flops_fit.fitting.approaches.projection import ProjectionApproach
from flops_fit.fitting.laws.forms import Chinchilla


class Vpnls(ProjectionApproach):
    """Variable projection: grid then Nelder-Mead over (alpha, beta); E, A, B by NNLS."""

    name = "vpnls"
    title = "Approach 3, variable projection (NNLS)"
    form = Chinchilla()


__all__ = ["Vpnls"]
