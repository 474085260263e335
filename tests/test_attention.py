"""MultiheadAttention: shapes, validation, MHA/GQA/MQA equivalences, masks, paths, gradients."""

import pytest
import torch
import torch.nn.functional as F
from flops_fit.plugins.attention import MultiheadAttention
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
    q = m.q_proj(q_in.double()).view(B, Sq, m.num_heads, D)
    k = m.k_proj(kv_in.double()).view(B, Sk, m.num_kv_heads, D)
    v = m.v_proj(kv_in.double()).view(B, Sk, m.num_kv_heads, D)
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
    out, w = m(q, kv_in, need_weights=True)
    assert out.shape == (2, 5, E) and w.shape == (2, H, 5, 7)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, H, 5))
    assert m.k_proj.weight.shape == (kv * E // H, E) and m.v_proj.weight.shape == (kv * E // H, E)


def test_state_dict_keys_are_the_four_projections():
    keys = set(make(2).state_dict())
    assert keys == {f"{p}.{t}" for p in ("q_proj", "k_proj", "v_proj", "out_proj") for t in ("weight", "bias")}
    assert set(make(2, bias=False).state_dict()) == {f"{p}.weight" for p in ("q_proj", "k_proj", "v_proj", "out_proj")}


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
        (lambda m: m(rand(2, 5, E), attn_mask=torch.ones(5, 5, dtype=torch.long)), "attn_mask must be bool or floating point, got torch.int64"),
        (lambda m: m(rand(2, 5, E), key_padding_mask=torch.ones(2, 4, dtype=torch.bool)),
         r"key_padding_mask must be bool of shape \(batch, key_len\) = \(2, 5\), got torch.bool of shape \(2, 4\)"),
        (lambda m: m(rand(2, 5, E), key_padding_mask=torch.ones(2, 5)), "key_padding_mask must be bool .* got torch.float32"),
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
        ref.in_proj_weight.copy_(torch.cat([m.q_proj.weight, m.k_proj.weight, m.v_proj.weight]))
        ref.in_proj_bias.copy_(torch.cat([m.q_proj.bias, m.k_proj.bias, m.v_proj.bias]))
        ref.out_proj.load_state_dict(m.out_proj.state_dict())
    ref.eval()
    q, kv_in = rand(2, 5, E), rand(2, 7, E, seed=2)
    torch.testing.assert_close(m(q), ref(q, q, q, need_weights=False)[0])
    torch.testing.assert_close(m(q, kv_in), ref(q, kv_in, kv_in, need_weights=False)[0])
    pad = torch.tensor([[True] * 7, [True, True, True, False, False, False, False]])
    torch.testing.assert_close(m(q, kv_in, key_padding_mask=pad), ref(q, kv_in, kv_in, key_padding_mask=~pad)[0])
    out, w = m(q, kv_in, need_weights=True)
    torch.testing.assert_close(w.mean(1), ref(q, kv_in, kv_in)[1])
    torch.testing.assert_close(w, ref(q, kv_in, kv_in, average_attn_weights=False)[1])


def test_mha_matches_timm_attention():
    from timm.models.vision_transformer import Attention

    m = make()
    ref = Attention(E, num_heads=H, qkv_bias=True).eval()
    with torch.no_grad():
        ref.qkv.weight.copy_(torch.cat([m.q_proj.weight, m.k_proj.weight, m.v_proj.weight]))
        ref.qkv.bias.copy_(torch.cat([m.q_proj.bias, m.k_proj.bias, m.v_proj.bias]))
        ref.proj.load_state_dict(m.out_proj.state_dict())
    x = rand(2, 9, E)
    torch.testing.assert_close(m(x), ref(x))


@pytest.mark.parametrize("kv", [4, 2, 1])
def test_gqa_equals_mha_with_interleaved_kv_heads(kv):
    """GQA = MHA whose head h has the weights of KV head h // (H // KV) (HF repeat_kv)."""
    from transformers.models.llama.modeling_llama import repeat_kv

    gqa = make(kv)
    mha = make(H, seed=5)
    D, group = E // H, H // kv

    def interleave(w):
        return repeat_kv(w.reshape(1, kv, D, -1), group).reshape(H * D, *w.shape[1:])

    with torch.no_grad():
        mha.q_proj.load_state_dict(gqa.q_proj.state_dict())
        mha.out_proj.load_state_dict(gqa.out_proj.state_dict())
        for name in ("k_proj", "v_proj"):
            getattr(mha, name).weight.copy_(interleave(getattr(gqa, name).weight))
            getattr(mha, name).bias.copy_(interleave(getattr(gqa, name).bias[:, None])[:, 0])
    x = rand(3, 6, E)
    for path in ("sdpa", "math"):
        torch.testing.assert_close(gqa(x, causal=True, path=path), mha(x, causal=True, path=path))
    # Tiling the KV heads (.repeat) instead of interleaving is a different model.
    with torch.no_grad():
        for name in ("k_proj", "v_proj"):
            w = getattr(gqa, name).weight
            getattr(mha, name).weight.copy_(w.reshape(kv, D, E).repeat(group, 1, 1).reshape(H * D, E))
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
    q = m.q_proj(x).view(2, 6, H, 4).transpose(1, 2)
    k = m.k_proj(x).view(2, 6, 2, 4).transpose(1, 2).repeat_interleave(4, dim=1)
    v = m.v_proj(x).view(2, 6, 2, 4).transpose(1, 2).repeat_interleave(4, dim=1)
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
    keep = torch.tensor([[True] * 6, [True, True, True, True, False, False]])
    changed = kv_in.clone()
    changed[1, 4:] = 100.0
    out = m(q, kv_in, key_padding_mask=keep, path=path)
    torch.testing.assert_close(out, m(q, changed, key_padding_mask=keep, path=path))
    torch.testing.assert_close(out[1:], m(q[1:], kv_in[1:, :4], path=path))
    torch.testing.assert_close(out[1:], manual_attention(m, q[1:], kv_in[1:, :4]))


@pytest.mark.parametrize("path", ["sdpa", "math"])
def test_bool_float_and_combined_masks_agree(path):
    m = make(4)
    x = rand(2, 5, E)
    allowed = rand(2, 1, 5, 5, seed=3) > -0.5
    allowed[..., 0] = True  # every query keeps a key
    additive = torch.zeros(2, 1, 5, 5).masked_fill(~allowed, float("-inf"))
    out = m(x, attn_mask=allowed, path=path)
    torch.testing.assert_close(out, m(x, attn_mask=additive, path=path))
    pad = torch.tensor([[True] * 5, [True, True, True, False, True]])
    both = allowed & pad[:, None, None, :] & torch.ones(5, 5, dtype=torch.bool).tril()
    expected = m(x, attn_mask=both, path="math")
    torch.testing.assert_close(m(x, attn_mask=allowed, key_padding_mask=pad, causal=True, path=path), expected)
    torch.testing.assert_close(m(x, attn_mask=additive, key_padding_mask=pad, causal=True, path=path), expected)


def test_fully_masked_query_attends_to_nothing_on_every_path():
    m = make(2)
    x = rand(2, 5, E)
    pad = torch.tensor([[True] * 5, [False] * 5])
    for path in ("sdpa", "math"):
        out = m(x, key_padding_mask=pad, path=path)
        torch.testing.assert_close(out[1], m.out_proj.bias.expand(5, E))


# --------------------------------------------------------- single-key path
@pytest.mark.parametrize("kv", [8, 2, 1])
def test_single_token_path_equals_general_path(kv):
    m = make(kv)
    x = rand(3, 1, E)
    keep = torch.ones(3, 1, dtype=torch.bool)  # a mask sends it down the general path
    for path in ("sdpa", "math"):
        torch.testing.assert_close(m(x, causal=True, path=path), m(x, key_padding_mask=keep, path=path))
    q = rand(3, 4, E, seed=2)  # several queries, one key
    torch.testing.assert_close(m(q, x), m(q, x, key_padding_mask=keep))
    out, w = m(x, need_weights=True)
    assert torch.equal(w, torch.ones(3, H, 1, 1))

    grads = []
    for kwargs in ({}, {"key_padding_mask": keep}):
        m.zero_grad(set_to_none=True)
        m(q, x, **kwargs).square().sum().backward()
        grads.append({n: torch.zeros_like(p) if p.grad is None else p.grad for n, p in m.named_parameters()})
    for name in grads[0]:  # one key: q/k gradients are exactly zero on every path
        torch.testing.assert_close(grads[0][name], grads[1][name], atol=1e-5, rtol=1e-4)
        assert (grads[0][name].abs().sum() > 0) == name.startswith(("v_proj", "out_proj")), name


# -------------------------------------------------------------- gradients
@pytest.mark.parametrize("kv", [8, 2, 1])
@pytest.mark.parametrize("path", ["sdpa", "math"])
@pytest.mark.parametrize("cross", [False, True])
def test_gradients_reach_every_parameter(kv, path, cross):
    m = make(kv)
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
