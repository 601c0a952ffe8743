"""The speedrun's residual lambdas: pre-norm with λ_res·x + λ_post·f(N(x)) in each sub-layer, at
GPT-2 small scale.
    torchrun --standalone --nproc_per_node=8 train.py configs/lambdas_125m.py
From modded-nanogpt (at f411b3d, train_gpt.py; docs/spec.md §14.2): two learned scalars per
sub-layer, λ_res from √1.1 (1.1 a block) and λ_post from 1. Left out: the record's dynamic gates
(its MUDD MLPs) and its optimizer multipliers (λ_res at 5x the rate); normgpt's AdamW does not decay
them (1-D). Chosen here: the rest of base_125m, lr 6e-4 and the tied head included.
"""
from configs.base_125m import *  # the settings every *_125m config shares

norm_mode = "pre"
res_scale = "lambda"
out_dir = "out/lambdas_125m"
