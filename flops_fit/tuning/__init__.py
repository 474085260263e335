"""Tuning: the learning-rate (and batch-size) law of a sweep, found by a small sweep first.

``tune`` (``tuning.tune``) trains the sweep's smallest budgets at several rates
(``tuning.grid``), fits each cell's best rate (``tuning.cells``) and the law across cells
(``tuning.law``), and writes ``hparams.json`` (read by ``sweeps.tuned``) and a report
(``tuning.report``).
"""

from flops_fit.tuning.tune import TuneResult, tune

__all__ = ["TuneResult", "tune"]
