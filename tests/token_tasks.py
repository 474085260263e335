"""Work for the token-cache tests' worker processes (imported there by name)."""

from __future__ import annotations

import logging

import flops_fit


class _Count(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.builds = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.builds += record.getMessage().startswith("tokenizing ")


def build_dataset(config: dict) -> tuple[int, list[int]]:
    """Build the training split in this process: (token files this process wrote, the first tokens)."""
    counter = _Count()
    logger = logging.getLogger("flops_fit.plugins.data.token_cache")
    logger.setLevel(logging.INFO)
    logger.addHandler(counter)
    data = flops_fit.create_dataset("text-files", "train", **config)
    return counter.builds, [int(t) for t in data.tokens[:64]]
