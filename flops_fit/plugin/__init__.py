"""The plugin host: hook specifications, entry contracts, registries and the registry API.

Nothing here imports torch; entries hold lazy ``"module:function"`` references.
"""
