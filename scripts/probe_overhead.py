"""Probe: Numba launch overhead vs kernel time (temporary measurement script)."""
import time, statistics
import numpy as np
from numba import cuda
import flashlesson
from flashlesson.bench import time_gpu
from kernels_numba.copy import copy_kernel
import torch

@cuda.jit
def empty(a):
    pass

@cuda.jit
def spin(n):
    for i in range(n):
        cuda.nanosleep(1000000)

a = cuda.device_array(4, np.float32)
empty[1, 32](a); cuda.synchronize()
t = time.perf_counter()
for _ in range(2000):
    empty[1, 32](a)
cuda.synchronize()
print("numba empty launch via dispatcher: %.1f us" % ((time.perf_counter() - t) / 2000 * 1e6))
ta = torch.empty(4, device="cuda")
t = time.perf_counter()
for _ in range(2000):
    ta.add_(1)
torch.cuda.synchronize()
print("torch add_ launch: %.1f us" % ((time.perf_counter() - t) / 2000 * 1e6))
spin[1, 1](1); cuda.synchronize()

def timed(fn, inner=10, samples=7, hide=False):
    fn(); cuda.synchronize()
    s, e = cuda.event(), cuda.event()
    out = []
    for _ in range(samples):
        if hide:
            spin[1, 1](3)
        s.record()
        for _ in range(inner):
            fn()
        e.record(); e.synchronize()
        out.append(cuda.event_elapsed_time(s, e) / inner)
    return statistics.median(out)

for el in (2**26, 2**28):
    for dt in (np.float32, np.float16):
        x = cuda.to_device(np.random.standard_normal(el).astype(dt)); y = cuda.device_array_like(x)
        tx = torch.as_tensor(x, device="cuda"); ty = torch.empty_like(tx)
        nb = 2 * x.nbytes
        g = (el + 255) // 256
        for hide in (False, True):
            r = [timed(lambda: copy_kernel[g, 256](x, y), hide=hide),
                 timed(lambda: ty.copy_(tx), hide=hide),
                 timed(lambda: torch.softmax(tx.view(-1, 1024), -1, out=ty.view(-1, 1024)), hide=hide),
                 timed(lambda: y.copy_to_device(x), hide=hide)]
            print(f"el=2^{int(np.log2(el))} {np.dtype(dt).name} hide={hide}: numba copy {nb/r[0]/1e6:.0f} GB/s ({r[0]*1e3:.0f} us), torch copy {nb/r[1]/1e6:.0f}, torch softmax1024 {nb/r[2]/1e6:.0f}, numba memcpy {nb/r[3]/1e6:.0f}")
        del x, y, tx, ty
