"""The ``flops-fit`` command line: ``main`` parses and dispatches; each module adds one
group of commands and imports nothing heavy at module level (``--help`` imports no torch)."""
