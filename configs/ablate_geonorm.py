"""GeoNorm's step size, the paper's open knob (docs/spec.md §6.2 items 3 and 7), against pre as the
reference: the baby GPT of shakespeare_char (4 layers, 128 wide, characters) for 1,000 steps at
lr 1e-3.
    python ablate.py configs/ablate_geonorm.py   # 1 pre + 18 geonorm runs, 2 at a time
    python ablate.py configs/ablate_geonorm.py --lrs=3e-3 --sweep=geo_alpha=1,3 \
        --sweep=geo_decay=harmonic,none \
        --out_dir=out/ablate_geonorm_lr3e-3      # the README's lr 3e-3 row: 9 runs
The sweep's geo_* keys vary geonorm only: pre runs once per seed and lr (pre_lr0.001_s1), geonorm
once per grid point (geonorm_lr0.001_s1_geo_alpha3.0_geo_decaysqrt_geo_max_angleNone).
"""
from configs.shakespeare_char import *  # the baby GPT: 4 layers, 128 wide, 64 characters

out_dir = "out/ablate_geonorm"
learning_rate = 1e-3
min_lr = 1e-4
max_iters = 1000
eval_interval = 250
ablate_modes = ["pre", "geonorm"]
ablate_seeds = [1]
ablate_sweep = dict(
    geo_alpha=[1.0, 3.0, 10.0],  # the base step a; the spec's default is 1
    geo_decay=["harmonic", "sqrt", "none"],  # a_k = a/k, a/√k, a
    geo_max_angle=[None, 0.5],  # no clamp, or θ -> θ/(1 + θ/0.5) < 0.5 rad
)
ablate_jobs = 2  # two one-thread runs at once beat one two-thread run on 2 cores
