"""Training one run: the loop, its parallel strategies, checkpoints, and the executor's task.

Nothing is imported here, so that planning can read ``training.schedules`` and
``training.wsd`` (which import no torch) without loading torch.
"""
