"""NormFormer: pre-norm plus a norm on attention's output, a learned scale on each head-sized chunk
of W_o's output and a norm inside the MLP, at GPT-2 small scale.
    torchrun --standalone --nproc_per_node=8 train.py configs/normformer_125m.py
From the authors (fairseq at 3d262bb; docs/spec.md §14.3): the model their README calls NormFormer,
the three flags --scale-attn --scale-fc --scale-heads; the scale applied to W_o's output viewed as
n_head chunks, as their code does. Chosen here: the rest of base_125m, lr 6e-4 and the tied head
included, so that the row is matched to pre; the authors raise the rate at 125M (3e-3: sweep 6e-4,
1.5e-3, 3e-3), and their 125M best command adds --scale-resids (normformer_scale_resids=True).
"""
from configs.base_125m import *  # the settings every *_125m config shares

norm_mode = "normformer"
normformer_scale_resids = False  # the model's default: the three-flag model
out_dir = "out/normformer_125m"
