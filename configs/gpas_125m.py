"""GPAS: pre-norm with x − SiLU(g)·stopgrad(x) after each residual add, at GPT-2 small scale.
    torchrun --standalone --nproc_per_node=8 train.py configs/gpas_125m.py
From the authors (dandingsky/GPAS at 3198068; docs/spec.md §14.5): one gate g per block from 0, used
after both sub-layers, its value (1 − SiLU(g))·x with the gradient to x kept whole; their Pre+GPAS
row (gpas=True also fits sandwich, lns, deep and mixln). Left out: their clip on the gate's gradient
(--clip_gate_grad, used at 1B and 7B). Chosen here: the rest of base_125m, lr 6e-4 and the tied head
included (theirs: Adam at 1e-3, no weight decay).
"""
from configs.base_125m import *  # the settings every *_125m config shares

norm_mode = "pre"
gpas = True
out_dir = "out/gpas_125m"
