"""A plugin loaded by module name through FLOPS_FIT_PLUGINS (local, unpublished plugins)."""

from plugin_kit import toy_model

from flops_fit import hookimpl


@hookimpl
def register_models(register):
    register(toy_model("local-toy"))
