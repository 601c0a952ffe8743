"""The llama block family against docs/spec.md §11: rotary positions (RoFormer Eq. 34), the SwiGLU
MLP, torchtitan's init, grouped-query attention, and tie_embeddings in both families. The six modes'
own invariants run on both families in tests/test_model.py."""
import math

import pytest
import torch

import model as M
from conftest import batch, build, copy_probability, count_params, tiny
from model import GPT, GPTConfig, NORM_MODES

LLAMA2_7B = dict(arch="llama", n_layer=32, n_head=32, n_embd=4096, block_size=4096,
                 vocab_size=32000)
LLAMA3_8B = dict(arch="llama", n_layer=32, n_head=32, n_kv_head=8, n_embd=4096, block_size=8192,
                 vocab_size=128256, multiple_of=1024, ffn_dim_multiplier=1.3, rope_theta=500000.0)


# ---------------------------------------------------------------- rotary positions

def test_rotary_turns_each_pair_by_its_position_times_its_frequency():
    """RoFormer Eq. 34: (x_2i, x_2i+1) at position p becomes (x_2i cos pθ_i − x_2i+1 sin pθ_i,
    x_2i sin pθ_i + x_2i+1 cos pθ_i), θ_i = rope_theta^(−2i/hs): checked on the unit
    vectors."""
    config = GPTConfig(arch="llama", n_embd=32, n_head=4, block_size=16, rope_theta=100.0)  # hs 8
    rope, hs = M.rotary_table(config), 8
    for p in (0, 1, 5, 15):
        for i in range(hs // 2):
            angle = p * 100.0 ** (-2 * i / hs)
            for j, expected in ((2 * i, (math.cos(angle), math.sin(angle))),
                                (2 * i + 1, (-math.sin(angle), math.cos(angle)))):
                e = torch.zeros(1, 1, 1, hs)
                e[..., j] = 1.0
                y = M.rotate(e, rope[p:p + 1]).flatten()
                assert y[2 * i:2 * i + 2].tolist() == pytest.approx(expected, abs=1e-6)
                assert y.norm().item() == pytest.approx(1.0)  # nothing leaks into the other pairs


def test_rotary_scores_depend_only_on_the_position_difference():
    config = GPTConfig(arch="llama", n_embd=64, n_head=4, block_size=32)
    rope = M.rotary_table(config).double()
    # one q and one k, at every position
    q, k = torch.randn(2, 1, 16, dtype=torch.float64).expand(2, 32, 16)
    # (32, 32): q at position p against k at position s
    scores = M.rotate(q, rope) @ M.rotate(k, rope).T
    for offset in range(-31, 32):
        diagonal = torch.diagonal(scores, offset)  # every (p, s) with s − p = offset
        # an fp32 table
        assert torch.allclose(diagonal, diagonal[0].expand_as(diagonal), atol=1e-6), offset
    assert scores[0].std() > 0.1  # the score does depend on the difference


@pytest.mark.parametrize("mode", NORM_MODES)
def test_llama_logits_do_not_change_when_every_position_shifts(mode):
    """With rotary positions only differences matter: the same tokens at positions s..s+T-1 give the
    logits they give at 0..T-1. gpt2's learned positions, the control, do not."""
    idx, targets = batch(tiny(mode), T=20)
    for arch in ("llama", "gpt2"):
        model = build(mode, arch=arch).double()
        with torch.no_grad():
            at_0, shifted = model(idx, targets)[0], model(idx, targets, pos=12)[0]
        # the table is fp32
        assert torch.allclose(at_0, shifted, atol=1e-6) == (arch == "llama"), arch


def test_rotary_comes_after_the_qk_norm():
    """§11: q and k are normalized (here with gains that are not 1), split into heads, then
    rotated."""
    model = build("pre", arch="llama", qk_norm=True).double()
    attn = model.transformer.h[0].attn
    rope = model.rope[:8]
    x = torch.randn(1, 8, 64, dtype=torch.float64)
    with torch.no_grad():
        attn.q_norm.weight.uniform_(0.5, 2.0)
        attn.k_norm.weight.uniform_(0.5, 2.0)
        q, k, v = attn.c_attn(x).split(attn.sizes, dim=-1)
        heads = lambda t: t.view(1, 8, 4, 16).transpose(1, 2)  # (B, nh, T, hs)
        q, k = M.rotate(heads(attn.q_norm(q)), rope), M.rotate(heads(attn.k_norm(k)), rope)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, heads(v), is_causal=True)
        assert torch.allclose(attn(x, 0, rope), attn.c_proj(y.transpose(1, 2).reshape(1, 8, 64)),
                              atol=1e-12)


def test_llama_has_no_position_table_and_a_rotary_table_outside_the_checkpoint():
    model = build("pre", arch="llama")
    assert model.transformer.wpe is None and not any("wpe" in name for name in model.state_dict())
    assert model.rope.shape == (32, 8, 2) and "rope" not in model.state_dict()
    # less the untied E
    assert model.get_num_params() == model.get_num_params(non_embedding=False) - 65 * 64


# ---------------------------------------------------------------- SwiGLU

@pytest.mark.parametrize("d, multiple_of, multiplier, width", [
    (2048, 256, None, 5632),  # torchtitan Llama 2 "1B"
    (4096, 256, None, 11008),  # Llama 2 7B
    (4096, 1024, 1.3, 14336),  # Llama 3 8B
    (128, 32, None, 352),  # configs/ablate_llama_char.py
])
def test_swiglu_width_is_two_thirds_of_4d_rounded_up(d, multiple_of, multiplier, width):
    config = GPTConfig(arch="llama", n_embd=d, n_head=d // 64, multiple_of=multiple_of,
                       ffn_dim_multiplier=multiplier)
    assert M.swiglu_width(config) == width
    with torch.device("meta"):
        mlp = M.MLP(config)
    assert (mlp.c_fc.weight.shape == mlp.c_up.weight.shape == (width, d)
            and mlp.c_proj.weight.shape == (d, width))


def test_swiglu_is_w2_of_silu_w1_times_w3():
    model = build("pre", arch="llama")
    mlp, h = model.transformer.h[0].mlp, torch.randn(2, 8, 64)
    W1, W2, W3 = mlp.c_fc.weight, mlp.c_proj.weight, mlp.c_up.weight
    with torch.no_grad():
        expected = (torch.nn.functional.silu(h @ W1.T) * (h @ W3.T)) @ W2.T
        assert torch.allclose(mlp(h), expected, atol=1e-6)


@pytest.mark.parametrize("shape, params", [(LLAMA2_7B, 6_738_415_616), (LLAMA3_8B, 8_030_261_248)])
def test_param_counts_equal_the_published_llama_models(shape, params):
    """pre is Llama's own block: the counts of Meta's Llama 2 7B and Llama 3 8B (grouped-query),
    exactly."""
    assert count_params("pre", **shape) == params


@pytest.mark.parametrize("mode, extra", [
    ("post", -4096), ("pre", 0), ("deep", -4096), ("sandwich", 32 * 2 * 4096), ("geonorm", 0),
    ("simplenorm", 32 * (-2 * 4096 + 4096 + 1024 + 1024 + 4096 + 14336 + 14336 + 4096)),
    ("lns", 0), ("mixln", 0), ("reorder", 0), ("hybrid", 32 * (-4096 + 3 * 128)),
])
def test_param_count_of_every_mode_on_llama(mode, extra):
    """Every mode's norm gains on the Llama 3 8B shape (d 4096, k and v 1024 wide, SwiGLU 14336):
    post and deep drop ln_f; sandwich and reorder have two output norms per block instead of ln_1
    and ln_2 (reorder: none before f); simplenorm drops ln_1 and ln_2 and adds norms after W_q, W_k,
    W_v, W_o, W₁, W₃ and W₂; hybrid drops ln_1 and adds q, k and v gains of the head size 128
    (shared by the heads)."""
    assert count_params(mode, **LLAMA3_8B) == 8_030_261_248 + extra


def test_ngpt_param_count_on_llama():
    """§13.6 N8 on Llama 2 7B (ngpt needs n_kv_head = n_head): no norm gains (2L + 1 of d); per
    block α_A, α_M, s_qk (d each), s_u and s_v (SwiGLU's 11008 each); s_z (V). Llama's head is
    untied already."""
    L, d, h, V = 32, 4096, 11008, 32000
    assert (count_params("ngpt", **LLAMA2_7B)
            == 6_738_415_616 - (2 * L + 1) * d + L * (3 * d + 2 * h) + V)


# ---------------------------------------------------------------- torchtitan's init

@pytest.mark.parametrize("mode", ["pre", "post", "sandwich", "simplenorm"])
def test_llama_logits_at_init_have_unit_variance(mode):
    """The untied head of std d^-½ reads the final norm's unit-RMS features: logits of variance
    about 1."""
    model = build(mode, arch="llama", vocab_size=50304, n_embd=128)
    with torch.no_grad():
        logits, _ = model(batch(model.config, B=4)[0], all_logits=True)
    assert abs(logits.var(-1).mean().item() - 1) < 0.1


def test_torchtitan_init_stds():
    torch.manual_seed(0)
    L, d = 4, 256
    model = GPT(GPTConfig(arch="llama", n_layer=L, n_head=4, n_embd=d, block_size=16,
                          vocab_size=1000))
    E = model.transformer.wte.weight
    assert abs(E.mean().item()) < 0.01 and abs(E.std().item() - 1.0) < 0.02  # E ~ N(0, 1)
    head, cut = model.lm_head.weight, 3 * d ** -0.5
    # truncated at ±3σ, not narrower
    assert head.abs().max() <= cut and head.abs().max() > 0.95 * cut
    # a ±3σ cut keeps 0.9866 of the std
    assert abs(head.std().item() / (0.9866 * d ** -0.5) - 1) < 0.02
    for l, block in enumerate(model.transformer.h):
        small = 0.02 / math.sqrt(2 * (l + 1))  # l 0-based
        q, k, v = block.attn.c_attn.weight.split(block.attn.sizes)
        want = [(q, 0.02), (k, 0.02), (v, 0.02), (block.mlp.c_fc.weight, 0.02),
                (block.attn.c_proj.weight, small), (block.mlp.c_proj.weight, small),
                (block.mlp.c_up.weight, small)]
        for i, (w, std) in enumerate(want):
            assert abs(w.std().item() / std - 1) < 0.03, (l, i)
    for name, p in model.named_parameters():
        # norm gains 1, and no biases at all
        assert p.dim() == 2 or torch.equal(p, torch.ones_like(p)), name


def test_deep_init_stds_on_llama_put_beta_on_v_o_and_all_three_ffn_matrices():
    torch.manual_seed(0)
    L, d = 12, 256
    model = GPT(GPTConfig(arch="llama", norm_mode="deep", n_layer=L, n_head=4, n_embd=d,
                          block_size=16, vocab_size=1000, multiple_of=64))
    beta, h = M.deepnorm_constants(L)[1], M.swiglu_width(model.config)  # h = 704
    for block in model.transformer.h[:2]:
        q, k, v = block.attn.c_attn.weight.split(block.attn.sizes)
        # Xavier-normal: gain·√(2/(fan_in + fan_out))
        want = [(q, 1 / math.sqrt(d)), (k, 1 / math.sqrt(d)), (v, beta / math.sqrt(d)),
                (block.attn.c_proj.weight, beta / math.sqrt(d))]
        want += [(w, beta * math.sqrt(2 / (d + h)))
                 for w in (block.mlp.c_fc.weight, block.mlp.c_up.weight, block.mlp.c_proj.weight)]
        for i, (w, std) in enumerate(want):
            assert abs(w.std().item() / std - 1) < 0.05, i
    # the embedding keeps llama's init
    assert abs(model.transformer.wte.weight.std().item() - 1.0) < 0.02


# ---------------------------------------------------------------- grouped-query attention

@pytest.mark.parametrize("mode", ["pre", "simplenorm"])
def test_grouped_query_attention_equals_attention_with_each_kv_head_repeated(mode):
    """n_kv_head = 2 of 4: each key/value head serves two query heads. Copying its weights into both
    heads of a full multi-head model gives the same logits (simplenorm's k and v norms see the
    repeated vector, whose RMS is the same)."""
    gqa = build(mode, arch="llama", n_kv_head=2).double()
    mha = build(mode, arch="llama").double()
    hs = 16
    state = gqa.state_dict()
    for name, w in gqa.state_dict().items():
        # rows [q (64) | k (32) | v (32)] -> [q | k k' | v v'] per head
        if name.endswith("c_attn.weight"):
            q, k, v = w.split((64, 32, 32))
            repeat = lambda t: t.view(2, hs, -1).repeat_interleave(2, dim=0).reshape(64, -1)
            state[name] = torch.cat((q, repeat(k), repeat(v)))
        if name.endswith(("k_norm.weight", "v_norm.weight")):
            state[name] = w.view(2, hs).repeat_interleave(2, dim=0).flatten()
    mha.load_state_dict(state)
    idx, targets = batch(gqa.config)
    with torch.no_grad():
        assert torch.allclose(gqa(idx, targets)[0], mha(idx, targets)[0], atol=1e-10)
    assert (gqa.get_num_params()
            == mha.get_num_params() - 3 * 2 * 32 * 64 - (3 * 2 * 32 if mode == "simplenorm" else 0))


# ---------------------------------------------------------------- tie_embeddings

def test_tie_embeddings_defaults_to_the_family_and_sets_the_embedding_init():
    """Tied, E is also the head and keeps std 0.02; untied (either family), E ~ N(0, 1) and the head
    is trunc-normal d^-½ (torchtitan's)."""
    for arch, tie, tied in (("gpt2", None, True), ("llama", None, False), ("gpt2", False, False),
                            ("llama", True, True)):
        model = build("pre", arch=arch, tie_embeddings=tie, vocab_size=1000)
        assert (model.config.tied == tied
                and (model.lm_head.weight is model.transformer.wte.weight) == tied)
        assert (abs(model.transformer.wte.weight.std().item() - (0.02 if tied else 1.0))
                < 0.05 * (0.02 if tied else 1))
        if not tied:
            assert model.lm_head.weight.abs().max() <= 3 * 64 ** -0.5
    untied, tied = build("pre", tie_embeddings=False), build("pre")
    assert (untied.get_num_params(non_embedding=False)
            == tied.get_num_params(non_embedding=False) + 65 * 64)
    # E, a lookup, is no compute parameter when untied
    assert untied.get_num_params() == tied.get_num_params()


def test_a_tied_head_gives_post_deep_and_geonorm_a_copy_bias_at_gpt2_width():
    """§11: their residual stream stays aligned with E[t] at init, and the tied head reads
    E[t]·E[t] back: at d 768 the next token is "this one again" with probability 0.39–0.46, where
    pre, sandwich and simplenorm give it ~1e-5 (1/V). Untied, post loses it: the bias is the head's
    reading E[t] back, whatever the mode, and test_model.py's sweep checks that an untied head is a
    tensor of its own in every specified mode (an untied build costs 7 s here, most of it the
    head's init). Two blocks show it as well as GPT-2 small's twelve."""
    tied = {mode: copy_probability(mode, True) for mode in NORM_MODES[:6]}  # §13's: the next test
    assert all(tied[m] > 0.3 for m in ("post", "deep", "geonorm")), tied
    assert all(tied[m] < 1e-3 for m in ("pre", "sandwich", "simplenorm")), tied
    assert copy_probability("post", False) < 1e-3


def test_which_of_the_lab_schemes_have_the_copy_bias():
    """§13.2, §13.3: Mix-LN's post blocks (here α = 0.5 of 2) and pre + embed_norm keep the
    stream aligned with E[t], as post does (0.37 each); hybrid and reorder do not (measured too:
    lns, ngpt, DyT below 1e-4, Peri-LN 0.0025, its unit-RMS branch outputs diluting E[t]). Untied,
    none has it (mixln 3e-5): the test above."""
    biased = {"mixln": copy_probability("mixln", True, mixln_alpha=0.5),
              "pre+embed_norm": copy_probability("pre", True, embed_norm=True)}
    unbiased = {mode: copy_probability(mode, True) for mode in ("reorder", "hybrid")}
    assert all(p > 0.3 for p in biased.values()), biased
    assert all(p < 3e-3 for p in unbiased.values()), unbiased
