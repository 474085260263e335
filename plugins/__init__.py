"""Built-in plugins (installed as ``flops_fit.plugins``): the model zoo, its losses and
datasets. They register through the same hooks as third-party plugins; the host lists
them in ``flops_fit.plugin.host.BUILTIN_PLUGINS``. Registration modules import nothing
heavy: builders are lazy ``"module:function"`` strings.
"""
