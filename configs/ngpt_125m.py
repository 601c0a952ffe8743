"""nGPT, the normalized Transformer: every hidden state and every matrix row on the unit sphere, at
GPT-2 small scale.
    torchrun --standalone --nproc_per_node=8 train.py configs/ngpt_125m.py
From the authors (NVIDIA/ngpt at ed19eb2, train.py; docs/spec.md §13.6): lr 1.5e-3 with a cosine
decay to 0, no warmup, no weight decay (the projection after each step would undo it on the
matrices), the untied head (the model's default under ngpt), AdamW betas (0.9, 0.95) and clipping
1.0 as base_125m's. Chosen here: fp32 master weights (theirs are bf16), GPT-2's GELU MLP and learned
positions projected like E (their code is rotary and SwiGLU: llama_ngpt_1b.py), and base_125m's
batch and steps. Their launcher uses 3e-3, and their sweep at 0.5B finds nGPT flat over
1.5e-3..3e-3.
"""
from configs.base_125m import *  # the settings every *_125m config shares

norm_mode = "ngpt"
learning_rate = 1.5e-3
min_lr = 0.0
warmup_iters = 0
weight_decay = 0.0
out_dir = "out/ngpt_125m"
