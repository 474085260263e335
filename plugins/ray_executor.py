"""Built-in executor ``ray`` (registration only; the implementation is
``flops_fit.ray_executor``, which imports Ray only when a sweep uses it)."""

import flops_fit


@flops_fit.hookimpl
def register_executors(register):
    register(flops_fit.ExecutorEntry(
        "ray",
        description="A Ray cluster (RAY_ADDRESS or --address) or a local Ray: one task per run, "
        "worker deaths retried; needs pip install 'flops-fit[ray]'",
        builder="flops_fit.ray_executor:build",
    ))
