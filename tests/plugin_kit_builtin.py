"""Stands in for a built-in plugin module in the name-reservation test."""

from plugin_kit import toy_model

from flops_fit import hookimpl


@hookimpl
def register_models(register):
    register(toy_model("reserved"))
