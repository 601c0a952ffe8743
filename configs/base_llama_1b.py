"""torchtitan's Llama 2 "1B" as SimpleGPT trained it (docs/spec.md §7.1): what the four llama_*_1b
configs share, so they differ only in norm_mode (and the baseline's qk_norm). Prepare all of
FineWeb-Edu sample-10BT (about 10B GPT-2 tokens; 200,000 steps read it about 2.6 times) with
    python prepare_data.py fineweb_edu

From SimpleGPT's code (src/train_configs/llama2_1B/*.toml; the "1B" flavor of its torchtitan): 18
layers, 16 heads, 2048 wide, SwiGLU rounded to multiples of 256, rotary θ 10,000, RMSNorm ε 1e-5,
untied head with torchtitan's init (arch="llama" gives all of that); AdamW with lr 2e-3 (the same
for all three of its 1B models), betas (0.9, 0.95), weight decay 0.1, gradient clipping 1.0;
sequences of 512, 16 per GPU, 2 accumulation steps; 2,000 warmup steps, then a linear decay to 0 at
step 200,000.
Chosen here: 8 GPUs, so 16 x 512 x 2 x 8 = 131,072 tokens per step (their config leaves the GPU
count open), 26B tokens in all; FineWeb-Edu with GPT-2's BPE (50,304 tokens) for C4 with Llama 2's
(32,000); weight decay on matrices and embeddings only (train.py's grouping; theirs decays every
parameter); bf16 autocast; an evaluation of 100 batches every 5,000 steps.
"""
# data
dataset = "fineweb_edu"
block_size = 512
batch_size = 16  # per GPU
total_batch_size = 131_072  # tokens per step: 16 x 512 x 2 accumulation steps x 8 GPUs
# model: torchtitan's Llama 2 "1B"
arch = "llama"
n_layer = 18
n_head = 16
n_embd = 2048
multiple_of = 256  # SwiGLU 5,632 wide
rope_theta = 10000.0
dropout = 0.0
# optimizer and schedule: linear warmup, then linear decay over the whole rest of the run
max_iters = 200_000
learning_rate = 2e-3
min_lr = 0.0
lr_schedule = "wsd"
wsd_decay_frac = 1.0  # wsd with nothing stable: the decay starts where the warmup ends
warmup_iters = 2000
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0
# evaluation and logging
eval_interval = 5_000
eval_iters = 100
log_interval = 10
