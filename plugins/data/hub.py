"""Whether the Hugging Face hub answers from here, and offline mode when it does not.

On a machine without network (a cluster's compute nodes, this sandbox) `datasets` and
`huggingface_hub` retry every hub request with back-off (1, 2, 4, 8 and 8 s) before a cached
dataset loads or the call fails. One TCP connection to the hub's host (``HF_ENDPOINT``, 3 s at
most) tells first; when it fails, offline mode is switched on for this process and the workers
it starts (``HF_HUB_OFFLINE=1``), so a cached dataset loads at once and an uncached one fails at
once, with the reason. Nothing is probed where ``HF_HUB_OFFLINE`` is set to any value (``0``:
the hub stays on, unprobed) or the environment names a proxy (the hub may answer through it
and not directly).
"""

from __future__ import annotations

import os
import socket
import sys
from urllib.parse import urlparse

PROBE_SECONDS = 3.0
SKIP_PROBE = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
# where the libraries keep the setting once imported (read at import time from the environment)
OFFLINE_FLAGS = (("huggingface_hub.constants", "HF_HUB_OFFLINE"), ("datasets.config", "HF_HUB_OFFLINE"),
                 ("datasets.config", "HF_DATASETS_OFFLINE"))

_probed: list[str | None] = []  # this process's answer, once


def unreachable() -> str | None:
    """Why the hub does not answer from here (and offline mode is now on), or None."""
    if not _probed:
        _probed.append(_probe())
        if _probed[0] is not None:
            _go_offline()
    return _probed[0]


def _probe() -> str | None:
    if any(os.environ.get(name) for name in SKIP_PROBE):
        return None
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host = endpoint.hostname or "huggingface.co"
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=PROBE_SECONDS).close()
    except OSError as exc:
        return f"the hub ({host}) does not answer from here ({exc.strerror or type(exc).__name__})"
    return None


def _go_offline() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    for module, name in OFFLINE_FLAGS:
        loaded = sys.modules.get(module)
        if loaded is not None and hasattr(loaded, name):
            setattr(loaded, name, True)


__all__ = ["unreachable"]
