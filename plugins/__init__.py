"""Built-in plugins (installed as ``flops_fit.plugins``).

They register through the same hooks as third-party plugins; the host reads this tuple
of module paths and imports each one on first use. Plugin modules import nothing heavy:
builders are lazy ``"module:function"`` strings.
"""

BUILTIN_PLUGINS: tuple[str, ...] = (
    "flops_fit.plugins.vit",
    "flops_fit.plugins.gpt",
    "flops_fit.plugins.losses",
    "flops_fit.plugins.datasets",
    "flops_fit.plugins.local_executor",
    "flops_fit.plugins.ray_executor",
    "flops_fit.parity.cases",
)
