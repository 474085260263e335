"""The example model; imported only when a model is built."""

import torch
from torch import nn


class MLPLanguageModel(nn.Module):
    def __init__(self, width: int, vocab_size: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)
        self.head = nn.Linear(width, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        x = x + self.fc2(torch.relu(self.fc1(x)))
        return self.head(x)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
