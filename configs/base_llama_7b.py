"""Llama 2 7B as SimpleGPT trained it (docs/spec.md §7.1): what llama_pre_qknorm_7b.py and
llama_simplenorm_7b.py share, so they differ only in norm_mode and qk_norm; base_llama3_8b.py takes
the training recipe from here too. Sharded over the GPUs (parallel='fsdp') with activation
checkpointing: a 7B model's weights, gradients and AdamW moments are 16 bytes a parameter, about
110 GB, past any one GPU.
Prepare FineWeb-Edu sample-10BT (about 10B GPT-2 tokens; 20,000 steps read 7.9B of them) with
    python prepare_data.py fineweb_edu

From SimpleGPT's code (src/train_configs/llama2_7B/*.toml; the "7B" flavor of its torchtitan): 32
layers, 32 heads, 4096 wide, SwiGLU rounded to multiples of 256 (11,008), rotary θ 10,000, RMSNorm
ε 1e-5, untied head with torchtitan's init (arch="llama" gives all of that); AdamW with lr 1e-3 and
weight decay 0.05 for both the SimpleGPT and the pre+QK-norm model, betas (0.9, 0.95)
(torchtitan's), gradient clipping 1.0; sequences of 2048, 4 per GPU, 6 accumulation steps; 200
warmup steps, then a linear decay to 0 at 20,000.
Chosen here: 8 GPUs, so 4 x 2048 x 6 x 8 = 393,216 tokens per step, the paper's global batch of 192;
with more GPUs the accumulation steps shrink (total_batch_size is fixed). FineWeb-Edu with GPT-2's
BPE (50,304 tokens) for C4 with Llama 2's (32,000), so the model has 6.89B parameters, not 6.74B;
weight decay on matrices and embeddings only (train.py's grouping; theirs decays every parameter);
bf16; an evaluation of 50 batches every 1,000 steps.
"""
# data
dataset = "fineweb_edu"
block_size = 2048
# per GPU; with activation checkpointing there is room for more (see the estimate train.py prints)
batch_size = 4
total_batch_size = 393_216  # tokens per step: 4 x 2048 x 6 accumulation steps x 8 GPUs
# model: Llama 2 7B
arch = "llama"
n_layer = 32
n_head = 32
n_embd = 4096
multiple_of = 256  # SwiGLU 11,008 wide
rope_theta = 10000.0
dropout = 0.0
# optimizer and schedule: linear warmup, then linear decay over the whole rest of the run
max_iters = 20_000
learning_rate = 1e-3
min_lr = 0.0
lr_schedule = "wsd"
wsd_decay_frac = 1.0  # wsd with nothing stable: the decay starts where the warmup ends
warmup_iters = 200
weight_decay = 0.05
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0
# past one GPU's memory
parallel = "fsdp"
activation_checkpointing = True
# evaluation and logging
eval_interval = 1_000
eval_iters = 50
log_interval = 10
