"""MultiheadAttention: shapes, validation, MHA/GQA/MQA equivalences, masks, paths, gradients."""

import pytest
import torch
import torch.nn.functional as F
from flops_fit.plugins.models.attention import MultiheadAttention
from torch import nn

E, H = 32, 8


def make(num_kv_heads=None, bias=True, seed=0, **kwargs):
    torch.manual_seed(seed)
    return MultiheadAttention(E, H, num_kv_heads, bias, **kwargs)


def rand(*shape, seed=1):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def manual_attention(m, q_in, kv_in, mask=None):
    """Independent float64 reference: explicit heads, KV head h // (H // KV), softmax."""
    m = m.double()
    B, Sq, _ = q_in.shape
    Sk = kv_in.shape[1]
    D = m.head_dim
    (wq, wk, wv), (bq, bk, bv) = m.projection_weights()
    q = F.linear(q_in.double(), wq, bq).view(B, Sq, m.num_heads, D)
    k = F.linear(kv_in.double(), wk, bk).view(B, Sk, m.num_kv_heads, D)
    v = F.linear(kv_in.double(), wv, bv).view(B, Sk, m.num_kv_heads, D)
    group = m.num_heads // m.num_kv_heads
    heads = []
    for h in range(m.num_heads):
        s = torch.einsum("bqd,bkd->bqk", q[:, :, h], k[:, :, h // group]) / D**0.5
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        heads.append(torch.einsum("bqk,bkd->bqd", s.softmax(-1), v[:, :, h // group]))
    out = m.out_proj(torch.cat(heads, dim=-1))
    m.float()
    return out.float()


# ------------------------------------------------------------------ shapes
@pytest.mark.parametrize("kv", [8, 2, 1])
def test_output_and_weight_shapes(kv):
    m = make(kv)
    q, kv_in = rand(2, 5, E), rand(2, 7, E, seed=2)
    assert m(q).shape == (2, 5, E)
    out, w = m(q, kv_in, need_weights=True, average_attn_weights=False)
    assert out.shape == (2, 5, E) and w.shape == (2, H, 5, 7)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, H, 5))
    assert m(q, kv_in, need_weights=True)[1].shape == (2, 5, 7)  # averaged over heads by default
    assert m.qkv_proj.weight.shape == (E + 2 * kv * E // H, E)


def test_state_dict_keys_are_the_packed_and_output_projections():
    keys = set(make(2).state_dict())
    assert keys == {f"{p}.{t}" for p in ("qkv_proj", "out_proj") for t in ("weight", "bias")}
    assert set(make(2, bias=False).state_dict()) == {"qkv_proj.weight", "out_proj.weight"}
    assert set(make(2, qk_norm=True).state_dict()) == keys | {f"{n}.{t}" for n in ("q_norm", "k_norm")
                                                               for t in ("weight", "bias")}


def test_separate_projection_state_dicts_still_load():
    """Checkpoints with q_proj / k_proj / v_proj keys are packed into qkv_proj on load."""
    m = make(2)
    (wq, wk, wv), (bq, bk, bv) = m.projection_weights()
    legacy = {"q_proj.weight": wq, "k_proj.weight": wk, "v_proj.weight": wv, "q_proj.bias": bq,
              "k_proj.bias": bk, "v_proj.bias": bv, **{f"out_proj.{t}": getattr(m.out_proj, t) for t in ("weight", "bias")}}
    fresh = make(2, seed=9)
    fresh.load_state_dict({k: v.detach().clone() for k, v in legacy.items()})
    x = rand(2, 5, E)
    torch.testing.assert_close(fresh(x), m(x), rtol=0, atol=0)


def test_self_attention_projects_with_one_matmul_and_no_concatenation():
    from torch.overrides import TorchFunctionMode

    class Record(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.calls = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.calls.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    m = make(2)
    with Record() as rec:
        m(rand(2, 5, E))
    assert "cat" not in rec.calls and rec.calls.count("linear") == 2, rec.calls  # qkv_proj and out_proj


def test_enable_gqa_is_found_by_a_probe_call_and_old_torch_expands_kv_heads(monkeypatch):
    from flops_fit.plugins.models import attention

    m, x = make(2), rand(2, 5, E)
    expected = m(x, causal=True)
    attention.sdpa_has_gqa.cache_clear()
    assert attention.sdpa_has_gqa() is True  # this torch (>= 2.5) has it
    real = F.scaled_dot_product_attention

    def old_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):  # torch < 2.5
        return real(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale)

    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", old_sdpa)
    attention.sdpa_has_gqa.cache_clear()
    try:
        assert attention.sdpa_has_gqa() is False
        torch.testing.assert_close(m(x, causal=True), expected)
    finally:
        attention.sdpa_has_gqa.cache_clear()


def test_head_dim_independent_of_embed_dim():
    torch.manual_seed(0)
    m = MultiheadAttention(E, 4, 2, head_dim=16)  # 4 * 16 = 64 != 32
    assert m.qkv_proj.weight.shape == (64 + 2 * 32, E) and m.out_proj.weight.shape == (E, 64)
    x, y = rand(2, 5, E), rand(2, 7, E, seed=2)
    for path in ("sdpa", "math"):
        torch.testing.assert_close(m(x, path=path), manual_attention(m, x, x))
        torch.testing.assert_close(m(x, y, path=path), manual_attention(m, x, y))


def test_qk_norm_matches_timm_attention():
    Attention = pytest.importorskip("timm.layers").Attention

    torch.manual_seed(0)
    m = make(qk_norm=True)
    ref = Attention(E, num_heads=H, qkv_bias=True, qk_norm=True, norm_layer=nn.LayerNorm).eval()
    with torch.no_grad():
        for n in ("q_norm", "k_norm"):
            getattr(m, n).weight.normal_()
            getattr(m, n).bias.normal_()
            getattr(ref, n).eps = 1e-6
        ref.load_state_dict({k.replace("qkv_proj", "qkv").replace("out_proj", "proj"): v for k, v in m.state_dict().items()})
    x = rand(2, 9, E)
    torch.testing.assert_close(m(x), ref(x))


def test_rotary_layouts_are_the_same_rotation_up_to_a_permutation():
    from flops_fit.plugins.models.attention import Rotary, apply_rotary

    x = rand(2, 3, 5, 8)
    freqs = rand(5, 4, seed=4)
    half = Rotary(torch.cat((freqs, freqs), -1).cos(), torch.cat((freqs, freqs), -1).sin())
    inter = Rotary(freqs.repeat_interleave(2, -1).cos(), freqs.repeat_interleave(2, -1).sin(), interleaved=True)
    to_inter = torch.tensor([0, 4, 1, 5, 2, 6, 3, 7])  # half layout dim i pairs with i + 4
    torch.testing.assert_close(apply_rotary(x, half)[..., to_inter], apply_rotary(x[..., to_inter], inter))
    with pytest.raises(ValueError, match="rotary position embeddings need self-attention"):
        make()(rand(2, 5, E), rand(2, 5, E, seed=2), rotary=half)


# -------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "args, message",
    [
        ((0, 4), "embed_dim must be a positive integer, got 0"),
        ((32, -1), "num_heads must be a positive integer, got -1"),
        ((32, 4, 0), "num_kv_heads must be a positive integer, got 0"),
        ((30, 4), r"embed_dim \(30\) must be divisible by num_heads \(4\)"),
        ((32, 8, 3), r"num_heads \(8\) must be divisible by num_kv_heads \(3\)"),
    ],
)
def test_constructor_validation(args, message):
    with pytest.raises(ValueError, match=message):
        MultiheadAttention(*args)


def test_constructor_rejects_bad_dropout_and_path():
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\), got 1.5"):
        MultiheadAttention(E, H, dropout=1.5)
    with pytest.raises(ValueError, match="path must be one of .*'fast'"):
        MultiheadAttention(E, H, path="fast")


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda m: m("text"), "query must be a tensor, got str"),
        (lambda m: m(rand(5, E)), r"query must be 3-D \(batch, sequence, embed_dim\), got shape \(5, 32\)"),
        (lambda m: m(rand(2, 5, E), rand(2, 5, E, 1)), r"key must be 3-D .* got shape \(2, 5, 32, 1\)"),
        (lambda m: m(rand(2, 5, 16)), r"query last dimension must equal embed_dim \(32\), got shape \(2, 5, 16\)"),
        (lambda m: m(rand(2, 5, E), rand(2, 5, E), rand(2, 5, 8)), r"value last dimension must equal embed_dim \(32\)"),
        (lambda m: m(rand(2, 5, E), rand(3, 5, E)), "must share the batch size, got 2, 3 and 3"),
        (lambda m: m(rand(2, 5, E), rand(2, 6, E), rand(2, 7, E)), "key and value must have the same length, got 6 and 7"),
        (lambda m: m(rand(2, 5, E), rand(2, 6, E), causal=True), "causal=True needs query and key of the same length, got 5 and 6"),
        (lambda m: m(rand(2, 5, E), attn_mask=torch.ones(5, 4, dtype=torch.bool)),
         r"attn_mask of shape \(5, 4\) does not broadcast to \(batch, heads, query_len, key_len\) = \(2, 8, 5, 5\)"),
        (lambda m: m(rand(2, 5, E), attn_mask=torch.ones(3, 1, 5, 5, dtype=torch.bool)), r"attn_mask of shape \(3, 1, 5, 5\)"),
        (lambda m: m(rand(2, 5, E), attn_mask=torch.ones(4, 5, 5, dtype=torch.bool)),
         r"a 3-D attn_mask must be \(batch \* heads, query_len, key_len\) = \(16, 5, 5\)"),
        (lambda m: m(rand(2, 5, E), attn_mask=torch.ones(5, 5, dtype=torch.long)),
         "attn_mask must be a bool or floating-point tensor, got torch.int64"),
        (lambda m: m(rand(2, 5, E), key_padding_mask=torch.ones(2, 4, dtype=torch.bool)),
         r"key_padding_mask must have shape \(batch, key_len\) = \(2, 5\), got \(2, 4\)"),
        (lambda m: m(rand(2, 5, E), attend_mask=torch.ones(2, 5, 5, 5, dtype=torch.bool)), r"attend_mask of shape \(2, 5, 5, 5\)"),
        (lambda m: m(rand(2, 5, E), path="flash"), "path must be one of .*'flash'"),
    ],
)
def test_forward_validation(call, message):
    with pytest.raises(ValueError, match=message):
        call(make())


# ------------------------------------------------------------ equivalences
@pytest.mark.parametrize("kv", [8, 4, 2, 1])
@pytest.mark.parametrize("path", ["sdpa", "math"])
def test_matches_independent_reference(kv, path):
    m = make(kv)
    q, kv_in = rand(2, 5, E), rand(2, 7, E, seed=2)
    torch.testing.assert_close(m(q, path=path), manual_attention(m, q, q))
    torch.testing.assert_close(m(q, kv_in, path=path), manual_attention(m, q, kv_in))


def test_mha_matches_torch_multihead_attention():
    m = make()
    ref = nn.MultiheadAttention(E, H, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(m.qkv_proj.weight)
        ref.in_proj_bias.copy_(m.qkv_proj.bias)
        ref.out_proj.load_state_dict(m.out_proj.state_dict())
    ref.eval()
    q, kv_in = rand(2, 5, E), rand(2, 7, E, seed=2)
    torch.testing.assert_close(m(q), ref(q, q, q, need_weights=False)[0])
    torch.testing.assert_close(m(q, kv_in), ref(q, kv_in, kv_in, need_weights=False)[0])
    # the keywords nn.MultiheadAttention has mean what they mean there: bool True = blocked
    pad = torch.tensor([[False] * 7, [False, False, False, True, True, True, True]])
    torch.testing.assert_close(m(q, kv_in, key_padding_mask=pad), ref(q, kv_in, kv_in, key_padding_mask=pad)[0])
    float_pad = torch.zeros(2, 7).masked_fill(pad, float("-inf"))
    torch.testing.assert_close(m(q, kv_in, key_padding_mask=float_pad), ref(q, kv_in, kv_in, key_padding_mask=pad)[0])
    blocked = rand(5, 7, seed=5) > 0.5
    blocked[:, 0] = False
    torch.testing.assert_close(m(q, kv_in, attn_mask=blocked), ref(q, kv_in, kv_in, attn_mask=blocked)[0])
    per_head = rand(2 * H, 5, 7, seed=6) > 0.5
    per_head[..., 0] = False
    torch.testing.assert_close(m(q, kv_in, attn_mask=per_head), ref(q, kv_in, kv_in, attn_mask=per_head)[0])
    torch.testing.assert_close(m(q, kv_in, attn_mask=blocked, key_padding_mask=pad),
                               ref(q, kv_in, kv_in, attn_mask=blocked, key_padding_mask=pad)[0])
    out, w = m(q, kv_in, need_weights=True)
    torch.testing.assert_close(w, ref(q, kv_in, kv_in)[1])
    torch.testing.assert_close(m(q, kv_in, need_weights=True, average_attn_weights=False)[1],
                               ref(q, kv_in, kv_in, average_attn_weights=False)[1])
    # SDPA's convention has its own keyword
    torch.testing.assert_close(m(q, kv_in, attend_mask=~blocked), m(q, kv_in, attn_mask=blocked))


def test_mha_matches_timm_attention():
    Attention = pytest.importorskip("timm.models.vision_transformer").Attention

    m = make()
    ref = Attention(E, num_heads=H, qkv_bias=True).eval()
    with torch.no_grad():
        ref.qkv.weight.copy_(m.qkv_proj.weight)
        ref.qkv.bias.copy_(m.qkv_proj.bias)
        ref.proj.load_state_dict(m.out_proj.state_dict())
    x = rand(2, 9, E)
    torch.testing.assert_close(m(x), ref(x))


@pytest.mark.parametrize("kv", [4, 2, 1])
def test_gqa_equals_mha_with_interleaved_kv_heads(kv):
    """GQA = MHA whose head h has the weights of KV head h // (H // KV) (HF repeat_kv)."""
    repeat_kv = pytest.importorskip("transformers.models.llama.modeling_llama").repeat_kv

    gqa = make(kv)
    mha = make(H, seed=5)
    D, group = E // H, H // kv

    def interleave(w):
        return repeat_kv(w.reshape(1, kv, D, -1), group).reshape(H * D, *w.shape[1:])

    def tile(w):
        return w.reshape(kv, D, -1).repeat(group, 1, 1).reshape(H * D, *w.shape[1:])

    def load(expand):
        (wq, wk, wv), (bq, bk, bv) = gqa.projection_weights()
        with torch.no_grad():
            mha.qkv_proj.weight.copy_(torch.cat([wq, expand(wk), expand(wv)]))
            mha.qkv_proj.bias.copy_(torch.cat([bq, expand(bk[:, None])[:, 0], expand(bv[:, None])[:, 0]]))
            mha.out_proj.load_state_dict(gqa.out_proj.state_dict())

    load(interleave)
    x = rand(3, 6, E)
    for path in ("sdpa", "math"):
        torch.testing.assert_close(gqa(x, causal=True, path=path), mha(x, causal=True, path=path))
    load(tile)  # tiling the KV heads (.repeat) instead of interleaving is a different model
    if kv > 1:
        assert (gqa(x) - mha(x)).abs().max() > 1e-3


def test_gqa_with_all_kv_heads_equals_mha_same_weights():
    a, b = make(None), make(H)
    b.load_state_dict(a.state_dict())
    x = rand(2, 5, E)
    torch.testing.assert_close(a(x), b(x), rtol=0, atol=0)
    torch.testing.assert_close(a(x), manual_attention(a, x, x))


def test_sdpa_functional_reference_with_gqa():
    m = make(2)
    x = rand(2, 6, E)
    (wq, wk, wv), (bq, bk, bv) = m.projection_weights()
    q = F.linear(x, wq, bq).view(2, 6, H, 4).transpose(1, 2)
    k = F.linear(x, wk, bk).view(2, 6, 2, 4).transpose(1, 2).repeat_interleave(4, dim=1)
    v = F.linear(x, wv, bv).view(2, 6, 2, 4).transpose(1, 2).repeat_interleave(4, dim=1)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(2, 6, E)
    torch.testing.assert_close(m(x, causal=True), m.out_proj(ref))


# -------------------------------------------------------------------- masks
@pytest.mark.parametrize("path", ["sdpa", "math"])
@pytest.mark.parametrize("kv", [8, 2])
def test_causal_masking_is_real(path, kv):
    m = make(kv)
    x = rand(2, 6, E)
    y = x.clone()
    y[:, 4] += 1.0
    a, b = m(x, causal=True, path=path), m(y, causal=True, path=path)
    torch.testing.assert_close(a[:, :4], b[:, :4], rtol=0, atol=1e-6)
    assert (a[:, 4:] - b[:, 4:]).abs().max() > 1e-3
    assert (m(x, path=path)[:, :4] - m(y, path=path)[:, :4]).abs().max() > 1e-3  # not causal: it leaks
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    torch.testing.assert_close(a, manual_attention(m, x, x, mask=causal))


@pytest.mark.parametrize("path", ["sdpa", "math"])
def test_key_padding_mask_ignores_padded_keys(path):
    m = make(2)
    q, kv_in = rand(2, 4, E), rand(2, 6, E, seed=2)
    padding = torch.tensor([[False] * 6, [False, False, False, False, True, True]])  # True = ignore
    changed = kv_in.clone()
    changed[1, 4:] = 100.0
    out = m(q, kv_in, key_padding_mask=padding, path=path)
    torch.testing.assert_close(out, m(q, changed, key_padding_mask=padding, path=path))
    torch.testing.assert_close(out[1:], m(q[1:], kv_in[1:, :4], path=path))
    torch.testing.assert_close(out[1:], manual_attention(m, q[1:], kv_in[1:, :4]))


@pytest.mark.parametrize("path", ["sdpa", "math"])
def test_bool_float_and_combined_masks_agree(path):
    m = make(4)
    x = rand(2, 5, E)
    allowed = rand(2, 1, 5, 5, seed=3) > -0.5
    allowed[..., 0] = True  # every query keeps a key
    additive = torch.zeros(2, 1, 5, 5).masked_fill(~allowed, float("-inf"))
    out = m(x, attend_mask=allowed, path=path)
    torch.testing.assert_close(out, m(x, attend_mask=additive, path=path))
    torch.testing.assert_close(out, m(x, attn_mask=~allowed, path=path))  # nn.MultiheadAttention's convention
    torch.testing.assert_close(out, m(x, attn_mask=additive, path=path))  # float: added either way
    pad = torch.tensor([[False] * 5, [False, False, False, True, False]])  # True = padding
    both = allowed & ~pad[:, None, None, :] & torch.ones(5, 5, dtype=torch.bool).tril()
    expected = m(x, attend_mask=both, path="math")
    torch.testing.assert_close(m(x, attend_mask=allowed, key_padding_mask=pad, causal=True, path=path), expected)
    torch.testing.assert_close(m(x, attn_mask=additive, key_padding_mask=pad, causal=True, path=path), expected)
    torch.testing.assert_close(m(x, attn_mask=~allowed, key_padding_mask=pad.float() * -1e9, causal=True, path=path),
                               expected)


def test_fully_masked_query_attends_to_nothing_on_every_path():
    m = make(2)
    x = rand(2, 5, E)
    pad = torch.tensor([[False] * 5, [True] * 5])
    for path in ("sdpa", "math"):
        out = m(x, key_padding_mask=pad, path=path)
        torch.testing.assert_close(out[1], m.out_proj.bias.expand(5, E))


# --------------------------------------------------------- single-key path
@pytest.mark.parametrize("kv", [8, 2, 1])
def test_single_key_has_weight_one_and_q_k_gradients_vanish(kv):
    m = make(kv, qk_norm=True)
    x = rand(3, 1, E)
    q = rand(3, 4, E, seed=2)  # several queries, one key
    out, w = m(x, need_weights=True, average_attn_weights=False)
    assert torch.equal(w, torch.ones(3, H, 1, 1))
    (wq, wk, wv), (bq, bk, bv) = m.projection_weights()
    v = m._expand_kv(F.linear(x, wv, bv).view(3, kv, 1, -1))
    torch.testing.assert_close(m(q, x), m.out_proj(v.reshape(3, 1, E)).expand(3, 4, E))
    m.train()
    m(q, x).square().sum().backward()
    for name, p in m.named_parameters():  # in the graph (DDP needs that)
        assert p.grad is not None, name
    # The softmax of one key is 1 whatever its logit, so q/k get no gradient in exact arithmetic;
    # SDPA's fused CPU backward (torch 2.15) leaves rounding residue (~3e-7 of v's gradient).
    # A weight that is not exactly one would give q/k gradients of v's order.
    v_grad = m.qkv_proj.weight.grad[E + kv * E // H:].abs().max()
    assert v_grad > 0
    assert m.qkv_proj.weight.grad[: E + kv * E // H].abs().max() <= 1e-5 * v_grad
    assert m.q_norm.weight.grad.abs().max() <= 1e-5 * v_grad


# -------------------------------------------------------------- gradients
@pytest.mark.parametrize("kv", [8, 2, 1])
@pytest.mark.parametrize("path", ["sdpa", "math"])
@pytest.mark.parametrize("cross", [False, True])
def test_gradients_reach_every_parameter(kv, path, cross):
    m = make(kv, qk_norm=True)
    q = rand(2, 5, E).requires_grad_()
    kv_in = rand(2, 7, E, seed=2).requires_grad_() if cross else None
    m(q, kv_in, causal=not cross, path=path).square().sum().backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert q.grad.abs().sum() > 0
    if cross:
        assert kv_in.grad.abs().sum() > 0


def test_need_weights_gradients_flow():
    m = make(2)
    out, w = m(rand(2, 5, E), need_weights=True)
    (out.sum() + w[..., 0].sum()).backward()
    assert all(p.grad.abs().sum() > 0 for p in m.parameters())


# ------------------------------------------------------ determinism, dropout
def test_same_seed_gives_identical_outputs():
    x = rand(2, 5, E)
    assert torch.equal(make(2, seed=7)(x), make(2, seed=7)(x))
    assert not torch.equal(make(2, seed=7)(x), make(2, seed=8)(x))


def test_dropout_only_in_training():
    m = make(2, dropout=0.5)
    x = rand(2, 5, E)
    m.eval()
    torch.testing.assert_close(m(x), m(x, path="math"))
    m.train()
    torch.manual_seed(0)
    assert not torch.allclose(m(x), m.eval()(x))
