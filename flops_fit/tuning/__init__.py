"""Tuning: the learning-rate (and batch-size) law of a sweep, found by a small sweep first.

``tune`` (``tuning.tune``) trains the sweep's smallest budgets at several rates
(``tuning.grid``), fits each cell's best rate (``tuning.cells``) and the law across cells
(``tuning.law``), and writes ``hparams.json`` (read by ``sweeps.tuned``) and a report
(``tuning.report``). ``fit_rates`` (``tuning.from_runs``) fits the same law to runs a lab
swept over rates itself, and writes the same ``hparams.json``.
"""

from flops_fit.tuning.from_runs import RateFit, fit_rates
from flops_fit.tuning.tune import TuneResult, tune

__all__ = ["RateFit", "TuneResult", "fit_rates", "tune"]
