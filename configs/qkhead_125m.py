"""Pre-norm with QK-norm on each head, at GPT-2 small scale.
    torchrun --standalone --nproc_per_node=8 train.py configs/qkhead_125m.py
From Qwen3 and modded-nanogpt (docs/spec.md §14.7): an RMSNorm over each head's features of q and of
k, one gain of the head size shared by the heads, before rotary in the llama family. qk_norm=True
(OLMo 2, as reorder_125m runs) normalizes over all heads together instead. Chosen here: the rest of
base_125m.
"""
from configs.base_125m import *  # the settings every *_125m config shares

norm_mode = "pre"
qk_norm = "per_head"
out_dir = "out/qkhead_125m"
