"""Tiny Shakespeare by characters on a CPU, in about 3 minutes on 2 cores (nanoGPT's
shakespeare_char, shrunk).
    python prepare_data.py shakespeare_char --input input.txt
        # without --input it downloads the text
    python train.py configs/shakespeare_char.py   # add --norm_mode=geonorm etc. to compare
    python sample.py --out_dir=out/shakespeare_char --start="ROMEO:"
"""
out_dir = "out/shakespeare_char"
dataset = "shakespeare_char"
eval_interval = 250
eval_iters = 20
log_interval = 50
# a baby GPT: 0.8M parameters, 64 characters of context
n_layer = 4
n_head = 4
n_embd = 128
block_size = 64
batch_size = 16
dropout = 0.0
# small models take a large step; beta2 0.99 because few tokens pass per step
learning_rate = 2e-3
min_lr = 2e-4
max_iters = 3000
warmup_iters = 100
beta2 = 0.99
