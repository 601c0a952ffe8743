"""GPT-2 small (124M) on FineWeb-Edu: what the *_125m configs share, so they differ in their norm
settings (and simplenorm's learning rate). 50,000 steps of 131,072 tokens read 6.6B tokens; prepare
them with
    python prepare_data.py fineweb_edu --num_tokens 7000000000
"""
# data
dataset = "fineweb_edu"
block_size = 512
batch_size = 32  # per GPU
# tokens per step: 32 x 512 x 8 GPUs; gradient accumulation fills in on fewer
total_batch_size = 131_072
# model: GPT-2 small
n_layer = 12
n_head = 12
n_embd = 768
dropout = 0.0
bias = False
# optimizer and schedule
max_iters = 50_000
learning_rate = 6e-4
min_lr = 6e-5
lr_schedule = "cosine"
warmup_iters = 500
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0
# evaluation and logging
eval_interval = 5_000
eval_iters = 100
log_interval = 10
