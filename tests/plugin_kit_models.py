"""Builders referenced lazily by tests/plugin_kit.py (imported only when a model is built)."""

import torch


class Linear(torch.nn.Linear):
    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def build_linear(width: int, **config) -> Linear:
    return Linear(width, width)


def build_without_num_params(width: int, **config) -> torch.nn.Linear:
    return torch.nn.Linear(width, width)


class Understated(torch.nn.Linear):
    """num_params() leaves out the bias: a count that lies, with a param_count that agrees."""

    def num_params(self) -> int:
        return self.weight.numel()


def build_understated(width: int, **config) -> Understated:
    return Understated(width, width)
