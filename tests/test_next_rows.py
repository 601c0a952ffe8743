"""docs/spec.md §14, the field's next rows, one test per property, named after §14's test ids: the
QK-norm axis (Q), GPAS (G), Derf (F), the residual scales res_scale and x0_mix (S), NormFormer (NF)
Sub-LN (SL) and ReZero (S4, S6). Equations are checked in float64 on randomized weights, against
each row's host mode where §14 says it reduces to it. The generic tests of every mode
(test_model.py) run for normformer, subln and rezero too."""
import copy
import math
import types

import pytest
import torch
import torch.nn.functional as F

import configurator
from conftest import (ROOT, batch, build, copy_probability, count_params, error_of, randomize,
                      rope_rows)
from data import GPT2_META
from model import ADDITIVE_MODES, ARCHS, GPTConfig, Derf, DyT, gpas

PRE_PARAMS = 124_373_760  # pre at GPT-2 small's shape, bias=False (§14's baseline)


def build64(mode="pre", **overrides):
    """conftest's tiny model (3 blocks, 64 wide, 4 heads of 16, block 32, 65 tokens) in float64."""
    return build(mode, **overrides).double()


def logits_of(model, idx):
    with torch.no_grad():
        return model(idx, all_logits=True)[0]


def extra_params(norm_mode="pre", **overrides):
    """The parameter count at GPT-2 small's shape over pre's."""
    return count_params(norm_mode, **overrides) - PRE_PARAMS


def stream(seed=2):
    """A residual stream (2, 8, 64) in float64, of RMS about 3."""
    g = torch.Generator().manual_seed(seed)
    return 3 * torch.randn(2, 8, 64, generator=g, dtype=torch.float64)


# ------------------------------------------------------------ §14.7 qk_norm: all heads or per head

@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("old, new", [(True, "all_heads"), (False, "none")])
def test_qk_Q1_true_is_all_heads_and_false_is_none_in_state_and_logits(old, new, arch):
    a = build64(arch=arch, qk_norm=old)
    b = build64(arch=arch, qk_norm=new)
    assert {k: v.shape for k, v in a.state_dict().items()} == {
        k: v.shape for k, v in b.state_dict().items()}
    randomize(a)
    b.load_state_dict(a.state_dict())
    idx = batch(a.config)[0]
    assert torch.equal(logits_of(a, idx), logits_of(b, idx))


@pytest.mark.parametrize("arch", ARCHS)
def test_qk_Q2_per_head_gains_are_hs_wide_and_each_heads_q_and_k_have_rms_one(arch):
    model = build64(arch=arch, qk_norm="per_head", norm_eps=0.0, n_kv_head=2)
    attn = model.transformer.h[0].attn
    assert attn.q_norm.weight.shape == attn.k_norm.weight.shape == (16,)
    seen = []
    hooks = [norm.register_forward_hook(lambda m, i, out: seen.append(out))
             for norm in (attn.q_norm, attn.k_norm)]
    model(batch(model.config)[0])
    for h in hooks:
        h.remove()
    q, k = seen
    assert q.shape[-2:] == (4, 16) and k.shape[-2:] == (2, 16)  # (B, T, heads, hs)
    for t in (q, k):
        torch.testing.assert_close(t.pow(2).mean(-1).sqrt(), torch.ones_like(t[..., 0]))


@pytest.mark.parametrize("arch", ARCHS)
def test_qk_Q3_per_head_attention_ignores_a_scaling_of_one_heads_w_q_and_all_heads_does_not(arch):
    for axis, ignores in (("per_head", True), ("all_heads", False)):
        model = randomize(build64(arch=arch, qk_norm=axis, norm_eps=0.0))
        block = model.transformer.h[0]
        x = stream()
        rope = rope_rows(model, 8)
        with torch.no_grad():
            before = block.attn(x, 0, rope)
            block.attn.c_attn.weight[16:32] *= 7.0  # the second head's rows of W_q
            after = block.attn(x, 0, rope)
        assert torch.allclose(before, after, atol=1e-10) == ignores, axis


def test_qk_Q4_llama_per_head_depends_on_positions_only_through_their_difference():
    model = randomize(build64(arch="llama", qk_norm="per_head"))
    idx = batch(model.config, T=20)[0]
    with torch.no_grad():
        at_0 = model(idx, pos=0, all_logits=True)[0]
        at_9 = model(idx, pos=9, all_logits=True)[0]
    # the rotary table is float32: its angles round differently at other positions
    torch.testing.assert_close(at_0, at_9, rtol=1e-4, atol=1e-5)


def test_qk_Q5_parameter_counts_and_per_head_with_grouped_keys():
    assert extra_params(qk_norm="all_heads") == 12 * (768 + 768) == 18_432
    assert extra_params(qk_norm="per_head") == 2 * 12 * 64 == 1_536
    attn = build64(qk_norm="per_head", n_kv_head=1).transformer.h[0].attn
    assert attn.k_norm.weight.shape == (16,)


# ---------------------------------------------------------------- §14.5 gpas

HOSTS = ("pre", "sandwich", "lns", "deep", "mixln")


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("mode", HOSTS)
def test_gpas_G1_a_zero_gate_is_its_host_exactly(mode, arch):
    host = randomize(build64(norm_mode=mode, arch=arch, mixln_alpha=0.34))
    with_gpas = build64(norm_mode=mode, arch=arch, mixln_alpha=0.34, gpas=True)
    state = with_gpas.state_dict()
    assert set(state) - set(host.state_dict()) == {f"transformer.h.{i}.gpas_gate" for i in range(3)}
    with_gpas.load_state_dict(host.state_dict() | {k: v for k, v in state.items() if "gate" in k})
    idx = batch(host.config)[0]
    assert torch.equal(logits_of(host, idx), logits_of(with_gpas, idx))


def silu_grad(g):
    s = torch.sigmoid(g)
    return s * (1 + g * (1 - s))


@pytest.mark.parametrize("arch", ARCHS)
def test_gpas_G2_a_pre_block_at_g_scales_its_sum_by_one_minus_silu_g(arch):
    model = randomize(build64(arch=arch, gpas=True))
    block = model.transformer.h[1]
    x = stream()
    rope = rope_rows(model, 8)
    shrink = 1 - F.silu(torch.tensor(0.7, dtype=torch.float64))
    with torch.no_grad():
        block.gpas_gate.fill_(0.7)
        h = shrink * (x + block.attn(block.ln_1(x), 0, rope))
        want = shrink * (h + block.mlp(block.ln_2(h)))
        torch.testing.assert_close(block(x, 0, rope), want)


def test_gpas_G3_deep_scales_the_skip_only_and_feeds_f_the_raw_stream():
    model = randomize(build64(norm_mode="deep", gpas=True))
    block = model.transformer.h[0]
    x = stream()
    with torch.no_grad():
        block.gpas_gate.fill_(-0.4)
        shrink = 1 - F.silu(block.gpas_gate)
        h = block.ln_1(block.alpha * shrink * x + block.attn(x))
        want = block.ln_2(block.alpha * shrink * h + block.mlp(h))
        torch.testing.assert_close(block(x), want)


@pytest.mark.parametrize("arch", ARCHS)
def test_gpas_G3_mixlns_post_blocks_scale_the_skip_and_its_pre_blocks_the_sum(arch):
    """Mix-LN at α = 1/3 of 3 blocks: block 1 post, N(GPAS(x) + f(x)) (the authors' post_pre_gpas);
    blocks 2 and 3 pre, GPAS(x + f(N(x)))."""
    model = randomize(build64(norm_mode="mixln", arch=arch, mixln_alpha=0.34, gpas=True))
    post, pre = model.transformer.h[0], model.transformer.h[1]
    assert (post.mode, pre.mode) == ("post", "pre")
    x = stream()
    rope = rope_rows(model, 8)
    with torch.no_grad():
        post.gpas_gate.fill_(0.7)
        pre.gpas_gate.fill_(0.7)
        shrink = 1 - F.silu(post.gpas_gate)
        h = post.ln_1(shrink * x + post.attn(x, 0, rope))
        torch.testing.assert_close(post(x, 0, rope), post.ln_2(shrink * h + post.mlp(h)))
        h = shrink * (x + pre.attn(pre.ln_1(x), 0, rope))
        torch.testing.assert_close(pre(x, 0, rope), shrink * (h + pre.mlp(pre.ln_2(h))))


@pytest.mark.parametrize("compiled", [False, True])
def test_gpas_G4_the_gradient_to_x_passes_whole_and_the_gates_is_minus_silu_prime_times_x_dot_grad(
        compiled):
    """Checked on gradients: a stop-gradient that lost its detach has the same values. Compiled with
    AOTAutograd (aot_eager), where a dropped detach would show."""
    model = randomize(build64(n_layer=1, gpas=True))
    block = model.transformer.h[0]
    with torch.no_grad():
        block.gpas_gate.fill_(0.7)
    x = stream().requires_grad_()
    upstream = stream(seed=5)
    half = lambda t: gpas(t + block.attn(block.ln_1(t)), block.gpas_gate)  # attention's join only
    run = torch.compile(half, backend="aot_eager") if compiled else half
    (run(x) * upstream).sum().backward()
    sum_ = x + block.attn(block.ln_1(x))  # the reference: the same join without GPAS
    (want_x,) = torch.autograd.grad((sum_ * upstream).sum(), x)
    torch.testing.assert_close(x.grad, want_x)
    want_gate = -silu_grad(torch.tensor(0.7, dtype=torch.float64)) * (sum_ * upstream).sum()
    torch.testing.assert_close(block.gpas_gate.grad, want_gate.detach().reshape(1))


def test_gpas_G5_one_scalar_gate_per_block_not_decayed():
    assert extra_params(gpas=True) == 12
    model = build64(gpas=True)
    assert [b.gpas_gate.shape for b in model.transformer.h] == [(1,)] * 3
    decayed = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu").param_groups[0]["params"]
    assert not any(p is b.gpas_gate for p in decayed for b in model.transformer.h)


# ---------------------------------------------------------------- §14.1 derf

def test_derf_F1_is_gamma_erf_alpha_x_plus_s_plus_beta_bounded_by_gamma():
    norm = Derf(64, alpha=0.7, bias=True, shift=0.3).double()
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    x = stream()
    y = norm(x)
    torch.testing.assert_close(y, norm.weight * torch.erf(0.7 * x + 0.3) + norm.bias)
    assert ((y - norm.bias).abs() <= norm.weight.abs() + 1e-12).all()
    with torch.no_grad():
        norm.shift.fill_(-0.3)  # inside erf: not a bias added after it
    torch.testing.assert_close(norm(x), norm.weight * torch.erf(0.7 * x - 0.3) + norm.bias)


@pytest.mark.parametrize("arch", ARCHS)
def test_derf_F2_init_alpha_per_role_shift_gamma_beta_and_the_embedding_scale(arch):
    model = build64(arch=arch, norm_type="derf", derf_alpha_attn=0.3, derf_alpha_ffn=0.4,
                  derf_alpha_final=0.5, tie_embeddings=True)
    block = model.transformer.h[0]
    roles = ((block.ln_1, 0.3), (block.ln_2, 0.4), (model.transformer.ln_f, 0.5))
    for norm, alpha in roles:
        assert isinstance(norm, Derf)
        assert norm.alpha.item() == pytest.approx(alpha) and norm.shift.item() == 0.0
        assert torch.equal(norm.weight, torch.ones(64, dtype=torch.float64))
        assert torch.equal(norm.bias, torch.zeros(64, dtype=torch.float64))  # at bias=False too
    assert model.transformer.emb_scale.item() == pytest.approx(8.0)  # √64


def test_derf_F3_x0_is_s_times_the_embedding_and_block_one_is_pre_with_derf():
    model = randomize(build64(norm_type="derf"))
    idx = batch(model.config, T=8)[0]
    t = model.transformer
    x0 = t.emb_scale * (t.wte(idx) + t.wpe(torch.arange(8)))
    with torch.no_grad():
        torch.testing.assert_close(model.embed(idx), x0)
        block = t.h[0]
        derf = lambda norm, v: norm.weight * torch.erf(norm.alpha * v + norm.shift) + norm.bias
        h = x0 + block.attn(derf(block.ln_1, x0))
        torch.testing.assert_close(block(x0), h + block.mlp(derf(block.ln_2, h)))


def test_derf_F4_parameter_counts():
    L, d = 12, 768
    assert extra_params(norm_type="derf") == (2 * L + 1) * (d + 2) + 1 == 19_251
    assert extra_params(norm_type="derf", bias=True) - extra_params(bias=True) == 51
    assert extra_params(norm_type="dyt", pointwise_bias=True) == (2 * L + 1) * (d + 1) + 1 == 19_226
    assert extra_params(norm_type="derf", pointwise_bias=False) == (2 * L + 1) * 2 + 1


@pytest.mark.parametrize("bias", [False, True])
def test_derf_F6_dyt_without_pointwise_bias_keeps_its_bias_rule(bias):
    """pointwise_bias=None is DyT's rule of §13.5 (β iff bias): the same state and logits."""
    default = randomize(build64(norm_type="dyt", bias=bias))
    named = build64(norm_type="dyt", bias=bias, pointwise_bias=bias)
    named.load_state_dict(default.state_dict())  # strict: the same parameters
    idx = batch(default.config)[0]
    assert torch.equal(logits_of(default, idx), logits_of(named, idx))
    assert (default.transformer.h[0].ln_1.bias is None) == (not bias)


# ---------------------------------------------------------------- §14.2 res_scale, x0_mix

ADDITIVE = ("pre", "sandwich", "lns", "reorder", "normformer", "subln")


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("mode", ADDITIVE)
def test_res_scale_S1_layerscale_at_one_is_its_host_and_at_zero_the_identity(mode, arch):
    host = randomize(build64(norm_mode=mode, arch=arch))
    scaled = build64(norm_mode=mode, arch=arch, res_scale="layerscale")
    assert scaled.transformer.h[0].ls_1[0].item() == pytest.approx(1e-4)
    ones = {k: torch.ones_like(v) for k, v in scaled.state_dict().items() if ".ls_" in k}
    scaled.load_state_dict(host.state_dict() | ones)
    idx = batch(host.config)[0]
    assert torch.equal(logits_of(host, idx), logits_of(scaled, idx))
    x = stream()
    with torch.no_grad():
        for block in scaled.transformer.h:
            block.ls_1.zero_()
            block.ls_2.zero_()
            assert torch.equal(block(x, 0, rope_rows(scaled, 8)), x)


@pytest.mark.parametrize("arch", ARCHS)
def test_res_scale_S1_layerscale_scales_each_branch_by_its_own_lambda(arch):
    model = randomize(build64(arch=arch, res_scale="layerscale"))
    block = model.transformer.h[1]
    x = stream()
    rope = rope_rows(model, 8)
    with torch.no_grad():
        h = x + block.ls_1 * block.attn(block.ln_1(x), 0, rope)
        torch.testing.assert_close(block(x, 0, rope), h + block.ls_2 * block.mlp(block.ln_2(h)))


def zero_sublayer(model, j):
    """Sub-layer j (0 attention, 1 MLP) of every block made to output 0: its last matrix zeroed."""
    with torch.no_grad():
        for block in model.transformer.h:
            (block.attn if j == 0 else block.mlp).c_proj.weight.zero_()
    return model


@pytest.mark.parametrize("scale", ["layerscale", "lambda"])
@pytest.mark.parametrize("mode", ADDITIVE_MODES)
def test_res_scale_S1_S2_each_sub_layer_takes_its_own_scale_on_every_host(mode, scale):
    """With sub-layer j's scales at 1 (its branch's λ, or λ_res and λ_post) and the other's
    branch scaled to 0, a block is its host's with the other sub-layer silenced: a scale taken for
    the wrong sub-layer, on any host, shows."""
    host = randomize(build64(norm_mode=mode))
    idx = batch(host.config)[0]
    for j in (0, 1):
        scaled = build64(norm_mode=mode, res_scale=scale)
        ones = {k: torch.ones_like(v) for k, v in scaled.state_dict().items()
                if ".ls_" in k or "lambdas" in k}
        scaled.load_state_dict(host.state_dict() | ones)
        with torch.no_grad():
            for block in scaled.transformer.h:
                if scale == "layerscale":
                    (block.ls_2 if j == 0 else block.ls_1).zero_()
                else:
                    block.post_lambdas[1 - j] = 0.0
        silenced = zero_sublayer(copy.deepcopy(host), 1 - j)
        assert torch.equal(logits_of(scaled, idx), logits_of(silenced, idx)), j


@pytest.mark.parametrize("arch", ARCHS)
def test_res_scale_S2_lambdas_start_at_root_1_1_and_1_and_scale_skip_and_branch(arch):
    model = build64(arch=arch, res_scale="lambda")
    block = model.transformer.h[0]
    assert torch.allclose(block.resid_lambdas,
                          torch.full((2,), math.sqrt(1.1), dtype=torch.float64))
    assert torch.equal(block.post_lambdas, torch.ones(2, dtype=torch.float64))
    host = randomize(build64(arch=arch))
    ones = {k: torch.ones_like(v) for k, v in model.state_dict().items() if "lambdas" in k}
    model.load_state_dict(host.state_dict() | ones)
    idx = batch(host.config)[0]
    assert torch.equal(logits_of(host, idx), logits_of(model, idx))
    randomize(model)
    x = stream()
    rope = rope_rows(model, 8)
    r, p = block.resid_lambdas, block.post_lambdas
    with torch.no_grad():
        h = r[0] * x + p[0] * block.attn(block.ln_1(x), 0, rope)
        torch.testing.assert_close(block(x, 0, rope), r[1] * h + p[1] * block.mlp(block.ln_2(h)))


@pytest.mark.parametrize("arch", ARCHS)
def test_x0_mix_S3_ramps_identity_at_one_and_zero_and_block_one_reads_the_mix(arch):
    model = build64(arch=arch, n_layer=4, x0_mix=True)
    blocks = model.transformer.h
    lambdas = [b.block_lambda.item() for b in blocks]
    mus = [b.x0_lambda.item() for b in blocks]
    assert lambdas == pytest.approx([1.15, 1.15 - 0.1 / 3, 1.15 - 0.2 / 3, 1.05])
    assert mus == pytest.approx([0.20, 0.15, 0.10, 0.05])
    for L, ramps in ((1, [1.15, 0.20]), (2, [1.15, 0.20, 1.05, 0.05])):  # the ends at any depth
        blocks = build64(arch=arch, n_layer=L, x0_mix=True).transformer.h
        got = [v for b in blocks for v in (b.block_lambda.item(), b.x0_lambda.item())]
        assert got == pytest.approx(ramps)
    host = randomize(build64(arch=arch, n_layer=4))
    mix = {k: torch.full_like(v, float("block" in k)) for k, v in model.state_dict().items()
           if "_lambda" in k}  # λ = 1, μ = 0
    model.load_state_dict(host.state_dict() | mix)
    idx = batch(host.config)[0]
    assert torch.equal(logits_of(host, idx), logits_of(model, idx))
    model = randomize(build64(arch=arch, n_layer=4, x0_mix=True))
    x = stream()
    x0 = stream(seed=7)
    first = model.transformer.h[0]
    rope = rope_rows(model, 8)
    with torch.no_grad():
        mixed = first.block_lambda * x + first.x0_lambda * x0
        want = pre_block(first, mixed, rope)
        torch.testing.assert_close(first(x, 0, rope, x0), want)


def test_x0_mix_S3_the_embedding_learns_through_x0():
    """With every λ at 0 the stream reaches block k only through μ_k·x_0: the positions' table
    still gets a gradient (a detached x_0 would give none)."""
    model = randomize(build64(x0_mix=True, tie_embeddings=False))
    with torch.no_grad():
        for block in model.transformer.h:
            block.block_lambda.zero_()
    idx = batch(model.config)[0]
    model(idx, idx)[1].backward()
    assert model.transformer.wpe.weight.grad.abs().sum() > 0


# ---------------------------------------------------------------- §14.2 rezero

@pytest.mark.parametrize("arch", ARCHS)
def test_rezero_S4_the_identity_network_at_init_with_logits_x0_times_the_head(arch):
    """α = 0: every block passes x_0 through, and with no ln_f the head reads x_0 itself."""
    model = randomize(build64("rezero", arch=arch))
    with torch.no_grad():
        for block in model.transformer.h:
            block.resweight.zero_()
        idx = batch(model.config)[0]
        x0 = model.embed(idx)
        torch.testing.assert_close(logits_of(model, idx), model.lm_head(x0), rtol=0, atol=0)


@pytest.mark.parametrize("arch", ARCHS)
def test_rezero_S4_one_alpha_serves_both_sub_layers_and_no_norm_is_left(arch):
    model = randomize(build64("rezero", arch=arch, qk_norm="per_head"))
    block = model.transformer.h[1]
    x = stream()
    rope = rope_rows(model, 8)
    with torch.no_grad():
        block.resweight.fill_(0.5)
        h = x + 0.5 * block.attn(x, 0, rope)
        torch.testing.assert_close(block(x, 0, rope), h + 0.5 * block.mlp(h))
    names = [n for n, _ in model.named_parameters()]
    # qk_norm acts inside attention, not on the stream: the only norm gains rezero allows
    assert not [n for n in names if ("ln" in n or "norm" in n) and "_norm" not in n], names
    assert [n for n in names if "resweight" in n] == \
        [f"transformer.h.{i}.resweight" for i in range(3)]
    assert all(p.shape == (1,) and p.item() == 0 for p in build64("rezero").parameters()
               if p.dim() == 1 and p.numel() == 1)


def test_rezero_S5_counts_and_alpha_is_not_decayed():
    assert extra_params("rezero") == -(2 * 12 + 1) * 768 + 12 == -19_188
    assert extra_params("rezero", bias=True) - extra_params("pre", bias=True) == -38_388
    model = build64("rezero")
    decayed, plain = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu").param_groups
    alphas = [p for n, p in model.named_parameters() if "resweight" in n]
    assert len(alphas) == 3 and all(any(p is q for q in plain["params"]) for p in alphas)


@pytest.mark.parametrize("setting", [dict(embed_norm=True), dict(norm_type="dyt"),
                                     dict(norm_type="derf"), dict(res_scale="layerscale"),
                                     dict(x0_mix=True), dict(gpas=True)])
def test_rezero_S6_a_norm_or_a_residual_switch_is_an_error(setting):
    name = next(iter(setting))
    with pytest.raises(ValueError) as info:
        GPTConfig(n_layer=2, n_head=4, n_embd=64, vocab_size=65, norm_mode="rezero", **setting)
    message = str(info.value)
    assert "\n" not in message
    assert "rezero" in message and name in message and f"{name}=" in message, message


ROWS = [dict(qk_norm="per_head"), dict(gpas=True), dict(norm_type="derf"),
        dict(res_scale="layerscale"), dict(res_scale="lambda"), dict(x0_mix=True),
        dict(norm_mode="normformer", normformer_scale_resids=True), dict(norm_mode="subln"),
        dict(norm_mode="rezero")]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("row", ROWS, ids=lambda row: "-".join(f"{k}={v}" for k, v in row.items()))
def test_every_parameter_of_every_row_gets_a_gradient(row, arch):
    model = randomize(build64(arch=arch, **row))
    idx = batch(model.config)[0]
    model(idx, idx)[1].backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def pre_block(block, x, rope):
    """A pre block's two joins, written out."""
    h = x + block.attn(block.ln_1(x), 0, rope)
    return h + block.mlp(block.ln_2(h))


def test_res_scale_S5_every_scale_is_1d_and_the_counts():
    assert extra_params(res_scale="layerscale") == 2 * 12 * 768 == 18_432
    assert extra_params(res_scale="lambda") == 4 * 12 == 48
    assert extra_params(x0_mix=True) == 2 * 12 == 24
    model = build64(res_scale="lambda", x0_mix=True)
    decayed, plain = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu").param_groups
    new = [p for n, p in model.named_parameters() if "lambda" in n]
    assert len(new) == 3 * 4 and all(any(p is q for q in plain["params"]) for p in new)
    layerscale = build64(res_scale="layerscale")
    assert all(p.dim() == 1 for n, p in layerscale.named_parameters() if ".ls_" in n)


# ---------------------------------------------------------------- §14.3 normformer

def test_normformer_NF1_each_attention_increment_is_standardized_and_ln_f_is_kept():
    model = build64(norm_mode="normformer", norm_eps=0.0)
    assert isinstance(model.transformer.ln_f, torch.nn.LayerNorm)
    x = model.embed(batch(model.config)[0])
    with torch.no_grad():
        for block in model.transformer.h:
            attn = lambda h: block.attn(h)
            half = block.join(x, attn, block.ln_1, block.ln_1_out, None, 0)
            step = half - x
            torch.testing.assert_close(step.mean(-1), torch.zeros_like(step[..., 0]))
            torch.testing.assert_close(step.std(-1, unbiased=False), torch.ones_like(step[..., 0]))
            x = block(x)


@pytest.mark.parametrize("mode", ["normformer", "subln"])
@pytest.mark.parametrize("arch", ARCHS)
def test_normformer_NF2_and_subln_SL3_the_mlp_normalizes_its_hidden_layer(mode, arch):
    """gpt2: W₂·LN(GELU(W₁h)), the LN over 4d; llama: W₂·RMS(SiLU(W₁h) ⊙ W₃h) over its
    width."""
    model = randomize(build64(norm_mode=mode, arch=arch))
    mlp = model.transformer.h[0].mlp
    h = stream()
    with torch.no_grad():
        if arch == "gpt2":
            inner = F.gelu(mlp.c_fc(h))
            normed = F.layer_norm(inner, inner.shape[-1:], mlp.ffn_ln.weight, None, 1e-5)
        else:
            inner = F.silu(mlp.c_fc(h)) * mlp.c_up(h)
            normed = F.rms_norm(inner, inner.shape[-1:], mlp.ffn_ln.weight, 1e-5)
        assert mlp.ffn_ln.weight.shape == (mlp.c_fc.out_features,)
        torch.testing.assert_close(mlp(h), mlp.c_proj(normed))


def test_normformer_NF3_a_uniform_head_scale_is_absorbed_and_one_entry_is_not():
    model = randomize(build64(norm_mode="normformer", norm_eps=0.0))
    idx = batch(model.config)[0]
    before = logits_of(model, idx)
    with torch.no_grad():
        for block in model.transformer.h:
            block.attn.head_scale.mul_(3.0)
    torch.testing.assert_close(logits_of(model, idx), before)
    with torch.no_grad():
        model.transformer.h[1].attn.head_scale[2] *= 5.0
    assert not torch.allclose(logits_of(model, idx), before)


def test_normformer_NF4_w_resid_at_one_is_plain_normformer_and_scales_the_mlp_skip_only():
    plain = randomize(build64(norm_mode="normformer"))
    scaled = build64(norm_mode="normformer", normformer_scale_resids=True)
    ones = {k: torch.ones_like(v) for k, v in scaled.state_dict().items() if "w_resid" in k}
    scaled.load_state_dict(plain.state_dict() | ones)
    idx = batch(plain.config)[0]
    assert torch.equal(logits_of(plain, idx), logits_of(scaled, idx))
    block = randomize(scaled).transformer.h[0]
    x = stream()
    with torch.no_grad():
        half = block.join(x, block.attn, block.ln_1, block.ln_1_out, None, 0)
        torch.testing.assert_close(half, x + block.ln_1_out(block.attn(block.ln_1(x))))
        want = block.w_resid * half + block.mlp(block.ln_2(half))
        torch.testing.assert_close(block(x), want)


def test_normformer_NF5_parameter_counts():
    L, d, n_h = 12, 768, 12
    assert extra_params(norm_mode="normformer") == L * (d + 4 * d + n_h) == 46_224
    with_bias = extra_params(norm_mode="normformer", bias=True) - extra_params(bias=True)
    assert with_bias == L * (2 * d + 8 * d + n_h) == 92_304
    assert extra_params(norm_mode="normformer", normformer_scale_resids=True) == 55_440


# ---------------------------------------------------------------- §14.4 subln

@pytest.mark.parametrize("arch", ARCHS)
def test_subln_SL1_v_o_and_the_mlp_start_gamma_times_the_family_std(arch):
    """W_v, W_o, W₁, W₂ (and llama's W₃) are γ = √(ln 2L) times the same init without the
    gain, exactly; W_q and W_k are untouched."""
    gained = build64(norm_mode="subln", arch=arch)
    plain = build64(norm_mode="subln", arch=arch, subln_init_gain=False)
    gamma = math.sqrt(math.log(2 * 3))
    for a, b in zip(gained.transformer.h, plain.transformer.h):
        q_k, v = a.attn.c_attn.weight.split((128, 64))
        plain_q_k, plain_v = b.attn.c_attn.weight.split((128, 64))
        assert torch.equal(q_k, plain_q_k)
        torch.testing.assert_close(v, gamma * plain_v, rtol=1.2e-7, atol=0)  # one fp32 rounding
        for name in ("attn.c_proj", "mlp.c_fc", "mlp.c_proj") + (("mlp.c_up",) * (arch == "llama")):
            got = a.get_submodule(name).weight
            want = gamma * b.get_submodule(name).weight
            torch.testing.assert_close(got, want, rtol=1.2e-7, atol=0)  # one fp32 rounding
    assert math.sqrt(math.log(24)) == pytest.approx(1.7827, abs=1e-4)  # §14.4 at L = 12


def test_subln_SL2_the_attention_output_ignores_the_scale_of_w_v():
    model = randomize(build64(norm_mode="subln", norm_eps=0.0))
    attn = model.transformer.h[0].attn
    x = stream()
    with torch.no_grad():
        before = attn(x)
        attn.c_attn.weight[128:] *= 7.0
        torch.testing.assert_close(attn(x), before)


def test_subln_SL4_ln_f_is_kept_and_the_count():
    assert isinstance(build64(norm_mode="subln").transformer.ln_f, torch.nn.LayerNorm)
    assert extra_params(norm_mode="subln") == 12 * 5 * 768 == 46_080
    assert extra_params(norm_mode="subln", bias=True) - extra_params(bias=True) == 92_160


@pytest.mark.parametrize("kind", ["dyt", "derf"])
def test_subln_and_normformer_inner_norms_stay_norms_under_pointwise_types(kind):
    for mode in ("subln", "normformer"):
        block = build64(norm_mode=mode, norm_type=kind).transformer.h[0]
        assert type(block.ln_1) is (Derf if kind == "derf" else DyT)
        assert isinstance(block.mlp.ffn_ln, torch.nn.LayerNorm)
    assert isinstance(build64(norm_mode="subln", norm_type=kind).transformer.h[0].attn.inner_ln,
                      torch.nn.LayerNorm)


# ---------------------------------------------------------------- the command line

def settings_error(*argv):
    """train.py's settings, then the model's checks, as from the command line: the error line."""
    cfg, _ = configurator.parse_settings(list(argv), ROOT / "train.py")
    return error_of(configurator.model_config, types.SimpleNamespace(**cfg), GPT2_META)


@pytest.mark.parametrize("argv, words", [
    (("--norm_mode=post", "--gpas=True"), ("gpas", "norm_mode='post'", "gpas=False")),
    (("--qk_norm=heads",), ("qk_norm", "'heads'", "'per_head'")),
    (("--norm_mode=hybrid", "--qk_norm=per_head"), ("hybrid", "qk_norm=False")),
    (("--norm_mode=deep", "--res_scale=layerscale"),
     ("res_scale='layerscale'", "res_scale='none'")),
    (("--norm_mode=ngpt", "--x0_mix"), ("x0_mix", "x0_mix=False")),
    (("--norm_mode=post", "--norm_type=derf"), ("norm_type='derf'", "norm_mode='post'")),
    (("--norm_mode=rezero", "--embed_norm"), ("rezero", "embed_norm=False")),
])
def test_rows_ruled_out_are_one_line_errors_from_the_command_line(argv, words):
    message = settings_error(*argv)
    assert all(word in message for word in words), message


def test_every_row_is_reachable_from_the_command_line():
    argv = ["--qk_norm=per_head", "--norm_type=derf", "--res_scale=lambda", "--x0_mix", "--gpas",
            "--derf_shift_init=0.5", "--pointwise_bias=False"]
    cfg, _ = configurator.parse_settings(argv, ROOT / "train.py")
    config = configurator.model_config(types.SimpleNamespace(**cfg), GPT2_META)
    assert (config.qk_norm, config.norm_type, config.res_scale) == ("per_head", "derf", "lambda")
    assert config.x0_mix and config.gpas and config.pointwise_bias is False
    for mode in ("normformer", "subln", "rezero"):
        cfg, _ = configurator.parse_settings([f"--norm_mode={mode}"], ROOT / "train.py")
        assert configurator.model_config(types.SimpleNamespace(**cfg), GPT2_META).norm_mode == mode


# -------------------------------------------------------- the tied head's copy bias (docs/modes.md)

def test_layerscale_and_x0mix_copy_the_current_token_with_a_tied_head_and_the_others_do_not():
    """LayerScale at 1e-4 keeps x_L ≈ x_0 and ln_f, so the tied head reads E[t]·E[t] back
    (§14.2: 0.46 at 12 blocks); the x0mix preset mixes a normalized x_0 into every block, as pre
    with embed_norm does. Derf's is small but above 1/V. Untied, x0mix has none, though it mixes
    x_0 = E[t] into every block; layerscale changes only the residual's scale, and its untied head
    is post's of test_llama.py (an untied build costs 7 s)."""
    biased = {"layerscale": dict(res_scale="layerscale"),
              "x0mix": dict(x0_mix=True, embed_norm=True)}
    unbiased = {"lambdas": dict(res_scale="lambda"), "gpas": dict(gpas=True),
                "qkhead": dict(qk_norm="per_head")}
    assert all(copy_probability("pre", True, **s) > 0.3 for s in biased.values())
    assert all(copy_probability("pre", True, **s) < 1e-3 for s in unbiased.values())
    assert all(copy_probability(mode, True) < 1e-3 for mode in ("normformer", "subln", "rezero"))
    assert 5e-3 < copy_probability("pre", True, norm_type="derf") < 3e-2
    assert copy_probability("pre", False, **biased["x0mix"]) < 1e-3
