"""Built-in executor ``local`` (registration only; the implementation is
``flops_fit.local_executor``)."""

import flops_fit


@flops_fit.hookimpl
def register_executors(register):
    register(flops_fit.ExecutorEntry(
        "local",
        description="This machine: runs in sequence, or on several worker processes / one per GPU",
        builder="flops_fit.local_executor:build",
    ))
