"""Sweeps: options, planning, the parity gate, training, the driver and the demo.

Modules import torch only where they train (``trainer`` and the ``driver`` above it).
"""
