"""The example dataset; imported only when a dataset is built."""

import torch


class ModularSequences(torch.utils.data.Dataset):
    """Sequences x[t+1] = (a * x[t] + c) mod vocab_size (a = 1 mod 4, c odd: full period for
    power-of-two vocabularies); each split uses its own seed."""

    def __init__(self, split: str, vocab_size: int = 64, seq_len: int = 32, num_sequences: int = 1024) -> None:
        generator = torch.Generator().manual_seed({"train": 0, "validation": 1}[split])
        a = 4 * torch.randint(0, vocab_size // 4, (num_sequences, 1), generator=generator) + 1
        c = 2 * torch.randint(0, vocab_size // 2, (num_sequences, 1), generator=generator) + 1
        x = torch.randint(0, vocab_size, (num_sequences, 1), generator=generator)
        steps = [x]
        for _ in range(seq_len - 1):
            steps.append((a * steps[-1] + c) % vocab_size)
        self.tokens = torch.cat(steps, dim=1)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> dict:
        return {"tokens": self.tokens[index]}


def build(split: str, vocab_size: int = 64, seq_len: int = 32, num_sequences: int = 1024) -> ModularSequences:
    return ModularSequences(split, vocab_size, seq_len, num_sequences)
