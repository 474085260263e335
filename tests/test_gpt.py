"""Built-in GPT: registration, configuration errors, causality, HF GPT-2 equivalence, contract."""

import pytest
import torch
from flops_fit.plugins.models import gpt
from flops_fit.plugins.models.gpt_model import build

import flops_fit
from flops_fit.testing import check_model_entry, isolated_host

SMALL = {"n_layer": 2, "n_head": 4, "vocab_size": 97, "block_size": 16}


def tokens(batch=2, length=12, vocab=97, seed=0):
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def host():
    return isolated_host(gpt, builtins=False)


def test_registered_entries(host):
    assert flops_fit.list_models(host=host) == ["gpt", "gpt2"]
    entry = flops_fit.model_info("gpt", host=host)
    assert entry.size_param == "width" and entry.flops_unit == "token"
    assert entry.task == flops_fit.TASK_CAUSAL_LM and entry.default_loss == "next-token"
    assert entry.defaults["vocab_size"] == 256 and entry.defaults["block_size"] == 128
    assert entry.sizes(32, 256) == list(range(32, 257, 16))


def test_default_gpt_is_not_mostly_embeddings(host):
    """The earlier tool's default had 96% embedding parameters at d=64."""
    for width in (32, 64, 256):
        model = flops_fit.create_model("gpt", size=width, host=host)
        assert model.num_params(non_embedding=True) / model.num_params() > 0.5, width
    check_model_entry("gpt", sizes=[32, 128], host=host)


def test_create_model_and_shapes(host):
    model = flops_fit.create_model("gpt", size=64, host=host)
    assert model.config.n_head == 4 and model.config.n_layer == 4
    assert model(tokens(vocab=256)).shape == (2, 12, 256)
    assert model(tokens(length=128, vocab=256)).shape == (2, 128, 256)
    assert model(tokens(length=1, vocab=256)).shape == (2, 1, 256)


def test_gpt2_preset_matches_hf_config(host):
    transformers = pytest.importorskip("transformers")
    GPT2Config, GPT2LMHeadModel = transformers.GPT2Config, transformers.GPT2LMHeadModel

    ref_cfg = GPT2Config()
    with torch.device("meta"):
        ours = flops_fit.create_model("gpt2", host=host)
        ref = GPT2LMHeadModel(ref_cfg)
    cfg = ours.config
    assert (cfg.width, cfg.n_layer, cfg.n_head, cfg.vocab_size, cfg.block_size) == (
        ref_cfg.n_embd, ref_cfg.n_layer, ref_cfg.n_head, ref_cfg.vocab_size, ref_cfg.n_positions)
    assert cfg.layer_norm_eps == ref_cfg.layer_norm_epsilon and ref_cfg.activation_function == "gelu_new"
    assert ours.num_params() == sum(p.numel() for p in ref.parameters()) == 124_439_808


def _hf_gpt2(ours):
    """HF GPT2LMHeadModel of the same configuration holding our weights (Conv1D = transpose)."""
    transformers = pytest.importorskip("transformers")
    GPT2Config, GPT2LMHeadModel = transformers.GPT2Config, transformers.GPT2LMHeadModel

    cfg = ours.config
    ref = GPT2LMHeadModel(GPT2Config(
        n_embd=cfg.width, n_layer=cfg.n_layer, n_head=cfg.n_head, vocab_size=cfg.vocab_size,
        n_positions=cfg.block_size, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=0, eos_token_id=0,
    )).eval()
    sd = ours.state_dict()
    new = {"transformer.wte.weight": sd["wte.weight"], "transformer.wpe.weight": sd["wpe.weight"],
           "transformer.ln_f.weight": sd["ln_f.weight"], "transformer.ln_f.bias": sd["ln_f.bias"],
           "lm_head.weight": sd["wte.weight"]}
    for i in range(cfg.n_layer):
        ours_p, hf = f"blocks.{i}.", f"transformer.h.{i}."
        for ln in ("ln_1", "ln_2"):
            for t in ("weight", "bias"):
                new[hf + f"{ln}.{t}"] = sd[ours_p + f"{ln}.{t}"]
        new[hf + "attn.c_attn.weight"] = sd[ours_p + "attn.qkv_proj.weight"].T
        new[hf + "attn.c_attn.bias"] = sd[ours_p + "attn.qkv_proj.bias"]
        pairs = (("attn.c_proj", "attn.out_proj"), ("mlp.c_fc", "mlp.fc"), ("mlp.c_proj", "mlp.proj"))
        for theirs, mine in pairs:
            new[hf + theirs + ".weight"] = sd[ours_p + mine + ".weight"].T
            new[hf + theirs + ".bias"] = sd[ours_p + mine + ".bias"]
    ref.load_state_dict(new, strict=False)
    return ref


def test_matches_hf_gpt2_lm_head_model():
    torch.manual_seed(0)
    ours = build(64, **SMALL).eval()
    ref = _hf_gpt2(ours)
    x = tokens()
    captured = []
    ours.blocks[1].attn.register_forward_hook(lambda m, i, o: captured.append(o))
    ref.transformer.h[1].attn.register_forward_hook(lambda m, i, o: captured.append(o[0]))
    torch.testing.assert_close(ours(x), ref(x).logits)
    torch.testing.assert_close(captured[0], captured[1])
    ref.set_attn_implementation("eager")
    torch.testing.assert_close(ours(x), ref(x).logits)
    exact = build(64, **SMALL, gelu="exact").eval()  # GPT-2 uses the tanh form: a real difference
    exact.load_state_dict(ours.state_dict())
    assert (exact(x) - ref(x).logits).abs().max() > 1e-6


@pytest.mark.parametrize("kv", [4, 2, 1])
def test_causal_masking_is_real(kv):
    model = build(32, **{**SMALL, "n_kv_head": kv}).eval()
    x = tokens()
    y = x.clone()
    y[:, 7] = (y[:, 7] + 1) % 97
    a, b = model(x), model(y)
    torch.testing.assert_close(a[:, :7], b[:, :7], rtol=0, atol=1e-6)
    assert (a[:, 7:] - b[:, 7:]).abs().max() > 1e-4
    torch.testing.assert_close(model(x[:, :5]), a[:, :5])  # shorter inputs: same prefix logits


def test_tied_head_and_num_params():
    model = build(32, **SMALL)
    assert model.lm_head.weight is model.wte.weight and model.lm_head.bias is None
    unique = sum(p.numel() for p in model.parameters())
    assert model.num_params() == unique == gpt.param_count(32, **{**gpt.GPT_DEFAULTS, **SMALL})
    assert model.num_params(non_embedding=True) == unique - 97 * 32 - 16 * 32
    no_bias = build(32, **SMALL, bias=False)
    assert no_bias.num_params() == gpt.param_count(32, **{**gpt.GPT_DEFAULTS, **SMALL, "bias": False})
    assert all(not n.endswith("bias") for n in no_bias.state_dict())


def test_gradients_reach_every_parameter():
    for kv in (4, 1):
        model = build(32, **{**SMALL, "n_kv_head": kv})
        model(tokens()).logsumexp(-1).sum().backward()
        for name, p in model.named_parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0, (kv, name)


def test_parameter_names_are_the_contract():
    names = set(build(32, **SMALL).state_dict())
    expected = {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias", "lm_head.weight"}
    for i in range(2):
        expected |= {f"blocks.{i}.{m}.{t}" for m in ("ln_1", "ln_2", "mlp.fc", "mlp.proj") for t in ("weight", "bias")}
        expected |= {f"blocks.{i}.attn.{p}_proj.{t}" for p in ("qkv", "out") for t in ("weight", "bias")}
    assert names == expected


@pytest.mark.parametrize(
    "config, message",
    [
        ({"n_layer": 0}, "n_layer must be a positive integer, got 0"),
        ({"vocab_size": -3}, "vocab_size must be a positive integer, got -3"),
        ({"n_head": 3}, "width 32 is not divisible by the number of heads 3"),
        ({"n_head": 4, "n_kv_head": 3}, "number of heads 4 is not divisible by the number of key/value heads 3"),
        ({"gelu": "relu"}, "gelu must be one of .* got 'relu'"),
        ({"layer_norm_eps": -1.0}, "layer_norm_eps must be a finite positive number"),
        ({"layer_norm_eps": float("inf")}, "layer_norm_eps must be a finite positive number, got inf"),
        ({"bias": "yes"}, "bias must be true or false, got 'yes'"),
        ({"nlayer": 2}, r"unknown configuration keyword\(s\) \['nlayer'\]"),
    ],
)
def test_configuration_errors(config, message):
    with pytest.raises(ValueError, match=message):
        build(32, **config)


@pytest.mark.parametrize(
    "x, message",
    [
        (torch.zeros(12, dtype=torch.long), r"tokens must be 2-D \(batch, sequence\), got shape \(12,\)"),
        (torch.zeros(2, 12), "tokens must be integer token ids, got dtype torch.float32"),
        (torch.zeros(2, 17, dtype=torch.long), "sequence length 17 must be between 1 and block_size=16"),
        (torch.zeros(2, 0, dtype=torch.long), "sequence length 0 must be between 1 and block_size=16"),
    ],
)
def test_input_errors(x, message):
    with pytest.raises(ValueError, match=message):
        build(32, **SMALL)(x)


def test_same_seed_identical_outputs():
    x = tokens()
    outs = []
    for seed in (3, 3, 4):
        torch.manual_seed(seed)
        outs.append(build(32, **SMALL)(x))
    assert torch.equal(outs[0], outs[1]) and not torch.equal(outs[0], outs[2])
