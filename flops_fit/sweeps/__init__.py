"""Sweeps: options, planning, the parity gate, the preflight, the driver, sweep files and the demo.

Planning imports no torch; training one run is ``flops_fit.training``'s, which the driver
(and the preflight) import.
"""
