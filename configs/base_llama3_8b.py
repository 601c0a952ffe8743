"""Llama 3 8B as SimpleGPT trained it: what llama_pre_qknorm_8b.py and llama_simplenorm_8b.py share.
The training recipe is the 7B one (base_llama_7b.py; SimpleGPT's llama3_8B/*.toml have the same
lr 1e-3, weight decay 0.05, sequences of 2048, 200 warmup and 20,000 steps, global batch 192), with
3 sequences per GPU and 8 accumulation steps.

From src/train_configs/llama3_8B and torchtitan's "8B" flavor: 32 layers, 32 query heads and 8
key/value heads (grouped-query attention), 4096 wide, SwiGLU 1.3 x 8d/3 rounded to multiples of 1024
(14,336), rotary θ 500,000. Llama 3's tokenizer has 128,256 tokens; the GPT-2 BPE of this codebase's
datasets has 50,304, so the model here has 7.39B parameters, not 8.03B (the blocks are Llama 3 8B's
exactly).
"""
from configs.base_llama_7b import *  # the recipe, fsdp and activation checkpointing

batch_size = 3  # per GPU: 3 x 2048 x 8 accumulation steps x 8 GPUs = 393,216 tokens per step
n_kv_head = 8
multiple_of = 1024
ffn_dim_multiplier = 1.3
rope_theta = 500000.0
