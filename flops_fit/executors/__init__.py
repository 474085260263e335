"""Executors: where a sweep's runs train (this machine, or a Ray cluster).

Each module registers its executor through the ``register_executors`` hook, like any
plugin; ``base`` defines the protocol the sweep driver relies on.
"""
