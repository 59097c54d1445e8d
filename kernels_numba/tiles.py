"""Moving a tile of rows from global memory into shared memory (§23–24: "load Kj, Vj into SRAM").

Every FlashAttention kernel of the project starts each step the same way: the block copies a
tile of ``ROWS`` rows × ``D`` columns of a [B·H, N, d] array into shared memory, zeros past the
last row and past d, either as it is (row-major, ``dst[r·STRIDE + c]``) or transposed
(``dst[c·STRIDE + r]``, so that a thread's four operands along r are adjacent for ``load4``).

Why a function of its own: written as a plain loop (``for e in range(tid, ROWS·D, T)``: load one
float, store it, next) each thread waits for every global load before issuing the next one, ~30
times per tile; Nsight Compute showed the forward kernel stalled on those loads 45% of the time.
Here the loop count is a compile-time constant, every thread first issues a group of up to four loads
(16 bytes each when ``VEC``), and only then stores them: a couple of memory latencies per tile
instead of thirty. (Groups of four, not all at once: the registers are needed for acc.)

Menu
- ``tile_loader(ROWS, D, T, STRIDE, TRANSPOSE, VEC, GROUP_MAX=4)`` → device function
  ``load(src, base, row_stride, row0, n, d, dst, scale)``: dst ← rows row0 … row0+ROWS−1
  (of n) of the matrix at ``src[base + row·row_stride + c]`` (c < d; zeros past n and d),
  times ``scale``. ``src`` is a flat array: the same loader serves the padded [B·H, N, d]
  layout (row_stride = d) and the packed variable-length one [total, H, d] (row_stride = H·d).
  - ``TRANSPOSE``: consecutive threads take consecutive rows, so the four scalar stores of a
    thread (rows r, columns c … c+3) hit 32 different banks across a warp.
  - row-major: consecutive threads take consecutive 16-byte pieces of a row (coalesced loads,
    one conflict-free 16-byte store each).
  - ``VEC``: 16-byte global loads; the caller guarantees d % 4 == 0, row_stride % 4 == 0 and
    a 16-byte aligned ``src`` (the launcher checks the pointer). Otherwise four guarded scalar loads.
Limits: D a multiple of 4; T threads (the block size) all call it, outside any branch that
depends on the thread (it has no barrier itself; the caller syncs before and after).
"""

from functools import lru_cache

from numba import cuda, float32

from .reductions import ZERO
from .vector import load4, store4


@lru_cache(maxsize=None)
def tile_loader(ROWS, D, T, STRIDE, TRANSPOSE, VEC, GROUP_MAX=4):
    D4 = D // 4                        # 16-byte pieces per row
    TOTAL = ROWS * D4                  # 16-byte pieces per tile
    ITERS = -(-TOTAL // T)             # per thread
    EXACT = ITERS * T == TOTAL         # (then the guard below folds away)
    GROUP = min(ITERS, GROUP_MAX)      # loads in flight before the first store (4·GROUP registers)
    # index arithmetic as masks and shifts when the extent is a power of 2 (the thread index is
    # a signed int to Numba, so e % ROWS would carry a sign fix-up)
    R_MASK = ROWS - 1 if ROWS & (ROWS - 1) == 0 else -1
    R_SHIFT = ROWS.bit_length() - 1
    D_MASK = D4 - 1 if D4 & (D4 - 1) == 0 else -1
    D_SHIFT = D4.bit_length() - 1
    assert D % 4 == 0

    @cuda.jit(device=True)
    def split(e):
        """Piece e of the tile → (row r, first column c) inside the tile."""
        if TRANSPOSE:                       # consecutive threads: consecutive rows
            if R_MASK >= 0:
                return e & R_MASK, 4 * (e >> R_SHIFT)
            return e % ROWS, 4 * (e // ROWS)
        if D_MASK >= 0:                     # consecutive threads: consecutive columns
            return e >> D_SHIFT, 4 * (e & D_MASK)
        return e // D4, 4 * (e % D4)

    @cuda.jit(device=True)
    def load(src, base, row_stride, row0, n, d, dst, scale):
        tid = cuda.threadIdx.x
        buf = cuda.local.array((GROUP, 4), float32)
        for g in range(0, ITERS, GROUP):
            # 1) GROUP loads first: that many independent requests in flight per thread
            for it in range(GROUP):
                e = (g + it) * T + tid
                r, c = split(e)
                row = row0 + r
                for u in range(4):
                    buf[it, u] = ZERO
                if (EXACT or e < TOTAL) and g + it < ITERS and row < n:
                    if VEC:
                        if c < d:
                            buf[it, 0], buf[it, 1], buf[it, 2], buf[it, 3] = \
                                load4(src, base + row * row_stride + c)
                    else:
                        for u in range(4):
                            if c + u < d:
                                buf[it, u] = src[base + row * row_stride + c + u]
            # 2) then their stores (scaled): shared memory only, no waiting on global memory
            for it in range(GROUP):
                e = (g + it) * T + tid
                if (EXACT or e < TOTAL) and g + it < ITERS:
                    r, c = split(e)
                    if TRANSPOSE:
                        for u in range(4):
                            dst[(c + u) * STRIDE + r] = buf[it, u] * scale
                    else:
                        store4(dst, r * STRIDE + c, buf[it, 0] * scale, buf[it, 1] * scale,
                               buf[it, 2] * scale, buf[it, 3] * scale)

    return load
