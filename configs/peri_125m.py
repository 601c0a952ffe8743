"""Peri-LN, sandwich's x + LN(f(LN(x))) with a norm on the embedding, at GPT-2 small scale.
    torchrun --standalone --nproc_per_node=8 train.py configs/peri_125m.py
From the paper, through OLMo-core's PeriNormTransformerBlock and embedding_norm (no author code;
docs/spec.md §13.3): a norm before and after each sub-layer, one on x_0 and the final norm, every
gain learned. Chosen here: the rest of base_125m, with no QK-norm (OLMo-core's Peri-LN ladder adds
it) and the tied head (its copy bias at init is small: P(next = current) 0.0025).
"""
from configs.base_125m import *  # the settings every *_125m config shares

norm_mode = "sandwich"
embed_norm = True  # x_0 = LN(E[t] + P[pos])
out_dir = "out/peri_125m"
