"""nGPT on the Llama 2 "1B" block: rotary positions and SwiGLU as the authors' own code has them.
    torchrun --standalone --nproc_per_node=8 train.py configs/llama_ngpt_1b.py
From the authors (NVIDIA/ngpt at ed19eb2, train.py; docs/spec.md §13.6): lr 1.5e-3 decayed to 0, no
warmup, no weight decay, the untied head (the model's default under ngpt), AdamW betas (0.9, 0.95)
and clipping 1.0.
Chosen here: the rest of SimpleGPT's 1B settings shared by the llama_*_1b configs, its linear decay
to 0 for their cosine included, and fp32 master weights (theirs are bf16). Their sweep at 0.5B finds
nGPT flat over 1.5e-3..3e-3, the other 1B configs' 2e-3 among them.
"""
from configs.base_llama_1b import *  # the settings the llama_*_1b configs share, and their sources

norm_mode = "ngpt"
learning_rate = 1.5e-3
warmup_iters = 0
weight_decay = 0.0
out_dir = "out/llama_ngpt_1b"
