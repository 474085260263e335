"""Chinchilla's law with an N-D interaction term, by variable projection (``forms.InteractionForm``).

Chinchilla's law adds the size term and the data term; at small scale they interact (a small
model stops gaining from data sooner). Given (alpha, beta) the loss is linear in (E, A, B, F),
so the fit is variable projection like ``vpnls``, with E, A, B >= 0 and F free. The frontier has
no closed form: each budget's optimum is found numerically (``forms.numeric_frontier``).
"""

from __future__ import annotations

from flops_fit.fitting.approaches.projection import ProjectionApproach
from flops_fit.fitting.laws.forms import InteractionForm


class Interaction(ProjectionApproach):
    """Chinchilla's law with an N-D interaction term, by variable projection, with bootstrap intervals."""

    name = "interaction"
    title = "Approach 3 with an N-D interaction term"
    form = InteractionForm()


__all__ = ["Interaction"]
