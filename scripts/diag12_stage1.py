"""dV error diagnosis (issue 16, the test's seed 12), stage 1: emulated S (forward A = Q, B = K
and backward A = K, B = Q, 3xTF32 on the tc model, staged per k8 step) over the causal lower
triangle, row blocks of 256. Inputs as tests/test_tf32x3_accuracy.py draws them (SEED, N, D from
the environment; default 12, 4096, 64). Saved to $DIAG_OUT (default: the system's temp folder)/diag_out<SEED>_<N>_<D>/. Stages:
1 S (~1–4 min), 2 the forward's m, l, LSE, 3 dv with one step of P's arithmetic emulated at a
time, 4 dv's sum on the tc model (one level, two levels, torch-like), diag12_elem.py one element.

    SEED=12 N=2048 D=128 python3 scripts/diag12_stage1.py   (then stage2, 3, 4 the same way)
"""
import os
import tempfile
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import tf32x3_error as E  # noqa: E402

F32 = np.float32
N, D = int(os.environ.get("N", 4096)), int(os.environ.get("D", 64))
SEED = int(os.environ.get("SEED", 12))
OUT = os.path.join(os.environ.get("DIAG_OUT", tempfile.gettempdir()), f"diag_out{SEED}_{N}_{D}")
os.makedirs(OUT, exist_ok=True)

rng = np.random.default_rng(SEED)
q, k, v, do = (rng.standard_normal((1, 1, N, D)).astype(F32)[0, 0] for _ in range(4))
np.savez(os.path.join(OUT, "inputs.npz"), q=q, k=k, v=v, do=do)

BLK = 256
Bc = 64
scale = F32(D ** -0.5)
scale2 = F32(scale * E.LOG2E)
Sf = np.zeros((N, N), F32)
Sb = np.zeros((N, N), F32)
t0 = time.time()
for r0 in range(0, N, BLK):
    kmax = r0 + BLK
    Sf[r0:r0 + BLK, :kmax] = E.tc_product(q[r0:r0 + BLK], k[:kmax].T, stage=1)
    Sb[r0:r0 + BLK, :kmax] = E.tc_product(k[:kmax], q[r0:r0 + BLK].T, stage=1).T
    print(r0, f"{time.time() - t0:.0f}s", flush=True)
np.save(os.path.join(OUT, "Sf.npy"), Sf)
np.save(os.path.join(OUT, "Sb.npy"), Sb)
