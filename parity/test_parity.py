"""The parity suite: every registered parity case x device x dtype.

Cases come from the plugin host (built-ins, installed plugins, ``FLOPS_FIT_PLUGINS``
modules), so ``pytest --pyargs flops_fit.parity`` runs an installed plugin's cases too.
Ids are ``<plugin>/<case>-<device>-<dtype>``, sorted; fp16 runs on CUDA only; CUDA
cases skip when no GPU is present.
"""

from __future__ import annotations

import pytest
import torch

from flops_fit.plugin import api
from flops_fit.plugin.contracts import resolve
from flops_fit.sweeps.gate import install_hint, missing_requirements

DEVICES = ("cpu", "cuda")
DTYPES = ("float32", "bfloat16", "float16")


def parity_matrix() -> list[tuple[str, str, str]]:
    """(qualified case id, device, dtype) for every registered case, sorted."""
    runs = []
    for case_id in api.list_parity_cases(qualified=True):
        entry = api.parity_case_info(case_id)
        for device in DEVICES:
            for dtype in DTYPES:
                if device in entry.devices and dtype in entry.dtypes and not (dtype == "float16" and device == "cpu"):
                    runs.append((case_id, device, dtype))
    return sorted(runs)


@pytest.mark.parametrize(("case_id", "device", "dtype"), [
    pytest.param(*run, id="-".join(run)) for run in parity_matrix()
])
def test_parity(case_id: str, device: str, dtype: str) -> None:
    entry = api.parity_case_info(case_id)
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device available")
    missing = missing_requirements(entry)
    if missing:
        pytest.skip(f"needs {', '.join(missing)} ({install_hint(missing)})")
    report = resolve(entry.run)(device=device, dtype=dtype)
    assert report.passed, str(report)
