"""The zoo as the process-wide host sees it: every built-in registers, nothing heavy at import."""

import subprocess
import sys

import pytest

import flops_fit
from flops_fit.plugin.host import BUILTIN_PLUGINS

ZOO_MODULES = ("flops_fit.plugins.models.vit", "flops_fit.plugins.models.gpt", "flops_fit.plugins.models.llama", "flops_fit.plugins.losses",
               "flops_fit.plugins.models.cait", "flops_fit.plugins.models.pvt_v2",
               "flops_fit.plugins.models.declared", "flops_fit.plugins.models.hf_causal_lm")


@pytest.mark.parametrize("module", ZOO_MODULES)
def test_registration_modules_do_not_import_torch(module):
    code = f"import sys, {module}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert module in BUILTIN_PLUGINS


def test_builtin_host_lists_the_zoo():
    models = flops_fit.list_models()
    for name in ("vit", "gpt", "gpt2", "llama", "vit_tiny_patch16_224", "vit_small_patch16_224", "vit_base_patch16_224"):
        assert name in models
    assert {"cross-entropy", "next-token"} <= set(flops_fit.list_losses())
    for name in ("vit", "gpt", "llama"):
        entry = flops_fit.model_info(name)
        loss = flops_fit.loss_info(entry.default_loss)
        assert loss.task == entry.task


def test_flops_fit_models_cli_lists_the_zoo():
    out = subprocess.run([sys.executable, "-m", "flops_fit", "models"], capture_output=True, text=True, check=True)
    for name in ("vit", "gpt", "gpt2", "llama", "vit_base_patch16_224"):
        assert f"\n{name} " in out.stdout, out.stdout


def test_every_builtin_model_has_a_parity_case_or_says_why_none_applies():
    """`flops-fit parity --model declared` (and a gate of it) advised registering a parity case for the
    built-in model flops-fit never builds; every built-in model now has a case (its own, or its
    family's for a preset) or a no_parity reason."""
    from flops_fit.sweeps.gate import family_cases

    for name in flops_fit.list_models():
        entry = flops_fit.model_info(name)
        cases = flops_fit.list_parity_cases(model=name) or family_cases(name)[0]
        assert cases or entry.no_parity, name
    gate = flops_fit.check_parity("declared")
    assert gate.summary().splitlines()[1] == ("  no parity case applies: flops-fit does not build it (a [train] "
                                              "command trains it), so there is nothing to compare")
