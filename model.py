"""normgpt's GPT: nanoGPT's GPT-2, or a Llama-style block, with fifteen places to put the norm.

A norm mode is an equation: a branch of `Block.join`, which joins a sub-layer f (attention or MLP)
to the residual stream x. docs/spec.md is the specification; § in comments refer to its sections.

    pre         x + f(LN(x))                          GPT-2 / nanoGPT
    post        LN(x + f(x))                          Vaswani et al. 2017; GeoNorm Eq. 1
    deep        LN(α·x + f(x)), α = (2N)^¼            DeepNet (arXiv 2203.00555)
    sandwich    x + LN(f(LN(x)))                      CogView (arXiv 2105.13290)
    geonorm     exp_x(a_k·v), v = f(LN(x)) ⟂ x        GeoNorm Eq. 3, 5 (arXiv 2601.22095)
    simplenorm  x + f(x), f normalizes after every W  SimpleGPT §4.1 (arXiv 2602.01212)
    lns         x + f(LN(x)/√k)                       LayerNorm Scaling (arXiv 2502.05795)
    mixln       post in blocks k ≤ ⌊αL⌋, pre after    Mix-LN (arXiv 2412.13795)
    reorder     x + LN(f(x))                          OLMo 2 (arXiv 2501.00656)
    hybrid      z + f(z), z = x (QKV-norm in f)       HybridNorm (arXiv 2503.04598)
                or z = LN(x) (MLP)
    ngpt        Norm(x + |α|⊙(Norm(f(x)) − x))        nGPT (arXiv 2410.01131)
    normformer  x + LN(f(LN(x))), f head-scaled;      NormFormer (arXiv 2110.09456)
                x + f(LN(x)), LN inside the MLP
    subln       x + f(LN(x)), LN before W_o and W₂    Sub-LN / Magneto (arXiv 2210.06423)
    rezero      x + α·f(x), no norm at all            ReZero (arXiv 2003.04887)

Switches act on the placements they fit (§13, §14): embed_norm, a norm on x_0 (Peri-LN is
sandwich with it); norm_type 'dyt' or 'derf', a pointwise γ⊙tanh(α·x) + β (arXiv 2503.10622) or
γ⊙erf(α·x + s) + β (arXiv 2512.10938) in place of the family's norm; res_scale, a learned scale
on the additive joins (LayerScale, the speedruns' lambdas); x0_mix, nanochat's λ·x + μ·x_0 before
each block; gpas, x − SiLU(g)·stopgrad(x) after the residual add; qk_norm, over all heads or per
head.
Besides its branch, a mode or switch acts in these places, and nowhere else:
    GPTConfig            its settings (geo_*, sandwich_*, lns_*, mixln_*, ...) and their checks
    rms_norm             the ε of simplenorm's and hybrid's norms
    family_norm          DyT or Derf under norm_type; subln's, normformer's inner norms stay norms
    CausalSelfAttention  simplenorm's norms after W_q, W_k, W_v, W_o; hybrid's per head; qk_norm;
                         ngpt's unit q, k; subln's norm before W_o; normformer's head scale
    MLP                  simplenorm's norms after W₁, W₃, W₂; ngpt's s_v, s_u; subln's and
                         normformer's norm before W₂
    Block.__init__       the block's norms, constants (α, a_k, 1/√k), its mode (mixln, hybrid_star),
                         its learned scales (ngpt's α, rezero's α, res_scale's, x0_mix's, w_resid,
                         GPAS's g)
    Block.add, gpas      res_scale's scales and GPAS, on the additive joins
    Block.forward        x0_mix, before the block
    GPT.__init__         the final norm ln_f (none: post, deep, ngpt, rezero); ln_emb, DyT's s,
                         ngpt's s_z
    GPT.init_weights     deep's Xavier init with gain β, sandwich's gains, lns's plain W_o, subln's
                         gain, ngpt's projection
    GPT.embed, forward   geonorm's radius √d, DyT's s, ngpt's unit x_0 and its logit scale s_z
    normalize_weights    ngpt's projection of every matrix onto unit vectors, also after each step

The block family, `arch` (§11), swaps the parts around that placement and keeps the placement:
    gpt2   learned positions   GELU MLP, 4d           LayerNorm   tied head     nanoGPT init
    llama  rotary q and k      SwiGLU MLP, about 8d/3 RMSNorm     untied head   torchtitan init
"""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

ARCHS = ("gpt2", "llama")
NORM_MODES = (
    "post", "pre", "deep", "sandwich", "geonorm", "simplenorm",  # version 2's
    "lns", "mixln", "reorder", "hybrid", "ngpt",  # §13's
    "normformer", "subln", "rezero",  # §14's
)
# the family's LayerNorm or RMSNorm, or a pointwise function in its place: Dynamic Tanh or erf
NORM_TYPES = ("norm", "dyt", "derf")
# where DyT and Derf go: before f or on f(x), never a norm after the add
POINTWISE_MODES = ("pre", "sandwich", "geonorm", "lns", "reorder", "hybrid", "normformer", "subln")
# the additive joins x + y, which res_scale scales and x0_mix feeds (§14.2)
ADDITIVE_MODES = ("pre", "sandwich", "lns", "reorder", "simplenorm", "normformer", "subln")
GPAS_MODES = ("pre", "sandwich", "lns", "deep", "mixln")  # where GPAS's authors ran it (§14.5)
RES_SCALES = ("none", "layerscale", "lambda")
QK_NORMS = (False, True, "none", "all_heads", "per_head")  # True is all_heads, False none (§14.7)
GEO_DECAYS = ("harmonic", "sqrt", "linear", "none")
GEO_RADII = ("sqrt_d", "embed")
FP32_MAX = torch.finfo(torch.float32).max  # a float setting beyond it is inf in the model's math


@dataclass
class GPTConfig:
    # Each field's comment is its description, here once: train.py --help shows it

    block_size: int = 1024  # tokens per sequence: the model's context length
    vocab_size: int = 50304  # GPT-2's 50257 padded up to a multiple of 64 for speed
    n_layer: int = 12  # blocks
    n_head: int = 12  # attention heads per block
    n_embd: int = 768  # width of the residual stream
    dropout: float = 0.0  # dropout probability; 0 for pretraining
    bias: bool = False  # biases in Linears and LayerNorms; simplenorm and llama require False
    # the block family (§11): gpt2 (learned positions, GELU, LayerNorm) or llama (rotary,
    # SwiGLU, RMSNorm)
    arch: str = "gpt2"
    # the head is the token embedding E; None: the family's choice (gpt2 tied, llama and ngpt not)
    tie_embeddings: bool | None = None
    # key/value heads, fewer for grouped-query attention; None: n_head
    n_kv_head: int | None = None
    rope_theta: float = 10000.0  # llama: the rotary base θ
    multiple_of: int = 256  # llama: the SwiGLU width is rounded up to a multiple of this
    # llama: scales the SwiGLU width before rounding; None: 1
    ffn_dim_multiplier: float | None = None
    norm_mode: str = "pre"  # the placement: one of NORM_MODES, with equations in the docstring
    # epsilon of the norms; None: 1e-5, but 1e-6 for simplenorm's and hybrid's under a tied
    # 0.02 E
    norm_eps: float | None = None
    # RMSNorm on q and k, any mode: True or 'all_heads' over all heads (OLMo 2), 'per_head'
    # (Qwen3)
    qk_norm: bool | str = False
    geo_alpha: float = 1.0  # geonorm: base step size a
    # geonorm: step size over depth a_k: harmonic a/k, sqrt a/√k, linear a(L-k+1)/L, or none a
    geo_decay: str = "harmonic"
    geo_input_norm: bool = True  # geonorm: LayerNorm before each sub-layer (§6.2 item 1)
    # geonorm: the sphere's radius: sqrt_d (√d), or embed (the embedding's own norm)
    geo_radius: str = "sqrt_d"
    # geonorm: smooth clamp of the rotation angle θ (radians); None: off
    geo_max_angle: float | None = None
    # sandwich: output-norm gains scaled by c/√L (Pangu Ultra's DSSN)
    sandwich_depth_scaled: bool = False
    # gpt2: GELU's tanh approximation, as OpenAI's GPT-2 has it (init_from=gpt2 sets it)
    gelu_tanh: bool = False
    # lns: keep the family's depth-scaled init of W_o, W₂, W₃ (off: plain 0.02, as LNS, §13.1)
    lns_scaled_init: bool = False
    # mixln: blocks 1..⌊αL⌋ post-norm, the rest pre-norm (§13.2)
    mixln_alpha: float = 0.25
    # hybrid: block 1 pre-norm, keeping QKV-norm (HybridNorm*, §13.4)
    hybrid_star: bool = False
    # the family's norm on the embedding x_0 (Peri-LN: norm_mode='sandwich' with embed_norm, §13.3)
    embed_norm: bool = False
    # the norms: 'norm' (the family's LayerNorm or RMSNorm), or DyT 'dyt' (§13.5) or Derf 'derf'
    # (§14.1) in their place
    norm_type: str = "norm"
    dyt_alpha_attn: float = 0.8  # dyt: α at init of ln_1, the norm before attention
    # dyt: α at init of ln_2 (before the MLP), the output norms and ln_emb
    dyt_alpha_ffn: float = 0.2
    dyt_alpha_final: float = 0.2  # dyt: α at init of ln_f, the final norm
    # derf: α at init of ln_1, the norm before attention (the authors' GPT-2 patch, §14.1)
    derf_alpha_attn: float = 1.0
    # derf: α at init of ln_2 (before the MLP), the output norms and ln_emb
    derf_alpha_ffn: float = 1.0
    derf_alpha_final: float = 1.0  # derf: α at init of ln_f, the final norm
    derf_shift_init: float = 0.0  # derf: the shift s inside erf at init
    # dyt, derf: a bias β; None: Derf always, DyT iff bias
    pointwise_bias: bool | None = None
    # additive joins: none, layerscale (x + λ⊙y) or lambda (λ_res·x + λ_post·y) (§14.2)
    res_scale: str = "none"
    layerscale_init: float = 1e-4  # res_scale='layerscale': λ at init (CaiT's class default)
    # nanochat: x ← λ_k·x + μ_k·x_0 before block k, learned (additive joins only, §14.2)
    x0_mix: bool = False
    # normformer: a learned scale on the MLP's skip, --scale-resids (§14.3)
    normformer_scale_resids: bool = False
    # subln: W_v, W_o and the MLP's matrices times √(ln 2L) at init (§14.4)
    subln_init_gain: bool = True
    # GPAS after each residual add: x − SiLU(g)·stopgrad(x) (pre, sandwich, lns, deep, mixln;
    # §14.5)
    gpas: bool = False

    def __post_init__(self):
        self.validate()

    @property
    def tied(self):
        # ngpt's head is untied, as its authors'
        family = self.arch == "gpt2" and self.norm_mode != "ngpt"
        return family if self.tie_embeddings is None else self.tie_embeddings

    @property
    def qk_axis(self):
        """qk_norm as one of 'none', 'all_heads' and 'per_head' (§14.7)."""
        return {False: "none", True: "all_heads"}.get(self.qk_norm, self.qk_norm)

    def validate(self):
        """Raise a one-line ValueError that names the fix for any invalid setting."""
        ints = ("block_size", "vocab_size", "n_layer", "n_head", "n_embd", "multiple_of")
        if self.n_kv_head is not None:
            ints += ("n_kv_head",)
        for name in ints:
            value = getattr(self, name)
            if type(value) is not int or value <= 0:  # exactly int: True is no size
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        choices = (
            ("arch", ARCHS),
            ("norm_mode", NORM_MODES),
            ("geo_decay", GEO_DECAYS),
            ("geo_radius", GEO_RADII),
            ("norm_type", NORM_TYPES),
            ("res_scale", RES_SCALES),
        )
        for name, allowed in choices:
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"unknown {name} {value!r}: choose one of {', '.join(allowed)}")
        # exactly a bool or a str: 1 == True would pass `in`
        if type(self.qk_norm) not in (bool, str) or self.qk_norm not in QK_NORMS:
            raise ValueError(f"unknown qk_norm {self.qk_norm!r}: choose one of False, True, "
                             "'none', 'all_heads' or 'per_head'")
        # inf or NaN would train on, to a frozen or NaN loss; so would a value past FP32_MAX
        for name, value in vars(self).items():
            if type(value) is float and not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
            if type(value) is float and abs(value) > FP32_MAX:
                raise ValueError(f"{name} must lie within float32's range (±{FP32_MAX:.4g}), "
                                 f"got {value!r}")
        for bad, message in self.invalid_combinations():
            if bad:
                raise ValueError(message)

    def invalid_combinations(self):
        """(bad, the one-line message naming the fix) for each rule between settings."""
        hs = self.n_embd // self.n_head
        mode = self.norm_mode
        kind = {"dyt": "DyT", "derf": "Derf"}.get(self.norm_type)
        alphas = (self.dyt_alpha_attn, self.dyt_alpha_ffn, self.dyt_alpha_final)
        alphas += (self.derf_alpha_attn, self.derf_alpha_ffn, self.derf_alpha_final)
        grouped = (self.n_kv_head or self.n_head) != self.n_head
        return (
            (self.n_embd % self.n_head,
             f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}: "
             "choose n_head among the divisors of n_embd"),
            (self.n_head % (self.n_kv_head or 1),
             f"n_head={self.n_head} is not a multiple of n_kv_head={self.n_kv_head}: "
             "choose n_kv_head among the divisors of n_head"),
            (self.arch == "llama" and hs % 2,
             f"rotary embeddings turn pairs of features, but n_embd/n_head = {hs} is odd: "
             "choose n_head so that the head size is even"),
            (mode == "simplenorm" and self.bias,
             "simplenorm needs bias=False (a bias breaks the scale invariance of Norm(Wx))"),
            (self.arch == "llama" and self.bias,
             "arch='llama' has no biases: set bias=False"),
            (not 0.0 <= self.dropout < 1.0,
             f"dropout must be in [0, 1), got {self.dropout!r}"),
            (self.geo_alpha < 0,
             f"geo_alpha must be >= 0, got {self.geo_alpha!r}"),
            (self.rope_theta <= 0,
             f"rope_theta must be > 0, got {self.rope_theta!r}"),
            ((self.norm_eps or 0) < 0,
             f"norm_eps must be None or >= 0, got {self.norm_eps!r}"),
            (min(alphas[:3]) <= 0,
             "dyt_alpha_attn, dyt_alpha_ffn and dyt_alpha_final must be > 0: "
             "tanh(0·x) passes nothing"),
            (min(alphas[3:]) <= 0,
             "derf_alpha_attn, derf_alpha_ffn and derf_alpha_final must be > 0: "
             "erf(0·x + s) passes nothing"),
            (not 0 <= self.mixln_alpha <= 1,
             f"mixln_alpha must be in [0, 1], got {self.mixln_alpha!r}"),
            (kind and mode not in POINTWISE_MODES,
             f"norm_type={self.norm_type!r} does not fit norm_mode={mode!r}: "
             f"{kind} replaces the norms of {', '.join(POINTWISE_MODES)} only"),
            (self.qk_axis != "none" and mode in ("hybrid", "ngpt"),
             f"{mode} normalizes q and k per head already: set qk_norm=False"),
            (self.qk_axis == "per_head" and mode == "simplenorm",
             "simplenorm normalizes q and k over all heads already (§7.1): set qk_norm=False"),
            (mode == "rezero" and self.embed_norm,
             "rezero has no norms, so none on x_0 either: set embed_norm=False"),
            (mode == "ngpt" and (self.bias or self.embed_norm or grouped),
             "ngpt needs bias=False, embed_norm=False and n_kv_head=None: its rows are "
             "directions, x_0 is a unit vector already, q and k share s_qk"),
            (self.geo_max_angle is not None and self.geo_max_angle <= 0,
             f"geo_max_angle must be None or > 0, got {self.geo_max_angle!r}"),
            (self.ffn_dim_multiplier is not None and self.ffn_dim_multiplier <= 0,
             f"ffn_dim_multiplier must be None or > 0, got {self.ffn_dim_multiplier!r}"),
            (self.res_scale != "none" and mode not in ADDITIVE_MODES,
             f"res_scale={self.res_scale!r} does not fit norm_mode={mode!r}: it scales "
             f"the additive joins of {', '.join(ADDITIVE_MODES)} only; set res_scale='none'"),
            (self.x0_mix and mode not in ADDITIVE_MODES,
             f"x0_mix does not fit norm_mode={mode!r}: it mixes x_0 into the additive "
             f"joins of {', '.join(ADDITIVE_MODES)} only; set x0_mix=False"),
            (self.gpas and mode not in GPAS_MODES,
             f"gpas does not fit norm_mode={mode!r}: GPAS's authors ran it on "
             f"{', '.join(GPAS_MODES)} only; set gpas=False"),
        )


def at_least_fp32(t):
    """t in fp32, or kept in fp64: norms need fp32's precision, and fp64 tests need their own."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


class RMSNorm(nn.Module):
    """γ ⊙ x / √(mean(x²) + ε), computed in fp32 and cast back (§1)."""

    def __init__(self, ndim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.eps = eps

    def forward(self, x):
        weight = at_least_fp32(self.weight)
        return F.rms_norm(at_least_fp32(x), x.shape[-1:], weight, self.eps).type_as(x)


class DyT(nn.Module):
    """Dynamic Tanh γ ⊙ tanh(α·x) + β, α a learned scalar, β present or not (§13.5)."""

    def __init__(self, ndim, alpha, bias):
        super().__init__()
        self.alpha = nn.Parameter(torch.tensor([float(alpha)]))
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def squash(self, z):
        return torch.tanh(z)

    def forward(self, x):  # elementwise, no reduction: no ε
        y = self.weight * self.squash(self.alpha * at_least_fp32(x))
        return (y if self.bias is None else y + self.bias).type_as(x)


class Derf(DyT):
    """Dynamic erf γ ⊙ erf(α·x + s) + β: DyT with erf for tanh and a learned shift s (§14.1)."""

    def __init__(self, ndim, alpha, bias, shift):
        super().__init__(ndim, alpha, bias)
        self.shift = nn.Parameter(torch.tensor([float(shift)]))

    def squash(self, z):
        return torch.erf(z + self.shift)


def family_norm(config, ndim, role):
    """The family's norm, LayerNorm or RMSNorm, ε 1e-5 (§11). Under norm_type 'dyt' or 'derf' a DyT
    or Derf with α at <norm_type>_alpha_<role>: role attn (ln_1), final (ln_f) or ffn (ln_2, the
    output norms, ln_emb) (§13.5, §14.1). Role inner, the norms inside f of subln and normformer,
    stays a norm: no source replaces them (§14.3, §14.4)."""
    eps = 1e-5 if config.norm_eps is None else config.norm_eps
    if config.norm_type != "norm" and role != "inner":
        alpha = getattr(config, f"{config.norm_type}_alpha_{role}")
        bias = config.pointwise_bias
        if config.norm_type == "dyt":  # β iff the norm it replaces has one, unless pointwise_bias
            return DyT(ndim, alpha, config.bias if bias is None else bias)
        # β always, as the authors' patch, unless pointwise_bias=False
        return Derf(ndim, alpha, bias is not False, config.derf_shift_init)
    if config.arch == "gpt2":
        return nn.LayerNorm(ndim, eps, bias=config.bias)
    return RMSNorm(ndim, eps)


def rms_norm(config, ndim):
    """The RMSNorm of QK-norm, simplenorm and hybrid: ε 1e-5, or 1e-6 for simplenorm and hybrid
    under a tied 0.02 E, whose projections in block 1 are tiny (§7.3, §13.4)."""
    tiny_inputs = config.norm_mode in ("simplenorm", "hybrid") and config.tied
    default_eps = 1e-6 if tiny_inputs else 1e-5
    return RMSNorm(ndim, default_eps if config.norm_eps is None else config.norm_eps)


def unit(t):
    """t/‖t‖ over the last dim, in fp32 (nGPT's Norm; bf16 would leave ‖·‖ − 1 at ~4e-3); 0 stays
    0."""
    return F.normalize(at_least_fp32(t), dim=-1)


def geodesic_step(x, s, a, max_angle=None):
    """exp_x(a·v), v = Proj_x(s) = s − c·x, c = x·s/‖x‖²: the great circle through x by arc length
    a‖v‖ (Eq. 3, 5), as cos θ·x + a·sinc(θ)·v, θ = a‖v‖/‖x‖ (§6.2): the paper's cos θ·x +
    ‖x‖·sin θ·v/‖v‖, smooth at v = 0. Keeps ‖x‖. Three dot products a token give every scalar
    (‖v‖² = ‖s‖² − c·x·s, Pythagoras), so v is never formed: one pass over x and s, then
    y = (cos θ − a·sinc θ·c)·x + a·sinc θ·s (4% a step)."""
    dtype = x.dtype
    # bf16's ~4e-3 precision would break ‖x‖
    x = at_least_fp32(x)
    s = at_least_fp32(s)
    dot = lambda u, w: (u * w).sum(-1, keepdim=True)  # (B, T, 1)
    # the 1e-12s keep values and gradients finite at 0
    xx = dot(x, x) + 1e-12
    xs = dot(x, s)
    ss = dot(s, s)
    c = xs / xx  # Proj_x(s) = s − c·x, tangent at x (Eq. 5)
    r = xx.sqrt()  # the radius
    v_norm = ((ss - c * xs).clamp_min(0) + 1e-12).sqrt()  # ‖v‖ (the clamp: rounding)
    theta = a * v_norm / r  # rotation angle = arc length / radius
    if max_angle is not None:  # smooth clamp θ -> θ/(1 + θ/m) < m, by shortening the step
        a = a / (1 + theta / max_angle)
        theta = a * v_norm / r
    step = a * torch.sinc(theta / math.pi)  # a·sinc θ; torch.sinc(t) = sin(πt)/(πt)
    # cos θ·x + a·sinc θ·(s − c·x)
    return ((torch.cos(theta) - step * c) * x + step * s).to(dtype)


def rotary_table(config):
    """(block_size, hs/2, 2): cos, sin of p·θ_i, θ_i = rope_theta^(-2i/hs), 0-based i (RoFormer
    Eq. 34)."""
    hs = config.n_embd // config.n_head
    exponents = torch.arange(0, hs, 2, dtype=torch.float64) / hs
    theta = config.rope_theta ** -exponents  # (hs/2,)
    positions = torch.arange(config.block_size, dtype=torch.float64)
    angles = torch.outer(positions, theta)  # (block_size, hs/2)
    return torch.stack((angles.cos(), angles.sin()), dim=-1).float()


def rotate(x, rope):
    """Rotate each pair (x_2i, x_2i+1) of x (B, nh, T, hs) by its position's angle p·θ_i, rope
    (T, hs/2, 2) holding their cos and sin (RoFormer Eq. 34). q·k then depends on positions only
    through p − s."""
    cos, sin = rope.unbind(-1)  # (T, hs/2) each
    # each pair's coordinates, (B, nh, T, hs/2)
    x1, x2 = at_least_fp32(x).unflatten(-1, (-1, 2)).unbind(-1)
    turned = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return turned.flatten(-2).type_as(x)


def swiglu_width(config):
    """SwiGLU's width: 2/3 of 4d (× ffn_dim_multiplier) up to a multiple_of, so that 3 matrices
    cost GELU's 2."""
    hidden = int((config.ffn_dim_multiplier or 1) * int(8 * config.n_embd / 3))
    return config.multiple_of * math.ceil(hidden / config.multiple_of)


def deepnorm_constants(n_layer):
    """DeepNet Table 1, decoder-only, N layers: α = (2N)^¼ scales the residual, β = (8N)^-¼ the
    init."""
    return (2 * n_layer) ** 0.25, (8 * n_layer) ** -0.25


def gpas(x, gate):
    """GPAS, x − SiLU(g)·stopgrad(x): the value (1 − SiLU(g))·x, the gradient to x the identity
    (§14.5). No gate: x."""
    if gate is None:
        return x
    return x - F.silu(gate) * x.detach()


class CausalSelfAttention(nn.Module):
    """Causal self-attention, grouped-query when n_kv_head < n_head, with a key/value cache for
    generate."""

    def __init__(self, config):
        super().__init__()
        d = config.n_embd
        self.n_head = config.n_head
        self.n_kv_head = config.n_kv_head or config.n_head
        # the width of k and of v: d, or less with grouped-query
        kv = self.n_kv_head * d // self.n_head
        self.sizes = (d, kv, kv)
        # q, k, v for all heads in one matmul
        self.c_attn = nn.Linear(d, d + 2 * kv, bias=config.bias)
        self.c_proj = nn.Linear(d, d, bias=config.bias)
        mode = config.norm_mode
        hs = d // self.n_head
        # simplenorm: an RMSNorm after every W (q, k, v, o), over all heads (§7.1); hybrid: an
        # RMSNorm on each head's q, k and v, one gain (hs,) shared by the heads (§13.4); qk_norm: on
        # q and k, over all heads (OLMo 2) or on each head (Qwen3) (§14.7)
        self.per_head = mode == "hybrid" or config.qk_axis == "per_head"
        qkv = mode in ("simplenorm", "hybrid")
        qk = qkv or config.qk_axis != "none"

        def norm(used, width):
            if not used:
                return nn.Identity()
            return rms_norm(config, hs if self.per_head else width)

        self.q_norm = norm(qk, d)
        self.k_norm = norm(qk, kv)
        self.v_norm = norm(qkv, kv)
        self.o_norm = norm(mode == "simplenorm", d)
        # ngpt: q and k unit per head times s_qk (stored 1/√d, used ×√d: 1 at init), scores ×√hs
        # (§13.6)
        self.s_qk = nn.Parameter(torch.full((d,), d ** -0.5)) if mode == "ngpt" else None
        self.scale = math.sqrt(hs) if mode == "ngpt" else None  # None: SDPA's 1/√hs
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)
        self.block_size = config.block_size
        self.kv_cache = None  # generating: the (k, v) buffers
        # subln: a norm on the joined heads before W_o (§14.4)
        self.inner_ln = family_norm(config, d, "inner") if mode == "subln" else nn.Identity()
        # normformer: a scale for each of W_o's output chunks of hs features, as fairseq (§14.3)
        self.head_scale = nn.Parameter(torch.ones(self.n_head)) if mode == "normformer" else None

    def forward(self, x, pos=0, rope=None):
        """x (B, T, C) at positions pos..pos+T-1; rope: their rows of the rotary table (llama), or
        None."""
        B, T, C = x.size()
        hs = C // self.n_head
        # split before normalizing: each is its own W
        q, k, v = self.c_attn(x).split(self.sizes, dim=2)
        if self.per_head:  # (B, T, heads, hs), so that each head is normalized on its own
            q, k, v = (t.unflatten(-1, (-1, hs)) for t in (q, k, v))
        heads = lambda t: t.view(B, T, -1, hs).transpose(1, 2)  # (B, nh or n_kv, T, hs)
        q = heads(self.q_norm(q))
        k = heads(self.k_norm(k))
        v = heads(self.v_norm(v))
        if rope is not None:  # after any norm of q and k, as SimpleGPT's code does (§11)
            q = rotate(q, rope)
            k = rotate(k, rope)
        if self.s_qk is not None:  # ngpt: after rotary, as its code (a rotation keeps norms anyway)
            s_qk = (self.s_qk * math.sqrt(C)).view(self.n_head, 1, hs)  # (nh, 1, hs)
            q = (s_qk * unit(q)).type_as(v)
            k = (s_qk * unit(k)).type_as(v)
        if self.kv_cache is not None:
            k, v = self.cached(k, v, pos, T)
        # Query i, at position pos+i, sees keys 0..pos+i: the causal mask when no keys are cached
        # before it, no mask for one new token, and for a chunk after cached keys the causal mask
        # shifted right by them.
        cached = k.size(2) - T
        mask = None
        if cached and T > 1:
            mask = torch.ones(T, k.size(2), dtype=torch.bool, device=x.device).tril(cached)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                           dropout_p=self.dropout * self.training,
                                           is_causal=mask is None and T > 1, scale=self.scale,
                                           enable_gqa=k.size(1) < q.size(1))
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C): heads side by side again
        y = self.c_proj(self.inner_ln(y))
        if self.head_scale is not None:  # normformer: (B, T, nh, hs) chunks of W_o's output
            y = (y.view(B, T, self.n_head, hs) * self.head_scale[:, None]).view(B, T, C)
        return self.resid_dropout(self.o_norm(y))

    def cached(self, k, v, pos, T):
        """Generating: k, v (B, n_kv, T, hs) of positions pos..pos+T-1 written into the cache, and
        the keys and values of positions 0..pos+T-1 (rotated, as written) read back."""
        if pos == 0:  # a (re)prefill: fresh buffers with room for a window
            B = k.size(0)
            # (B, n_kv, block_size, hs) each
            self.kv_cache = tuple(t.new_zeros(B, t.size(1), self.block_size, t.size(3))
                                  for t in (k, v))
        cache_k, cache_v = self.kv_cache
        cache_k[:, :, pos:pos + T] = k
        cache_v[:, :, pos:pos + T] = v
        return cache_k[:, :, :pos + T], cache_v[:, :, :pos + T]  # (B, n_kv, pos+T, hs)


class MLP(nn.Module):
    """gpt2: W₂ GELU(W₁h), 4d wide. llama: SwiGLU, W₂(SiLU(W₁h) ⊙ W₃h) (Shazeer 2020, FFN_SwiGLU
    with Swish₁ = SiLU). simplenorm: an RMSNorm after W₁ and W₃ (over the hidden width) and after
    W₂ (§7.1). ngpt: W₁h and W₃h scaled by s_v and s_u, stored 1 and used ×√d, before the
    nonlinearity (§13.6). subln and normformer: a norm over the hidden width before W₂ (§14.3,
    §14.4)."""

    def __init__(self, config):
        super().__init__()
        d = config.n_embd
        llama = config.arch == "llama"
        mode = config.norm_mode
        simple = mode == "simplenorm"
        hidden = swiglu_width(config) if llama else 4 * d
        self.c_fc = nn.Linear(d, hidden, bias=config.bias)  # W₁
        self.fc_norm = rms_norm(config, hidden) if simple else nn.Identity()
        gelu = nn.GELU(approximate="tanh" if config.gelu_tanh else "none")
        self.act = nn.SiLU() if llama else gelu
        self.c_up = nn.Linear(d, hidden, bias=False) if llama else None  # W₃, the gated linear unit
        self.up_norm = rms_norm(config, hidden) if simple and llama else nn.Identity()
        self.c_proj = nn.Linear(hidden, d, bias=config.bias)  # W₂
        self.proj_norm = rms_norm(config, d) if simple else nn.Identity()
        self.dropout = nn.Dropout(config.dropout)
        self.sqrt_d = math.sqrt(d)
        ngpt = mode == "ngpt"
        self.s_v = nn.Parameter(torch.ones(hidden)) if ngpt else None
        self.s_u = nn.Parameter(torch.ones(hidden)) if ngpt and llama else None
        inner = mode in ("subln", "normformer")
        self.ffn_ln = family_norm(config, hidden, "inner") if inner else nn.Identity()

    def forward(self, x):
        h = self.fc_norm(self.c_fc(x))
        h = self.act(h if self.s_v is None else h * (self.s_v * self.sqrt_d))
        if self.c_up is not None:
            u = self.up_norm(self.c_up(x))
            h = h * (u if self.s_u is None else u * (self.s_u * self.sqrt_d))
        return self.dropout(self.proj_norm(self.c_proj(self.ffn_ln(h))))


class Block(nn.Module):
    """One attention and one MLP sub-layer, each joined to the residual stream by `join`."""

    def __init__(self, config, k):
        super().__init__()
        mode = config.norm_mode
        L = config.n_layer
        d = config.n_embd
        # Mix-LN: post in blocks 1..⌊αL⌋ (the 1e-9 keeps 0.3·10 at 3), pre after (§13.2)
        if mode == "mixln":
            mode = "post" if k <= math.floor(config.mixln_alpha * L + 1e-9) else "pre"
        # HybridNorm*: block 1 pre-norm, keeping QKV-norm
        if mode == "hybrid" and config.hybrid_star and k == 1:
            mode = "pre"
        self.mode = mode
        self.attn = CausalSelfAttention(config)
        self.mlp = MLP(config)

        def norm(used, role):
            return family_norm(config, d, role) if used else nn.Identity()

        # ln_1/ln_2 sit before each sub-layer (pre, sandwich, geonorm, lns, normformer, subln) or
        # after the add (post, deep); hybrid has ln_2 only, on its stream before the MLP. sandwich
        # and reorder normalize f's output, normformer attention's.
        uses_ln = mode in ("pre", "post", "deep", "sandwich", "lns", "normformer", "subln")
        uses_ln = uses_ln or mode == "geonorm" and config.geo_input_norm
        self.ln_1 = norm(uses_ln, "attn")
        self.ln_2 = norm(uses_ln or mode == "hybrid", "ffn")
        out = mode in ("sandwich", "reorder")
        self.ln_1_out = norm(out or mode == "normformer", "ffn")
        self.ln_2_out = norm(out, "ffn")
        self.alpha = deepnorm_constants(L)[0]  # deep's α
        self.lns_scale = 1 / math.sqrt(k)  # lns's 1/√k
        # geonorm: a_k, for both sub-layers (§6.2); k from 1, so a/k is defined
        a = config.geo_alpha
        self.geo_max_angle = config.geo_max_angle
        steps = {"harmonic": a / k, "sqrt": a / math.sqrt(k), "linear": a * (L - k + 1) / L,
                 "none": a}
        self.geo_step = steps[config.geo_decay]
        # ngpt: the eigen learning rates α_A and α_M, stored 1/√d and used ×0.05√d: 0.05 at init
        # (§13.6)
        eigen_lr = lambda: nn.Parameter(torch.full((d,), d ** -0.5)) if mode == "ngpt" else None
        self.alpha_attn = eigen_lr()
        self.alpha_mlp = eigen_lr()
        self.init_scales(config, k)

    def init_scales(self, config, k):
        """§14's learned scales of the stream: each a parameter of at most 1-D (not decayed), or
        None."""
        d = config.n_embd
        L = config.n_layer
        scale_resids = self.mode == "normformer" and config.normformer_scale_resids
        self.w_resid = nn.Parameter(torch.ones(d)) if scale_resids else None  # NormFormer's
        # ReZero's α, one for both sub-layers (the authors' resweight): the identity at 0
        self.resweight = nn.Parameter(torch.zeros(1)) if self.mode == "rezero" else None
        # GPAS's g: the identity at 0
        self.gpas_gate = nn.Parameter(torch.zeros(1)) if config.gpas else None
        layerscale = config.res_scale == "layerscale"  # CaiT's γ_1, γ_2 (§14.2)
        self.ls_1 = nn.Parameter(torch.full((d,), config.layerscale_init)) if layerscale else None
        self.ls_2 = nn.Parameter(torch.full((d,), config.layerscale_init)) if layerscale else None
        # modded-nanogpt's λ_res √1.1 (so 1.1 a block) and λ_post 1, of attention and of the MLP
        lambdas = config.res_scale == "lambda"
        self.resid_lambdas = nn.Parameter(torch.full((2,), math.sqrt(1.1))) if lambdas else None
        self.post_lambdas = nn.Parameter(torch.ones(2)) if lambdas else None
        # nanochat's ramps over the blocks: λ 1.15 → 1.05, μ 0.20 → 0.05 (one block: 1.15, 0.20)
        depth = (k - 1) / max(L - 1, 1)
        mix = lambda value: nn.Parameter(torch.tensor([value])) if config.x0_mix else None
        self.block_lambda = mix(1.15 - 0.10 * depth)
        self.x0_lambda = mix(0.20 - 0.15 * depth)

    def join(self, x, f, norm, out_norm, lr, j):
        """Join sub-layer f to the residual stream x; norm: ln_1 or ln_2; out_norm: f's output norm;
        lr: ngpt's α_A or α_M; j: 0 attention, 1 MLP. mixln and hybrid_star have no branch: __init__
        makes their blocks post or pre."""
        if self.mode == "pre":  # x + f(LN(x))
            return self.add(x, f(norm(x)), j)
        if self.mode == "post":  # LN(x + f(x)); GPAS (mixln's post blocks) on the skip
            return norm(gpas(x, self.gpas_gate) + f(x))
        if self.mode == "deep":  # LN(α·x + f(x))                      DeepNet DeepNorm
            return norm(self.alpha * gpas(x, self.gpas_gate) + f(x))
        if self.mode == "sandwich":  # x + LN(f(LN(x)))                CogView Sandwich-LN
            return self.add(x, out_norm(f(norm(x))), j)
        if self.mode == "geonorm":  # exp_x(a_k·Proj_x f(LN(x)))       GeoNorm Eq. 3, 5
            return geodesic_step(x, f(norm(x)), self.geo_step, self.geo_max_angle)
        if self.mode == "simplenorm":  # x + f(x), Norm(Wx) inside f   SimpleGPT §4.1
            return self.add(x, f(x), j)
        if self.mode == "lns":  # x + f(LN(x)/√k)                      LNS code, OLMo-core
            return self.add(x, f(norm(x) * self.lns_scale), j)
        if self.mode == "reorder":  # x + LN(f(x))                     OLMo 2 (OLMo-core)
            return self.add(x, out_norm(f(x)), j)
        if self.mode == "hybrid":  # z + f(z), z = x (attention, QKV-norm in f) or LN(x) (MLP)
            z = norm(x)  # HybridNorm's code: the MLP's residual carries the normalized stream
            return z + f(z)
        if self.mode == "ngpt":  # Norm(x + |α|⊙(Norm(f(x)) − x)), α used ×0.05√d   NVIDIA/ngpt
            step = lr.abs() * (0.05 * math.sqrt(x.size(-1)))
            return unit(torch.lerp(unit(x), unit(f(x)), step))
        if self.mode == "normformer":  # x + LN(f(LN(x))) (attention); w⊙x + f(LN(x)) (MLP)  fairseq
            skip = x if j == 0 or self.w_resid is None else self.w_resid * x
            return self.add(skip, out_norm(f(norm(x))), j)
        if self.mode == "subln":  # x + f(LN(x)), f with a norm before W_o and W₂   torchscale
            return self.add(x, f(norm(x)), j)
        if self.mode == "rezero":  # x + α·f(x), no norm                ReZero (RZTX)
            return x + self.resweight * f(x)
        raise ValueError(f"unknown norm_mode {self.mode!r}: choose one of {', '.join(NORM_MODES)}")

    def add(self, x, y, j):
        """An additive join's x + y of sub-layer j, with res_scale's scales: x + λ_j⊙y (LayerScale)
        or λ_res,j·x + λ_post,j·y (modded-nanogpt) (§14.2); then GPAS (§14.5)."""
        if self.ls_1 is not None:
            y = (self.ls_1 if j == 0 else self.ls_2) * y
        if self.resid_lambdas is not None:
            x = self.resid_lambdas[j] * x
            y = self.post_lambdas[j] * y
        return gpas(x + y, self.gpas_gate)

    def forward(self, x, pos=0, rope=None, x0=None):
        """x0: the embedding's output, which x0_mix mixes into the stream first (§14.2)."""
        if self.x0_lambda is not None:  # nanochat: x ← λ_k·x + μ_k·x_0
            x = self.block_lambda * x + self.x0_lambda * x0
        attn = lambda h: self.attn(h, pos, rope)
        x = self.join(x, attn, self.ln_1, self.ln_1_out, self.alpha_attn, 0)
        return self.join(x, self.mlp, self.ln_2, self.ln_2_out, self.alpha_mlp, 1)


class GPT(nn.Module):
    """Embedding, L blocks, final norm and head (§1); generate continues a text."""

    def __init__(self, config):
        super().__init__()
        config.validate()
        self.config = config
        mode = config.norm_mode
        d = config.n_embd
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, d),
            # learned positions (gpt2); llama rotates q and k instead, with the table self.rope
            wpe=nn.Embedding(config.block_size, d) if config.arch == "gpt2" else None,
            drop=nn.Dropout(config.dropout),
            ln_emb=family_norm(config, d, "ffn") if config.embed_norm else nn.Identity(),
            h=nn.ModuleList([Block(config, k) for k in range(1, config.n_layer + 1)]),
        ))
        # no final norm after a post block's norm (post, deep, all-post mixln), ngpt's unit
        # vector (§3, §4), or in rezero, which has none at all (§14.2)
        if self.transformer.h[-1].mode in ("post", "deep", "ngpt", "rezero"):
            self.transformer.ln_f = nn.Identity()
        elif mode == "simplenorm":
            self.transformer.ln_f = rms_norm(config, d)
        else:
            self.transformer.ln_f = family_norm(config, d, "final")
        self.lm_head = nn.Linear(d, config.vocab_size, bias=False)
        if config.tied:
            self.transformer.wte.weight = self.lm_head.weight  # E is both embedding and head
        # DyT, Derf: x_0 = s·(E[t] + P[pos]), s = √d·0.02/σ_E, σ_E 0.02 tied, 1 untied
        if config.norm_type != "norm":
            emb_scale = d ** 0.5 * (1 if config.tied else 0.02)
            self.transformer.emb_scale = nn.Parameter(torch.tensor([emb_scale]))
        # ngpt: logits s_z ⊙ (cosines), s_z stored 1/√d and used ×√d: 1 at init (§13.6)
        ngpt = mode == "ngpt"
        self.s_z = nn.Parameter(torch.full((config.vocab_size,), d ** -0.5)) if ngpt else None
        self.init_weights()

    def init_weights(self):
        """The family's init (§1, §11), the modes' overrides (§4, §5, §13.1, §13.6, §14.4), an
        untied head's. It also makes the rotary table, so it restores a model built on the meta
        device too."""
        c = self.config
        L = c.n_layer
        d = c.n_embd
        blocks = self.transformer.h
        for module in self.modules():
            # torchtitan cuts at ±2, ±100σ: the same
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        # W_o, W₂, llama's W₃: GPT-2's 0.02/√(2L), torchtitan's 0.02/√(2l); lns: 0.02, as its
        # authors recommend
        depth_scaled = c.norm_mode != "lns" or c.lns_scaled_init
        for l, block in enumerate(blocks if depth_scaled else ()):
            std = 0.02 / math.sqrt(2 * L) if c.arch == "gpt2" else 0.02 / math.sqrt(2 * (l + 1))
            for linear in filter(None, (block.attn.c_proj, block.mlp.c_proj, block.mlp.c_up)):
                nn.init.normal_(linear.weight, mean=0.0, std=std)
        if c.norm_mode == "deep":  # DeepNet Fig. 2: Xavier-normal, gain β on v, o, W₁, W₂, W₃
            beta = deepnorm_constants(L)[1]
            for attn, mlp in ((b.attn, b.mlp) for b in blocks):
                q_k_v = attn.c_attn.weight.split(attn.sizes)
                for w, gain in zip(q_k_v, (1.0, 1.0, beta)):
                    nn.init.xavier_normal_(w, gain=gain)
                for linear in filter(None, (attn.c_proj, mlp.c_fc, mlp.c_proj, mlp.c_up)):
                    nn.init.xavier_normal_(linear.weight, gain=beta)
        if c.norm_mode == "sandwich" and c.sandwich_depth_scaled:  # Pangu Ultra's DSSN: γ = c/√L
            for block in blocks:
                nn.init.constant_(block.ln_1_out.weight, 0.283 / math.sqrt(L))
                nn.init.constant_(block.ln_2_out.weight, 0.432 / math.sqrt(L))
        if c.norm_mode == "subln" and c.subln_init_gain:
            self.magneto_gain(math.sqrt(math.log(2 * L)))
        # torchtitan: E ~ N(0, 1), head std d^-½ cut at ±3σ (a tied E, the head, keeps 0.02)
        if not c.tied:
            nn.init.normal_(self.transformer.wte.weight, mean=0.0, std=1.0)
            std = d ** -0.5
            nn.init.trunc_normal_(self.lm_head.weight, mean=0.0, std=std, a=-3 * std, b=3 * std)
        self.normalize_weights()  # ngpt: only the directions of these Gaussian vectors remain
        rope = rotary_table(c).to(self.lm_head.weight.device) if c.arch == "llama" else None
        # not a parameter: kept out of checkpoints
        self.register_buffer("rope", rope, persistent=False)

    @torch.no_grad()
    def magneto_gain(self, gamma):
        """subln: W_v, W_o, W₁, W₂ and llama's W₃ × γ = √(ln 2L) (torchscale's decoder init, §14.4);
        their biases are 0 at init, so the gain leaves them 0."""
        for attn, mlp in ((b.attn, b.mlp) for b in self.transformer.h):
            attn.c_attn.weight.split(attn.sizes)[2].mul_(gamma)  # W_v: c_attn's last rows
            for linear in filter(None, (attn.c_proj, mlp.c_fc, mlp.c_proj, mlp.c_up)):
                linear.weight.mul_(gamma)

    @torch.no_grad()
    def normalize_weights(self):
        """ngpt: every matrix's vectors along d back to unit length (§13.6's table): the rows of E,
        P, the head, W_qkv, W₁, W₃; the columns of W_o, W₂. After init, and by train.py after each
        optimizer step, outside the compiled graph: one norm per matrix, one division per group.
        Other modes: nothing."""
        if self.config.norm_mode != "ngpt":
            return
        for columns in (False, True):  # the d-vectors of W_o and W₂ (c_proj) are their columns
            group = [w for n, w in self.named_parameters()
                     if w.dim() == 2 and ("c_proj" in n) == columns]
            norms = [w.norm(dim=0 if columns else 1, keepdim=True) for w in group]
            torch._foreach_div_(group, norms)

    def get_num_params(self, non_embedding=True):
        """Parameter count, a tied head once; non_embedding leaves out lookups (positions, an
        untied E)."""
        lookups = [self.transformer.wpe]
        if not self.config.tied:
            lookups.append(self.transformer.wte)
        n_params = sum(p.numel() for p in self.parameters())
        n_lookup = sum(t.weight.numel() for t in lookups if t is not None)
        return n_params - n_lookup * non_embedding

    def embed(self, idx, pos=0):
        """x_0 = Drop(E[t] + P[pos]) (llama: Drop(E[t])), with DyT's and Derf's s·(E[t] + P[pos])
        and embed_norm's N(E[t] + P[pos]); geonorm then starts on the sphere of radius √d, ngpt on
        the unit sphere."""
        x = self.transformer.wte(idx)
        if self.transformer.wpe is not None:
            x = x + self.transformer.wpe(torch.arange(pos, pos + idx.size(1), device=idx.device))
        if self.config.norm_type != "norm":
            x = self.transformer.emb_scale * x
        x = self.transformer.drop(self.transformer.ln_emb(x))
        if self.config.norm_mode == "geonorm" and self.config.geo_radius == "sqrt_d":  # §6.2
            x = math.sqrt(self.config.n_embd) * F.normalize(x, dim=-1)
        return unit(x) if self.config.norm_mode == "ngpt" else x

    def forward(self, idx, targets=None, pos=0, all_logits=False):
        """idx (B, T) token ids at positions pos..pos+T-1 -> (logits, mean loss). Without targets
        only the last position's logits (B, 1, V), as in nanoGPT (generate needs no more), or
        all_logits (B, T, V)."""
        T = idx.size(1)
        T_max = self.config.block_size
        if pos + T > T_max:
            raise ValueError(f"cannot forward positions up to {pos + T}: "
                             f"block_size is only {T_max}")
        x = self.embed(idx, pos)
        x0 = x  # x0_mix mixes it into the stream before each block (§14.2)
        rope = None if self.rope is None else self.rope[pos:pos + T]  # (T, hs/2, 2)
        for block in self.transformer.h:
            x = block(x, pos, rope, x0)
        x = self.transformer.ln_f(x)
        every = targets is not None or all_logits
        logits = self.lm_head(x if every else x[:, [-1], :])  # (B, T | 1, V)
        if self.s_z is not None:  # ngpt: cosines times s_z, in the head's dtype
            logits = (logits * (self.s_z * math.sqrt(self.config.n_embd))).type_as(logits)
        if targets is None:
            return logits, None
        flat = logits.view(-1, logits.size(-1))  # (B·T, V)
        return logits, F.cross_entropy(flat, targets.reshape(-1), ignore_index=-1)

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        """AdamW; weight decay on matrices and embeddings (≥ 2-D), none on biases, norm gains and
        scalars."""
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        fused = device_type == "cuda"  # one kernel for the whole update (not on CPU)
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=fused)

    def estimate_mfu(self, fwdbwd_per_iter, dt, peak_flops):
        """Model FLOPs utilization: achieved FLOP/s over peak_flops (PaLM, App. B)."""
        L = self.config.n_layer
        d = self.config.n_embd
        T = self.config.block_size
        # 6 per parameter, plus attention scores
        flops_per_token = 6 * self.get_num_params() + 12 * L * d * T
        return flops_per_token * T * fwdbwd_per_iter / dt / peak_flops

    def enable_kv_cache(self, enabled):
        """Switch every attention layer's key/value cache on (empty until a prefill) or off."""
        for block in self.transformer.h:
            block.attn.kv_cache = () if enabled else None

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, top_p=None,
                 generator=None, use_cache=True, on_token=None):
        """Continue idx (B, T) by max_new_tokens tokens; temperature 0 is greedy; on_token, if
        given, gets each new token (B, 1) as soon as it is sampled. The cache policy (written here
        only): without the cache each token recomputes the last block_size tokens (nanoGPT). With
        it a new token costs one position, and a full cache is prefilled again with its newest
        (block_size + 1) // 2 tokens at positions 0..: keys and values belong to fixed positions
        (learned in gpt2, rotated in llama), so the window cannot slide; past block_size the model
        sees between half a window and a whole one."""
        block_size = self.config.block_size
        window = None  # idx's index of the token cached at position 0
        self.enable_kv_cache(use_cache)
        try:
            for _ in range(max_new_tokens):
                if not use_cache:
                    logits, _ = self(idx[:, -block_size:])
                elif window is None or idx.size(1) - window > block_size:  # (re)fill the cache
                    n_keep = block_size if window is None else (block_size + 1) // 2
                    window = max(0, idx.size(1) - n_keep)
                    logits, _ = self(idx[:, window:])
                else:  # one new token at the next free position
                    logits, _ = self(idx[:, -1:], pos=idx.size(1) - 1 - window)
                idx_next = sample_next(logits[:, -1, :], temperature, top_k, top_p, generator)
                idx = torch.cat((idx, idx_next), dim=1)
                if on_token is not None:
                    on_token(idx_next)
        finally:
            self.enable_kv_cache(False)
        return idx


GPT2_NAMES = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")  # OpenAI's GPT-2 sizes, by name


def from_gpt2(source, block_size=None, dropout=0.0):
    """OpenAI's GPT-2 as a `pre` GPT (nanoGPT's from_pretrained), from a transformers
    GPT2LMHeadModel or what transformers loads one from ('gpt2', 'gpt2-medium', 'gpt2-large',
    'gpt2-xl', a folder). block_size may crop its positions; its 50257 tokens stay unpadded (a
    padding row would take probability)."""
    if isinstance(source, str):
        source = load_gpt2(source)
    hf = source.config
    if (block_size or 0) > hf.n_positions:
        raise ValueError(f"block_size={block_size} is beyond GPT-2's {hf.n_positions} positions: "
                         "lower it")
    config = GPTConfig(block_size=block_size or hf.n_positions, vocab_size=hf.vocab_size,
                       n_embd=hf.n_embd, n_layer=hf.n_layer, n_head=hf.n_head, dropout=dropout,
                       bias=True, norm_mode="pre", norm_eps=hf.layer_norm_epsilon,
                       gelu_tanh=hf.activation_function == "gelu_new")
    model = GPT(config)
    # Conv1D in transformers: W as (in, out)
    conv1d = (".c_attn.weight", ".c_proj.weight", ".c_fc.weight")
    ours = model.state_dict()
    state = {k: v.t() if k.endswith(conv1d) else v
             for k, v in source.state_dict().items() if k in ours}
    state["transformer.wpe.weight"] = state["transformer.wpe.weight"][:model.config.block_size]
    model.load_state_dict(state)  # strict: every parameter of ours is set
    return model


def load_gpt2(name):
    """transformers' GPT2LMHeadModel by name or folder; a one-line ValueError that names the fix."""
    try:
        from transformers import GPT2LMHeadModel
    except ImportError:
        raise ValueError("OpenAI's GPT-2 weights are read with transformers: "
                         "pip install transformers")
    try:
        return GPT2LMHeadModel.from_pretrained(name)
    except OSError as e:
        raise ValueError(f"cannot load GPT-2 {name!r} ({str(e).splitlines()[0]}) For a local "
                         f"copy, run GPT2LMHeadModel.from_pretrained({name!r}).save_pretrained(DIR)"
                         " where the hub is reachable, then init_from=DIR")


def sample_next(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    """One token per row of logits (B, V): the argmax at temperature 0, else sampled from
    softmax(logits/temperature) restricted to the top_k most likely tokens and to the top_p
    nucleus."""
    greedy = logits.argmax(dim=-1, keepdim=True)
    if temperature == 0:
        return greedy
    scaled = logits / temperature
    # a temperature so small that a row overflows (+inf, or inf - inf = nan) is that limit: greedy
    overflow = (scaled.isnan() | scaled.isposinf()).any(dim=-1, keepdim=True)
    only_argmax = torch.full_like(scaled, float("-inf")).scatter(-1, greedy, 0.0)
    logits = torch.where(overflow, only_argmax, scaled)  # no host sync on a GPU
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:  # keep the smallest set of most likely tokens whose mass reaches top_p
        sorted_logits, order = torch.sort(logits, descending=True)
        sorted_probs = F.softmax(sorted_logits, dim=-1)
        # the mass before this token is enough already
        outside = sorted_probs.cumsum(dim=-1) - sorted_probs >= top_p
        logits = logits.masked_fill(outside.scatter(1, order, outside), float("-inf"))
    return torch.multinomial(F.softmax(logits, dim=-1), num_samples=1, generator=generator)
