"""LayerScale (CaiT): pre-norm with each sub-layer's output scaled by a learned vector λ from 1e-4,
at GPT-2 small scale.
    torchrun --standalone --nproc_per_node=8 train.py configs/layerscale_125m.py
From the authors (facebookresearch/deit at 0176669, LayerScale_Block; docs/spec.md §14.2):
x + λ⊙f(N(x)) in both sub-layers, λ of width d, the class default 1e-4 (their released models take
1e-5 at 24 blocks, 1e-6 at 36 and 48; none is shallower than 24, so sweep 1e-4, 1e-2, 0.1 at 12).
Chosen here: an untied head, since a near-identity network keeps ln_f and so, tied, predicts the
current token (§14.2's numerics: P = 0.46), and the rest of base_125m, lr 6e-4 included.
"""
from configs.base_125m import *  # the settings every *_125m config shares

norm_mode = "pre"
res_scale = "layerscale"
layerscale_init = 1e-4  # the model's default
tie_embeddings = False  # a tied head copies the current token at init
out_dir = "out/layerscale_125m"
