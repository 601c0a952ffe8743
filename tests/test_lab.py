"""The normalization lab against docs/spec.md §13: lns, mixln, reorder, hybrid, ngpt and the
switches embed_norm and norm_type='dyt', one test per property (named after §13's L, M, E, R, H, D
and N items), on both block families; and each scheme written again from its authors' equations,
giving model.py's logits."""
import math

import pytest
import torch
import torch.nn.functional as F

import model as M
from conftest import (batch, biased, block_outputs, build, count_params, randomize, rope_rows,
                      spread, tiny)
from model import ARCHS, GPT, GPTConfig, RMSNorm


def standardized(t, arch, tol=1e-6):
    """Per token: mean 0 (LayerNorm; RMSNorm does not center) and spread 1 (std or RMS)."""
    return (arch == "llama" or t.mean(-1).abs().max() < tol) \
        and (spread(t, arch) - 1).abs().max() < tol


# ------------------------------------------------------------ the authors' equations, written again

def reference_logits(model, idx):
    """Every position's logits from model's parameters by the authors' equations (§13), in torch's
    functions: none of model.py's modules or helpers. Blocks are 1-based (k), as §13 writes
    them."""
    # a tied head under both names
    c, P = model.config, dict(model.named_parameters(remove_duplicate=False))
    get = lambda name: P.get(name)
    d, L, nh, T, llama = c.n_embd, c.n_layer, c.n_head, idx.size(1), c.arch == "llama"
    hs, eps = d // nh, 1e-5 if c.norm_eps is None else c.norm_eps

    def rms(x, w, e):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + e) * w

    # the family's norm, or DyT: γ tanh(αx) (+ β)  (DyT dynamic_tanh.py, fms llama.py)
    def N(x, name):
        w, b = get(name + ".weight"), get(name + ".bias")
        if c.norm_type == "dyt":
            y = w * torch.tanh(get(name + ".alpha") * x)
        else:
            y = rms(x, w, eps) if llama else F.layer_norm(x, (d,), None, None, eps) * w
        return y if b is None else y + b

    def unit(x):  # nGPT's justnorm
        return x / x.norm(dim=-1, keepdim=True)

    def rotate(x):  # RoFormer Eq. 34: pair (x_2i, x_2i+1) at position p turned by p·θ^(-2i/hs)
        angles = torch.outer(torch.arange(T, dtype=torch.float64),
                             c.rope_theta ** (-torch.arange(0, hs, 2, dtype=torch.float64) / hs))
        # model.py's table is fp32
        cos, sin = (t.float().double() for t in (angles.cos(), angles.sin()))
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)

    def linear(h, name):
        return h @ get(name + ".weight").T + \
            (0 if get(name + ".bias") is None else get(name + ".bias"))

    def attn(h, p):
        kv = (get(p + "c_attn.weight").size(0) - d) // 2
        q, k, v = linear(h, p + "c_attn").split((d, kv, kv), -1)
        if c.qk_norm:  # over all heads jointly
            q, k = rms(q, get(p + "q_norm.weight"), eps), rms(k, get(p + "k_norm.weight"), eps)
        # (B, heads, T, hs)
        q, k, v = (t.unflatten(-1, (-1, hs)).transpose(1, 2) for t in (q, k, v))
        # HybridNorm: RMSNorm on each head's q, k, v, gains (hs,); ε by §13.4
        if c.norm_mode == "hybrid":
            e = eps if c.norm_eps is not None else 1e-6 if c.tied else 1e-5
            q, k, v = (rms(t, get(p + n + "_norm.weight"), e)
                       for t, n in ((q, "q"), (k, "k"), (v, "v")))
        if llama:
            q, k = rotate(q), rotate(k)
        # nGPT: sqk ⊙ justnorm per head after rotary; softmax scale √hs
        if c.norm_mode == "ngpt":
            s_qk = (get(p + "s_qk") * d ** 0.5).view(nh, 1, hs)
            q, k = s_qk * unit(q), s_qk * unit(k)
        k, v = (t.repeat_interleave(nh // t.size(1), 1) for t in (k, v))
        scores = q @ k.transpose(-1, -2) * (hs ** 0.5 if c.norm_mode == "ngpt" else hs ** -0.5)
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        y = (scores.softmax(-1) @ v).transpose(1, 2).flatten(-2)
        return linear(y, p + "c_proj")

    def mlp(h, p):
        a = linear(h, p + "c_fc")
        if c.norm_mode == "ngpt":  # nGPT: suv·√d on W₁h (the SiLU half) and W₃h
            a = a * get(p + "s_v") * d ** 0.5
        if not llama:
            return linear(F.gelu(a), p + "c_proj")
        u = linear(h, p + "c_up") * (get(p + "s_u") * d ** 0.5 if c.norm_mode == "ngpt" else 1)
        return linear(F.silu(a) * u, p + "c_proj")

    x = get("transformer.wte.weight")[idx]
    if not llama:
        x = x + get("transformer.wpe.weight")[:T]
    if c.norm_type == "dyt":  # DyT's fms llama: x_0 = s·E[t]
        x = get("transformer.emb_scale") * x
    if c.embed_norm:  # Peri-LN, OLMo-core's embedding_norm
        x = N(x, "transformer.ln_emb")
    if c.norm_mode == "ngpt":
        x = unit(x)
    n_post = math.floor(c.mixln_alpha * L + 1e-9)
    for k in range(1, L + 1):
        p = f"transformer.h.{k - 1}."
        A, Mlp = (lambda h: attn(h, p + "attn.")), (lambda h: mlp(h, p + "mlp."))
        n1, n2, o1, o2 = (lambda h, n=n: N(h, p + n)
                          for n in ("ln_1", "ln_2", "ln_1_out", "ln_2_out"))
        if c.norm_mode == "lns":  # LNS modeling_llama.py: norm output × 1/√(layer_index + 1)
            h = x + A(n1(x) / math.sqrt(k))
            x = h + Mlp(n2(h) / math.sqrt(k))
        # MixLN modeling_llama.py, post_pre: post blocks first
        elif c.norm_mode == "mixln" and k <= n_post:
            h = n1(x + A(x))
            x = n2(h + Mlp(h))
        elif (c.norm_mode in ("pre", "mixln")
              or c.norm_mode == "hybrid" and c.hybrid_star and k == 1):
            h = x + A(n1(x))
            x = h + Mlp(n2(h))
        elif c.norm_mode == "sandwich":  # OLMo-core PeriNormTransformerBlock
            h = x + o1(A(n1(x)))
            x = h + o2(Mlp(n2(h)))
        elif c.norm_mode == "reorder":  # OLMo-core ReorderedNormTransformerBlock
            h = x + o1(A(x))
            x = h + o2(Mlp(h))
        elif c.norm_mode == "hybrid":  # HybridNorm model.py: attn_norm off; ffn_residual_after_norm
            h = x + A(x)
            z = n2(h)
            x = z + Mlp(z)
        elif c.norm_mode == "ngpt":  # NVIDIA/ngpt model.py Block.forward
            for f, alpha in ((A, get(p + "alpha_attn")), (Mlp, get(p + "alpha_mlp"))):
                lr = (alpha * (0.05 / d ** -0.5)).abs()
                x = unit(unit(x) + lr * (unit(f(x)) - unit(x)))
    if c.norm_mode != "ngpt" and not (c.norm_mode == "mixln" and n_post == L):
        x = N(x, "transformer.ln_f")
    logits = x @ get("lm_head.weight").T
    return logits * get("s_z") * d ** 0.5 if c.norm_mode == "ngpt" else logits


SCHEMES = {  # the settings of each scheme: 4 blocks, so that mixln has post and pre blocks
    "lns": dict(norm_mode="lns"), "mixln": dict(norm_mode="mixln", mixln_alpha=0.5),
    "mixln_all_post": dict(norm_mode="mixln", mixln_alpha=1.0),
    "reorder": dict(norm_mode="reorder"),
    "reorder_qk": dict(norm_mode="reorder", qk_norm=True), "hybrid": dict(norm_mode="hybrid"),
    "hybrid_star": dict(norm_mode="hybrid", hybrid_star=True), "ngpt": dict(norm_mode="ngpt"),
    "peri": dict(norm_mode="sandwich", embed_norm=True),
    "dyt": dict(norm_mode="pre", norm_type="dyt"),
    "dyt_sandwich": dict(norm_mode="sandwich", norm_type="dyt", embed_norm=True),
}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_each_scheme_is_its_authors_equations_on_random_weights(scheme, arch):
    settings = dict(SCHEMES[scheme])
    mode = settings.pop("norm_mode")
    model = randomize(build(mode, n_layer=4, arch=arch, bias=biased(mode, arch),
                            **settings)).double()
    idx = batch(model.config, T=12)[0]
    logits, expected = model(idx, all_logits=True)[0], reference_logits(model, idx)
    torch.testing.assert_close(logits, expected, rtol=1e-9, atol=1e-9)
    # and their gradients: a term cut from the graph (a detach, a no_grad) leaves the logits right,
    # training wrong
    weights, params = torch.randn_like(logits), list(model.parameters())
    for got, want in zip(torch.autograd.grad((logits * weights).sum(), params),
                         torch.autograd.grad((expected * weights).sum(), params)):
        # sums of many terms
        torch.testing.assert_close(got, want, rtol=0, atol=1e-7 * want.abs().max().item())


# ---------------------------------------------------------------- §13.1 lns

def test_lns_L1_scales_are_one_over_root_k_and_block_1_is_a_pre_block():
    model, pre = build("lns", n_layer=4), build("pre", n_layer=4)
    assert [b.lns_scale for b in model.transformer.h] == \
        pytest.approx([1, 0.70711, 0.57735, 0.5], abs=1e-5)
    pre.load_state_dict(model.state_dict())
    x = torch.randn(2, 8, 64)
    with torch.no_grad():
        assert torch.equal(model.transformer.h[0](x), pre.transformer.h[0](x))


@pytest.mark.parametrize("arch", ARCHS)
def test_lns_L2_logits_are_pres_with_block_k_norms_scaled_by_one_over_root_k(arch):
    model = randomize(build("lns", n_layer=4, arch=arch, bias=arch == "gpt2")).double()
    pre = build("pre", n_layer=4, arch=arch, bias=arch == "gpt2").double()
    state = model.state_dict()
    for name in state:
        if ".ln_1." in name or ".ln_2." in name:
            state[name] = state[name] / math.sqrt(int(name.split(".")[2]) + 1)
    pre.load_state_dict(state)
    idx = batch(model.config, T=12)[0]
    with torch.no_grad():
        assert (model(idx, all_logits=True)[0] - pre(idx, all_logits=True)[0]).abs().max() < 1e-12


@pytest.mark.parametrize("arch", ARCHS)
def test_lns_L3_with_qk_norm_the_attention_branch_is_pres_over_root_k(arch):
    """qk_norm re-normalizes q and k, so only v (and, through W_o, the branch) feels the factor
    1/√k."""
    lns = build("lns", n_layer=4, arch=arch, qk_norm=True, norm_eps=1e-12).double()
    pre = build("pre", n_layer=4, arch=arch, qk_norm=True, norm_eps=1e-12).double()
    pre.load_state_dict(lns.state_dict())
    x, rope = torch.randn(2, 8, 64, dtype=torch.float64), rope_rows(lns, 8)
    with torch.no_grad():
        for k, (a, b) in enumerate(zip(lns.transformer.h, pre.transformer.h), 1):
            attn_lns = a.join(x, lambda h: a.attn(h, 0, rope), a.ln_1, a.ln_1_out, None, 0) - x
            attn_pre = b.join(x, lambda h: b.attn(h, 0, rope), b.ln_1, b.ln_1_out, None, 0) - x
            assert torch.allclose(attn_lns, attn_pre / math.sqrt(k), atol=1e-10), k


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("scaled_init", [False, True])
def test_lns_L4_init_stds(scaled_init, arch):
    """W_o, W₂ (and llama's W₃) N(0, 0.02) as the LNS authors recommend; lns_scaled_init keeps
    the family's depth-scaled init (GPT-2's 0.02/√(2L), torchtitan's 0.02/√(2(l+1)))."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(norm_mode="lns", arch=arch, n_layer=4, n_head=4, n_embd=256,
                          block_size=16, vocab_size=256, lns_scaled_init=scaled_init))
    for l, block in enumerate(model.transformer.h):
        depth = 0.02 / math.sqrt(2 * 4) if arch == "gpt2" else 0.02 / math.sqrt(2 * (l + 1))
        for w in filter(None, (block.attn.c_proj, block.mlp.c_proj, block.mlp.c_up)):
            assert abs(w.weight.std().item() / (depth if scaled_init else 0.02) - 1) < 0.05, l
        assert abs(block.mlp.c_fc.weight.std().item() / 0.02 - 1) < 0.05


def test_lns_L5_param_count_equals_pre():
    assert count_params("lns") == count_params("pre")


# ---------------------------------------------------------------- §13.2 mixln

@pytest.mark.parametrize("L, alpha, n_post", [(12, 0.25, 3), (24, 0.25, 6), (6, 0.25, 1),
                                              (4, 0.25, 1), (10, 0.3, 3), (8, 0.0, 0), (8, 1.0, 8)])
def test_mixln_M1_the_first_floor_alpha_L_blocks_are_post(L, alpha, n_post):
    with torch.device("meta"):
        model = GPT(GPTConfig(norm_mode="mixln", n_layer=L, n_head=2, n_embd=16, mixln_alpha=alpha))
    assert [b.mode for b in model.transformer.h] == ["post"] * n_post + ["pre"] * (L - n_post)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("alpha, same", [(0.0, "pre"), (1.0, "post")])
def test_mixln_M2_alpha_0_is_pre_and_alpha_1_is_post(alpha, same, arch):
    mixln, other = build("mixln", mixln_alpha=alpha, arch=arch), build(same, arch=arch, seed=1)
    other.load_state_dict(mixln.state_dict())
    idx = batch(mixln.config)[0]
    with torch.no_grad():
        assert torch.equal(mixln(idx, all_logits=True)[0], other(idx, all_logits=True)[0])


@pytest.mark.parametrize("arch", ARCHS)
def test_mixln_M3_post_blocks_standardize_and_pre_blocks_add_their_branches(arch):
    model = randomize(build("mixln", n_layer=4, mixln_alpha=0.5, arch=arch, norm_eps=0.0)).double()
    # unit gains and zero biases, so that a post block's output is standard
    for block in model.transformer.h:
        for norm in (block.ln_1, block.ln_2):
            torch.nn.init.ones_(norm.weight)
    x, rope = torch.randn(2, 8, 64, dtype=torch.float64), rope_rows(model, 8)
    with torch.no_grad():
        for k, block in enumerate(model.transformer.h, 1):
            y = block(x, 0, rope)
            if k <= 2:
                assert standardized(y, arch, 1e-9), k
            else:
                h = x + block.attn(block.ln_1(x), 0, rope)
                assert torch.allclose(y, h + block.mlp(block.ln_2(h)), atol=1e-12), k
            x = y


@pytest.mark.parametrize("alpha, final", [(0.25, True), (0.99, True), (1.0, False)])
def test_mixln_M4_final_norm_unless_every_block_is_post(alpha, final):
    model = build("mixln", n_layer=4, mixln_alpha=alpha)
    assert isinstance(model.transformer.ln_f, torch.nn.LayerNorm) == final


def test_mixln_M5_param_count_equals_pre():
    assert count_params("mixln") == count_params("pre")


# ---------------------------------------------------------- §13.3 embed_norm (Peri-LN) and reorder

@pytest.mark.parametrize("arch", ARCHS)
def test_embed_norm_E1_at_unit_gain_is_sandwich_on_a_normalized_x0(arch):
    peri = randomize(build("sandwich", embed_norm=True, arch=arch)).double()
    sandwich = build("sandwich", arch=arch).double()
    sandwich.load_state_dict({k: v for k, v in peri.state_dict().items() if "ln_emb" not in k})
    idx = batch(peri.config)[0]
    with torch.no_grad():
        x = peri.transformer.ln_emb(sandwich.embed(idx))
        for block in sandwich.transformer.h:
            x = block(x, 0, rope_rows(sandwich, idx.size(1)))
        want = sandwich.lm_head(sandwich.transformer.ln_f(x))
        assert torch.allclose(peri(idx, all_logits=True)[0], want, atol=1e-12)


@pytest.mark.parametrize("arch", ARCHS)
def test_embed_norm_E2_x0_is_standardized_per_token(arch):
    # gpt2's E + P: variance 8e-4 ~ ε
    model = build("sandwich", embed_norm=True, arch=arch, norm_eps=1e-12)
    assert standardized(model.embed(batch(model.config)[0]), arch, 1e-4)  # gpt2: after adding P


@pytest.mark.parametrize("bias, extra", [(False, 768), (True, 2 * 768)])
def test_embed_norm_E3_param_count_adds_one_norm(bias, extra):
    assert count_params("sandwich", embed_norm=True, bias=bias) == \
        count_params("sandwich", bias=bias) + extra


@pytest.mark.parametrize("arch", ARCHS)
def test_reorder_R1_every_increment_is_standardized(arch):
    """ε → 0: block 1's attention output is ~1e-8 in mean square at gpt2's init, below any ε
    (§13.3)."""
    model = build("reorder", arch=arch, norm_eps=1e-24).double()
    x, rope = model.embed(batch(model.config)[0]), rope_rows(model, 32)
    with torch.no_grad():
        for block in model.transformer.h:
            h = block.join(x, lambda t: block.attn(t, 0, rope), block.ln_1, block.ln_1_out, None, 0)
            y = block(x, 0, rope)
            assert standardized(h - x, arch, 1e-6) and standardized(y - h, arch, 1e-6)
            x = y


@pytest.mark.parametrize("arch", ARCHS)
def test_reorder_R2_attention_reads_the_raw_stream(arch):
    model = randomize(build("reorder", arch=arch))
    x, rope = model.embed(batch(model.config)[0]), rope_rows(model, 32)
    block = model.transformer.h[0]
    with torch.no_grad():
        h = x + block.ln_1_out(block.attn(x, 0, rope))
        assert torch.allclose(block(x, 0, rope), h + block.ln_2_out(block.mlp(h)), atol=1e-5)


def test_reorder_R3_R4_no_norms_before_the_sub_layers_and_pres_param_count():
    model = build("reorder")
    assert not any(".ln_1." in n or ".ln_2." in n for n, _ in model.named_parameters())
    assert count_params("reorder") == count_params("pre")


# ---------------------------------------------------------------- §13.4 hybrid

@pytest.mark.parametrize("arch", ARCHS)
def test_hybrid_H1_the_attention_branch_is_scale_invariant(arch):
    model = randomize(build("hybrid", arch=arch, norm_eps=1e-12)).double()
    attn, rope = model.transformer.h[1].attn, rope_rows(model, 16)
    x = torch.randn(2, 16, 64, dtype=torch.float64)
    with torch.no_grad():
        for c in (0.1, 7.0):
            assert torch.allclose(attn(c * x, 0, rope), attn(x, 0, rope), atol=1e-9)


@pytest.mark.parametrize("arch", ARCHS)
def test_hybrid_H2_each_block_is_attention_then_a_norm_on_the_residual_then_the_mlp(arch):
    model = build("hybrid", arch=arch, norm_eps=0.0).double()
    x, rope = model.embed(batch(model.config)[0]), rope_rows(model, 32)
    with torch.no_grad():
        for block in model.transformer.h:
            h = x + block.attn(x, 0, rope)
            z = block.ln_2(h)
            assert standardized(z, arch, 1e-9)
            x, y = block(x, 0, rope), z + block.mlp(z)
            assert torch.allclose(x, y, atol=1e-12)


@pytest.mark.parametrize("arch", ARCHS)
def test_hybrid_H3_star_makes_block_1_a_pre_block_keeping_its_qkv_norm(arch):
    star = randomize(build("hybrid", hybrid_star=True, arch=arch))
    plain = build("hybrid", arch=arch)
    plain.load_state_dict({k: v for k, v in star.state_dict().items() if ".0.ln_1." not in k})
    x, rope = torch.randn(2, 8, 64), rope_rows(star, 8)
    with torch.no_grad():
        first = star.transformer.h[0]
        h = x + first.attn(first.ln_1(x), 0, rope)
        assert torch.allclose(first(x, 0, rope), h + first.mlp(first.ln_2(h)), atol=1e-6)
        for a, b in zip(star.transformer.h[1:], plain.transformer.h[1:]):
            assert torch.equal(a(x, 0, rope), b(x, 0, rope))


def test_hybrid_H4_per_head_gains_and_no_ln_1():
    model, star = build("hybrid", n_kv_head=2), build("hybrid", hybrid_star=True)
    attn = model.transformer.h[0].attn
    assert attn.q_norm.weight.shape == attn.k_norm.weight.shape == attn.v_norm.weight.shape == (16,)
    assert not any(".ln_1." in n for n, _ in model.named_parameters())
    assert [n for n, _ in star.named_parameters() if ".ln_1." in n] == \
        ["transformer.h.0.ln_1.weight"]


@pytest.mark.parametrize("bias", [False, True])
def test_hybrid_H5_param_count(bias):
    L, d, hs = 12, 768, 64
    pre = count_params("pre", bias=bias)
    assert count_params("hybrid", bias=bias) == pre - L * d * (1 + bias) + 3 * L * hs
    star = count_params("hybrid", bias=bias, hybrid_star=True)
    assert star == count_params("hybrid", bias=bias) + d * (1 + bias)


# ---------------------------------------------------------------- §13.5 norm_type='dyt'

def test_dyt_D1_is_gamma_tanh_alpha_x_plus_beta_and_bounded():
    dyt = M.DyT(64, 0.7, bias=True)
    with torch.no_grad():
        dyt.weight.uniform_(-2, 2)
        dyt.bias.normal_()
    x = torch.randn(4, 64) * 10
    y = dyt(x)
    assert torch.equal(y, dyt.weight * torch.tanh(dyt.alpha * x) + dyt.bias)
    assert ((y - dyt.bias).abs() <= dyt.weight.abs() + 1e-6).all()


@pytest.mark.parametrize("arch", ARCHS)
def test_dyt_D2_alpha_per_role_and_the_embedding_scale(arch):
    model = build("sandwich", norm_type="dyt", embed_norm=True, arch=arch, n_embd=256,
                  dyt_alpha_attn=0.9, dyt_alpha_ffn=0.3, dyt_alpha_final=0.1)
    block, t = model.transformer.h[0], model.transformer
    assert block.ln_1.alpha.item() == pytest.approx(0.9)
    ffn = (block.ln_2, block.ln_1_out, block.ln_2_out, t.ln_emb)
    assert [n.alpha.item() for n in ffn] == pytest.approx([0.3] * 4)
    assert t.ln_f.alpha.item() == pytest.approx(0.1)
    assert t.emb_scale.item() == pytest.approx(16.0 if arch == "gpt2" else 0.32)  # √d·0.02/σ_E


@pytest.mark.parametrize("arch", ARCHS)
def test_dyt_D3_x0_is_s_times_the_embedding_and_blocks_are_pre_with_dyt(arch):
    model = randomize(build("pre", norm_type="dyt", arch=arch, bias=arch == "gpt2"))
    idx, rope = batch(model.config)[0], rope_rows(model, 32)
    t = model.transformer
    e = t.wte(idx) + (t.wpe.weight if arch == "gpt2" else 0)
    with torch.no_grad():
        x = model.embed(idx)
        assert torch.allclose(x, t.emb_scale * e)
        for block in t.h:
            dyt = lambda h, n: n.weight * torch.tanh(n.alpha * h) + \
                (0 if n.bias is None else n.bias)
            h = x + block.attn(dyt(x, block.ln_1), 0, rope)
            y = h + block.mlp(dyt(h, block.ln_2))
            assert torch.allclose(block(x, 0, rope), y, atol=1e-5)
            x = y


def test_dyt_D4_param_count_adds_one_alpha_per_norm_and_s():
    assert count_params("pre", norm_type="dyt") == count_params("pre") + 2 * 12 + 2


@pytest.mark.parametrize("mode", ["post", "deep", "mixln", "simplenorm", "ngpt"])
def test_dyt_D5_placements_it_does_not_fit_are_a_one_line_error(mode):
    with pytest.raises(ValueError,
                       match=f"norm_type='dyt' does not fit norm_mode='{mode}'") as info:
        tiny(mode, norm_type="dyt")
    assert "\n" not in str(info.value)


def test_dyt_D6_qk_norm_stays_rmsnorm():
    attn = build("pre", norm_type="dyt", qk_norm=True).transformer.h[0].attn
    assert isinstance(attn.q_norm, RMSNorm) and isinstance(attn.k_norm, RMSNorm)


# ---------------------------------------------------------------- §13.6 ngpt

def hidden_states(model, idx):
    """x_0, and the stream after each sub-layer of every block."""
    states = [model.embed(idx)]
    rope = rope_rows(model, idx.size(1))
    for block in model.transformer.h:
        states.append(block.join(states[-1], lambda h: block.attn(h, 0, rope), None, None,
                                 block.alpha_attn, 0))
        states.append(block.join(states[-1], block.mlp, None, None, block.alpha_mlp, 1))
    return states


def projected(model):
    """(matrix, its d axis) of §13.6's table: the rows of E, P, the head, c_attn, c_fc, c_up; the
    columns of both c_proj."""
    return [(p, 0 if n.endswith("c_proj.weight") else 1) for n, p in model.named_parameters()
            if p.dim() == 2]


def max_norm_error(model):
    return max((w.norm(dim=axis) - 1).abs().max().item() for w, axis in projected(model))


@pytest.mark.parametrize("arch", ARCHS)
def test_ngpt_N1_every_hidden_state_is_a_unit_vector(arch):
    model = randomize(build("ngpt", arch=arch))
    idx = batch(model.config)[0]
    with torch.no_grad():
        for dtype, tol in ((torch.float32, 1e-5), (torch.float64, 1e-12)):
            states = hidden_states(model.to(dtype), idx)
            assert len(states) == 1 + 2 * model.config.n_layer and states[0].dtype == dtype
            assert all((x.norm(dim=-1) - 1).abs().max() < tol for x in states)
            assert torch.equal(states[-1], block_outputs(model, idx)[-1])


@pytest.mark.parametrize("arch", ARCHS)
def test_ngpt_N2_every_row_and_column_is_a_unit_vector_after_init(arch):
    model = build("ngpt", arch=arch)
    per_block = 5 if arch == "llama" else 4  # c_attn, c_proj, c_fc, (c_up,) c_proj
    assert len(projected(model)) == (2 if arch == "llama" else 3) + model.config.n_layer * per_block
    assert max_norm_error(model) < 1e-6


@pytest.mark.parametrize("arch", ARCHS)
def test_ngpt_N3_a_step_leaves_the_sphere_and_normalize_weights_restores_it(arch):
    model = build("ngpt", arch=arch).train()
    idx, targets = batch(model.config)
    optimizer = model.configure_optimizers(0.0, 1e-2, (0.9, 0.95), "cpu")
    model(idx, targets)[1].backward()
    optimizer.step()
    assert max_norm_error(model) > 1e-3
    model.normalize_weights()
    assert max_norm_error(model) < 1e-6
    before = [w.clone() for w, _ in projected(model)]
    model.normalize_weights()
    # idempotent
    assert all(torch.allclose(a, w, atol=1e-7) for a, (w, _) in zip(before, projected(model)))


@pytest.mark.parametrize("arch", ARCHS)
def test_ngpt_unit_norms_hold_after_several_training_steps(arch):
    """§13.6's promise after any number of fp32 steps: every hidden state and every projected row
    or column of norm 1 within 1e-5, when normalize_weights follows each optimizer step (as in
    train.py)."""
    model = build("ngpt", arch=arch).train()
    idx, targets = batch(model.config)
    optimizer = model.configure_optimizers(0.0, 1e-2, (0.9, 0.95), "cpu")
    for _ in range(5):
        model(idx, targets)[1].backward()
        optimizer.step()
        optimizer.zero_grad()
        model.normalize_weights()
        assert max_norm_error(model) < 1e-5
    with torch.no_grad():
        assert all((x.norm(dim=-1) - 1).abs().max() < 1e-5
                   for x in hidden_states(model.eval(), idx))


@pytest.mark.parametrize("arch", ARCHS)
def test_ngpt_N4_logits_are_bounded_by_s_z_and_the_init_loss_is_log_vocab(arch):
    model = build("ngpt", arch=arch, vocab_size=50304, n_embd=128)
    idx, targets = batch(model.config, B=4)
    with torch.no_grad():
        logits, loss = model(idx, targets)
    assert logits.abs().max() <= 1 + 1e-6  # |cos| · s_z, s_z 1 at init
    assert abs(loss.item() - math.log(50304)) < 0.05


@pytest.mark.parametrize("arch", ARCHS)
def test_ngpt_N5_alpha_0_is_the_identity_and_alpha_1_takes_the_sub_layers_direction(arch):
    model = randomize(build("ngpt", arch=arch))
    x, rope = model.embed(batch(model.config)[0]), rope_rows(model, 32)
    with torch.no_grad():
        for block in model.transformer.h:
            block.alpha_attn.zero_()
            block.alpha_mlp.zero_()
        assert torch.allclose(block_outputs(model, batch(model.config)[0])[-1], x, atol=1e-6)
        block = model.transformer.h[0]
        block.alpha_attn.fill_(1 / (0.05 * 64 ** 0.5))  # used ×0.05√d: 1
        y = block.join(x, lambda h: block.attn(h, 0, rope), None, None, block.alpha_attn, 0)
        a = block.attn(x, 0, rope)
        assert torch.allclose(y, a / a.norm(dim=-1, keepdim=True), atol=1e-6)


def test_ngpt_N6_stored_and_effective_init_values():
    model, d = build("ngpt", n_embd=64), 64
    block = model.transformer.h[0]
    stored = {"alpha": block.alpha_attn, "s_qk": block.attn.s_qk, "s_v": block.mlp.s_v,
              "s_z": model.s_z}
    for name, (want_stored, scale) in {"alpha": (d ** -0.5, 0.05 * d ** 0.5),
                                       "s_qk": (d ** -0.5, d ** 0.5), "s_v": (1.0, d ** 0.5),
                                       "s_z": (d ** -0.5, d ** 0.5)}.items():
        assert torch.allclose(stored[name], torch.full_like(stored[name], want_stored)), name
        effective = {"alpha": 0.05, "s_qk": 1.0, "s_v": d ** 0.5, "s_z": 1.0}[name]
        assert (stored[name] * scale).mean().item() == pytest.approx(effective), name
    assert torch.equal(block.alpha_mlp, block.alpha_attn)


@pytest.mark.parametrize("arch", ARCHS)
def test_ngpt_N7_q_and_k_have_norm_s_qk_per_head(arch):
    """At init s_qk is 1 (used): per head ‖q‖ = ‖k‖ = 1, and the scores are cosines times
    √hs."""
    model = build("ngpt", arch=arch).double()
    attn, rope, seen = model.transformer.h[0].attn, rope_rows(model, 8), {}
    real = F.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        seen.update(q=q, k=k, scale=kw["scale"])
        return real(q, k, v, **kw)
    x = torch.randn(2, 8, 64, dtype=torch.float64)
    with torch.no_grad(), pytest.MonkeyPatch.context() as mp:
        mp.setattr(F, "scaled_dot_product_attention", spy)
        attn(x, 0, rope)
    for t in (seen["q"], seen["k"]):
        assert torch.allclose(t.norm(dim=-1), torch.ones(2, 4, 8, dtype=torch.float64), atol=1e-12)
    assert seen["scale"] == 4.0  # √hs


def test_ngpt_N8_param_count():
    L, d, V = 12, 768, 50304
    assert count_params("ngpt") == \
        count_params("pre") - (2 * L + 1) * d + L * (2 * d + d + 4 * d) + V + V * d


def test_ngpt_untied_by_default_and_tied_allowed():
    assert not build("ngpt").config.tied and build("ngpt", tie_embeddings=True).config.tied
    model = build("ngpt", tie_embeddings=True)
    assert model.lm_head.weight is model.transformer.wte.weight and max_norm_error(model) < 1e-6


def test_normalize_weights_changes_nothing_in_the_other_modes():
    for mode in ("pre", "hybrid", "reorder"):
        model = build(mode)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        model.normalize_weights()
        assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
