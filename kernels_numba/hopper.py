"""Hopper (sm_90a) from Numba: mbarriers, named barriers, setmaxnreg, wgmma and the bulk copy as
inline-PTX helpers, and the same helpers in the simulator — the parts FlashAttention-3's forward
pass is built from, each checked alone before any kernel uses them.

Like ``mma.py``: each helper puts PTX into the kernel as LLVM inline assembly (``@intrinsic`` +
``llvmlite.ir.InlineAsm``; every one volatile with a memory clobber, so that LLVM keeps them in
program order and moves no load or store across them). In the CUDA simulator each helper is
replaced by its twin of the same name in ``kernels_numba/sim/hopper.py`` (chosen in
``kernels_numba/sim/__init__.py``), which models the block's shared window, its mbarriers
(phases, arrival and transaction counts), its named barriers and the warpgroup; a wait that
can never end is reported there as an error naming the barrier and its counts, never a hang.
numba-cuda 0.30 compiles for sm_90a on a compute-capability-9.0 GPU (the "a" that wgmma and
setmaxnreg need).

Menu. ``bars`` is a shared uint64 array (one mbarrier an element, 8 bytes), ``smem``/``dst``
shared arrays, ``src`` a global one; indices are flat element indices (as in ``vector.py``)::

    mbar_init(bars, i, count)          mbarrier.init.shared::cta.b64 [a], count;
        phase 0, count arrivals expected (1 … 2^20 − 1), tx-count 0. One thread inits; then
        fence_mbarrier_init() and cuda.syncthreads() before any other thread uses it.
    mbar_arrive(bars, i)               mbarrier.arrive.shared::cta.b64 state, [a];   (release)
        one arrival; the phase completes when the pending arrivals and the tx-count are 0:
        the phase number goes up by one, pending arrivals are reset to count.
    mbar_arrive_expect_tx(bars, i, nbytes)
                                   mbarrier.arrive.expect_tx.shared::cta.b64 state, [a], n;
        tx-count += nbytes, then one arrival: the phase also waits for nbytes of copies.
    mbar_try_wait_parity(bars, i, parity)
                                       loop: mbarrier.try_wait.parity.shared::cta.b64 p, [a],
                                       parity; @!p bra loop;   (acquire)
        returns once the phase of this parity has completed (the current phase's parity is
        the other one). Waiters track the parity: 0 for phase 0, 1 for phase 1, 0 again …
    fence_mbarrier_init()              fence.mbarrier_init.release.cluster;
        makes mbar_init visible to the copy engine's complete_tx (after init, before the
        barrier that publishes it).
    bulk_copy_g2s(dst, di, src, si, nbytes, bars, bi)
        cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [d], [s], n, [a];
        one thread copies nbytes (a multiple of 16; both addresses 16-byte aligned) from
        global to shared; on arrival the copy engine does complete_tx(nbytes) on bars[bi].
        The thread that issues it first calls mbar_arrive_expect_tx(bars, bi, nbytes).
    fence_proxy_async()                fence.proxy.async.shared::cta;
        orders this thread's ordinary shared-memory accesses before later ones of the async
        proxy (the copy engine writing, wgmma reading): after filling a tile with st.shared,
        before the barrier after which wgmma reads it.
    sem_wait_geq(sem, i, target)       loop: ld.acquire.gpu.global.s32 v, [sem + 4i];
                                       until v ≥ target   (acquire)
    sem_release_add(sem, i, n)         red.release.gpu.global.add.s32 [sem + 4i], n;
        a semaphore in global memory (sem: an int32 array, flat index), for blocks that take
        turns: one thread waits for its turn, a barrier passes it on to the others (what the
        earlier blocks wrote before their release is visible to them); after a barrier one
        thread releases (the block's writes before it become visible to the next waiter).
        Only for turns that earlier-launched blocks give: a block waiting for a later one may
        wait forever on the GPU (blocks start in launch order, not all at once).
    bar_sync(id, nthreads)             bar.sync id, nthreads;
    bar_arrive(id, nthreads)           bar.arrive id, nthreads;
        named barrier id (1 … 15; 0 is cuda.syncthreads()'s) completes once nthreads (a
        multiple of 32) threads arrived; bar_sync waits for that, bar_arrive does not (the
        producer/consumer hand-off between warps). Name the ids (FULL, EMPTY, …).
    setmaxnreg_inc(n) / setmaxnreg_dec(n)   setmaxnreg.{inc,dec}.sync.aligned.u32 n;
        this warpgroup's registers per thread become n (a compile-time constant, a multiple
        of 8 in 24 … 256): producers give registers up, consumers take them. ptxas honours
        it only in a kernel compiled with a register cap (max_registers), else it warns and
        ignores it; every thread of the warpgroup executes the same one.
    wgmma_fence()                      wgmma.fence.sync.aligned;
    wgmma_commit_group()               wgmma.commit_group.sync.aligned;
    wgmma_wait_group(n)                wgmma.wait_group.sync.aligned n;   (n a constant, 0 … 7)
        fence before the first mma and between touching the accumulators and the next mma;
        commit the mmas issued so far as a group; wait until at most n groups are pending.
    wgmma_f16_n64(acc, desc_a, desc_b, scale_d)   and _n128, _n256, and wgmma_bf16_n64 …
        (N = 96, 160, 176, 192 as well, through WGMMA[(kind, N)] only: attention_wgmma's tiles)
        wgmma.mma_async.sync.aligned.m64nNk16.f32.f16.f16 {acc…}, da, db, p, 1, 1, 0, 0;
        (…f32.bf16.bf16 for bf16): the warpgroup (128 threads, 4 consecutive warps, the
        first a multiple of 4) computes D = A·B + (D if scale_d else 0), A 64×16 and B 16×N
        from shared memory through their descriptors, both K-major (imm-trans 0), D fp32 in
        ``acc``: each thread's float32 local array of N/2 elements, updated in place.
    wgmma_f16_n64_tb(acc, desc_a, desc_b, scale_d)   and _n128, bf16: B N-major (imm-trans-b
        1), the layout drawn below — B = V as it lies in memory, row-major [key][d]
    wgmma_f16_n64_rs(acc, a0, a1, a2, a3, desc_b, scale_d)   and _n128, bf16, and _rs_tb
        (B N-major): the "RS" form, wgmma.mma_async … {acc…}, {a0, a1, a2, a3}, db, p, 1, 1,
        tb; — A from registers: four .b32 words of fp16/bf16 pairs per thread, per warp w the
        mma.sync m16n8k16 A fragment (mma.py) on rows 16w … 16w + 15 of the 64 (PTX ISA,
        "Matrix fragments for wgmma .m64nNk16", A in registers)::

            a0 = A[16w + g,     16s + 2t : +2]     a2 = A[16w + g,     16s + 2t + 8 : +2]
            a1 = A[16w + g + 8, 16s + 2t : +2]     a3 = A[16w + g + 8, 16s + 2t + 8 : +2]

        so the accumulator of S = Q·Kᵀ, two 8-column blocks 2s, 2s + 1 packed in pairs, *is*
        the A of k16 step s of P·V (FlashAttention-3's P in registers, no shared memory). The
        registers must not be written until the wgmma reading them is waited for.
    wgmma_tf32_n32(acc, desc_a, desc_b, scale_d)   and _n16, _n64, _n128; wgmma_tf32_n64_rs(acc,
        a0, a1, a2, a3, desc_b, scale_d) and _n128_rs (WGMMA_TF32, WGMMA_TF32_RS)
        wgmma.mma_async.sync.aligned.m64nNk8.f32.tf32.tf32 {acc…}, da (or {a0…a3}), db, p, 1, 1;
        tf32 operands (float32 containers, low 13 mantissa bits ignored: round first), both
        K-major (tf32 has no imm-trans); a k8 step is the 32 bytes of a row an fp16 k16 step
        is, so kmajor_index(r, 2k, rows) / 2 places word (r, k) and kmajor_desc's step ks is
        k8 step ks. RS: four float32 registers, the m16n8k8 tf32 A fragment of each warp
        (_wgmma's docstring). The 3xTF32 forward's (attention_wgmma_tf32).
    cp_async_mbar_arrive(bars, i)      cp.async.mbarrier.arrive.noinc.shared::cta.b64 [a];
        an arrival on bars[i] triggered when all this thread's earlier cp.async copies have
        landed; noinc: it is one of the count given to mbar_init (init with the number of
        threads that copy), so per-thread 16-byte cp.async (vector.cp_async16) fill a stage
        that consumers wait for on an mbarrier, as the bulk copy does.
    wgmma_fence_operand(acc, count)    an empty asm that reads and writes acc[0 … count − 1]
        (count a constant): no instruction; it keeps LLVM from moving accumulator reads or
        writes across the wgmma instructions. Call it before wgmma_fence() and after
        wgmma_wait_group(), on every accumulator array.
    shared_addr(smem, i) -> uint32     the shared-window address of smem[i]
    wgmma_desc(addr, lbo, sbo, swizzle) -> uint64   the matrix descriptor (below)
    kmajor_index(r, k, rows) / kmajor_sw128_index(r, k)   where element (r, k) of a tile goes
        (a flat index in halves) in the two layouts below
    sw128_index(r, c, rows)            a row-major tile (a row = one token, 64-column halves)
        with the 128-byte swizzle, read K-major or MN-major (its docstring; both readings
        passed on the H200, 2026-12-02)
    kmajor_desc(addr, R, ks, SW) / nmajor_desc(addr, R, ks, SW)   the descriptors of k16 step
        ks of a tile of R rows (kmajor_index's, or SW sw128_index's) read K-major / N-major
    desc_step(desc, nbytes)            desc with its start address nbytes on (step ks of a tile)
    to_1024(smem)                      words from smem[0] to the next 1024-byte boundary
    mnmajor_index(k, n, cols)          where element (k, n) of a K × cols B goes, N-major (below)

The wgmma accumulator (PTX ISA, "Matrix fragments for wgmma .m64nNk16", accumulator D): thread
tid = 32·w + lane of the warpgroup, w its warp (0‥3), lane = 4·g + t (g = lane // 4, t =
lane % 4), holds in acc[i] (i = 0 … N/2 − 1), with j = i // 4 the block of 8 columns::

    acc[i] = D[16·w + g + 8·((i % 4) // 2),  8·j + 2·t + (i % 2)]

    col →      0    1 |  2    3 |  4    5 |  6    7 |  8    9 | 10   11 | …  (j = 0, 1 …)
    row 0      T0:a0 a1  T1:a0 a1  T2:a0 a1  T3:a0 a1  T0:a4 a5  T1:a4 a5  …
    row 1      T4:a0 a1  T5:a0 a1  T6 …      T7 …      T4:a4 a5  …
    …          (row g: threads 4g … 4g+3)
    row 7      T28 …     T29 …     T30 …     T31 …
    row 8      T0:a2 a3  T1:a2 a3  T2:a2 a3  T3:a2 a3  T0:a6 a7  …
    …
    row 15     T28:a2 a3 …
    rows 16‥31 warp 1 (T32‥T63), the same; rows 32‥47 warp 2; rows 48‥63 warp 3

  — each warp's 16 rows are mma.sync's m16n8 C fragment (mma.py), repeated N/8 times along
  the columns: registers 4j … 4j + 3 hold column block j.

Operands in shared memory, and the descriptor. A (64×16) and B (16×N) are both K-major: the
16 k-values of a row of A, or of a column of B (a row of Bᵀ: a row of K in S = Q·Kᵀ), are
consecutive. The descriptor (PTX ISA, "Matrix Descriptor Format") is a 64-bit register::

    bits  0‥13  start address  >> 4      (shared-window byte address; 16-byte aligned)
    bits 16‥29  leading-dimension byte offset (LBO) >> 4
    bits 32‥45  stride-dimension byte offset  (SBO) >> 4
    bits 49‥51  base offset (0: swizzle atoms on 1024-byte boundaries)
    bits 62‥63  swizzle: 0 none, 1 128-byte, 2 64-byte, 3 32-byte
    (each field is (x & 0x3FFFF) >> 4)

  No swizzle (SWIZZLE_NONE, the layout these helpers are explained with): the operand is made
  of core matrices of 8 rows × 16 bytes (8 halves), each 128 contiguous bytes::

              k 0‥7                 k 8‥15
    rows 0‥7  [core matrix 128 B] ──LBO──▶ [core matrix]
                   │ SBO
    rows 8‥15 [core matrix]                [core matrix]
       …
    address(r, k) = start + (r // 8)·SBO + (r % 8)·16 + (k // 8)·LBO + (k % 8)·2

  kmajor_index(r, k, rows) stores a rows × K tile (K a multiple of 16) as core matrices in
  k-block-major order: SBO = 128 bytes (row blocks back to back), LBO = 16·rows bytes (one
  k-block of all rows), and the k16 step s starts at element 16·rows·s.

  128-byte swizzle (SWIZZLE_128B): rows of 64 halves (K = 64 exactly) 128 bytes apart, 8-row
  atoms of 1024 bytes; the 16-byte chunk c of row r is stored at chunk c ^ (r % 8) (the
  address bits 4‥6 XOR bits 7‥9, so atoms must start on 1024-byte boundaries)::

    row r % 8 = 0:  c0 c1 c2 c3 c4 c5 c6 c7
    row r % 8 = 1:  c1 c0 c3 c2 c5 c4 c7 c6
    row r % 8 = 2:  c2 c3 c0 c1 c6 c7 c4 c5     … row 7: c7 c6 c5 c4 c3 c2 c1 c0

  kmajor_sw128_index(r, k): SBO = 1024 bytes, LBO unused (encoded 1: 16 bytes), the k16 step
  s starts 32 bytes further (element 16·s), the XOR applied by the hardware on the address.

  N-major B, no swizzle (imm-trans-b 1; PTX ISA "Canonical Layouts", MN-major, no swizzling:
  ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO)) with T = 8 halves): a core matrix is again 128
  contiguous bytes, but each 16-byte row holds 8 consecutive n of one k — a piece of a row of
  V[key][d] lands as it is::

              n 0‥7                      n 8‥15
    k 0‥7     [k0: n0‥7 | k1: n0‥7 | … | k7: n0‥7] ──SBO──▶ [k0: n8‥15 | … ]
                   │ LBO
    k 8‥15    [k8: n0‥7 | … | k15: n0‥7]          [ … ]
    address(k, n) = start + (n // 8)·SBO + (n % 8)·2 + (k % 8)·16 + (k // 8)·LBO

  mnmajor_index(k, n, cols): SBO = 128 bytes (n-blocks back to back), LBO = 16·cols bytes
  (one k-block of all columns), the k16 step s at element 16·cols·s. The PTX ISA's tables
  name these two offsets confusingly for MN-major ("LBO: offset from the first 8 columns to
  the next 8 columns", "SBO: offset from the first row to the next row", in 128-bit units),
  while its canonical-layout formula and its worked example (MN-major, no swizzle, bf16:
  ((8,1,2),(8,2)):((1,8,64),(8,128)), LBO = 128 elements, SBO = 64) put SBO on the n-blocks
  and LBO on the k-blocks, as above and as CUTLASS's make_gmma_desc<Major::MN> does for
  INTERLEAVE. The test (``test_wgmma_b_n_major``) says on the GPU which reading the hardware
  does if it is not this one (LBO/SBO swapped, core matrices K-major, or both).

Why no swizzle first: every element's address is an affine function of (r, k) that a reader
can check by hand; each core matrix is 128 contiguous bytes, so the tensor core reads it
without bank conflicts either way. What it costs: a tile copied row by row from a row-major
global array is not in that layout (a 128-byte row would be cut into 8 pieces 16·rows bytes
apart), whereas a tensor-map copy (cp.async.bulk.tensor with SWIZZLE_128B) writes the swizzled
layout directly — which is why FlashAttention-3 uses 128-byte swizzle, and why the descriptor
builder, the twin and the tests cover both.

The bulk copy. The simplest global → shared copy that completes on an mbarrier, with no tensor
map: cp.async.bulk (1-D, contiguous bytes). Alternatives, to be chosen by measurement on the
H200: cp.async.bulk.tensor with a tensor map (made on the host through cuda.bindings'
cuTensorMapEncodeTiled, passed as a 128-byte __grid_constant__ kernel parameter: strided 2-D
tiles, out-of-bounds rows zero-filled, the 128-byte swizzle written as it lands), or per-thread
cp.async (vector.py) followed by cp.async.mbarrier.arrive.noinc on the same mbarrier (no copy
engine; each thread copies 16 bytes at a time).

Limits. Hardware sm_90a (H100/H200); ``numba.cuda.compile_ptx`` needs ``cc=(9, 0, "a")`` for these.
A is K-major (from shared memory) or in registers; B K-major, or N-major without swizzle (the _tb
forms: N = 64, 128), or with the 128-byte swizzle as ``sw128_index`` lays it out (the simulator's
twin and its test; passed on the H200, 2026-12-02). The _tb and _rs forms and cp_async_mbar_arrive,
added after the first H200 run below, passed tests/test_hopper.py on the H200 since (2026-12-01 and
12-02). In the simulator: the product is computed when the warpgroup meets (float64, one rounding to
float32), and the accumulator reads as NaN until the wgmma_wait_group that retires its group (a
write to it before that raises); race mode cannot check kernels ordered by mbarriers or named
barriers (it knows syncthreads only).

Tests: ``tests/test_hopper.py`` — each helper alone against NumPy, in the simulator (CI) and on
the GPU (``FLASHLESSON_DEVICE=gpu``; on the H200:
``PYTHONPATH=/tmp/site:$PWD/src FLASHLESSON_DEVICE=gpu python3 -m pytest -q
tests/test_hopper.py``);
``test_ptx_for_sm90a`` compiles the test kernels with ``compile_ptx(cc=(9, 0, "a"))`` and
assembles them with ptxas where NVVM and ptxas are found (the GPU machine; elsewhere the
nvidia-nvvm, nvidia-cuda-nvrtc and nvidia-cuda-nvcc wheels). Assembled without a GPU,
2026-12-01, with CUDA 13.0's NVVM and ptxas: every kernel assembles for sm_90a with no
"Performance Loss" warning; the wgmma kernels keep their accumulators in registers (72
registers at N = 64, 138 at N = 128, no local memory); setmaxnreg is honoured under
-maxrregcount 128 (also run on the H200). With CUDA 13.5's NVVM and ptxas (the same day): the
_tb and _rs test kernels, the cp.async mbarrier kernel and flash_wgmma (attention_wgmma.py, d = 128, producer) assemble too, with
no "Performance Loss" warning; the RS + N-major test kernel at N = 128 holds 166 registers.
"""

import numpy as np
from llvmlite import ir
from numba import cuda, float32, types, uint16, uint32, uint64
from numba.core import errors
from numba.cuda.extending import intrinsic

from .sim import gpu_options, helper_chooser, pure_device
from .vector import cp_async16, element_address, element_pointer, shared_address

# Each helper below is an @intrinsic of inline PTX. ``helper`` keeps it on the GPU and swaps in
# its simulator twin of the same name (kernels_numba/sim/hopper.py) when the simulator is on.
helper = helper_chooser("hopper")

SWIZZLE_NONE, SWIZZLE_128B = 0, 1       # the descriptor's bits 62‥63
SW128_ALIGN = 1024      # bytes: where a swizzled tile starts (the atom: 8 rows of 128 bytes)

_LL = {"r": ir.IntType(32), "l": ir.IntType(64), "f": ir.FloatType()}


def _inline(builder, text, outs, ins, args):
    """Emit ``text`` as volatile inline PTX with a memory clobber. outs: constraint letters of
    the results ('r' i32, 'l' i64, 'f' f32); ins: those of the operands, or the number of the
    output an operand is tied to ("0": read and written in the same register)."""
    out_tys = [_LL[c] for c in outs]
    in_tys = [out_tys[int(c)] if c.isdigit() else _LL[c] for c in ins]
    ret = (ir.VoidType() if not outs else out_tys[0] if len(outs) == 1
           else ir.LiteralStructType(out_tys))
    constraints = ",".join(["=" + c for c in outs] + list(ins) + ["~{memory}"])
    res = builder.call(ir.InlineAsm(ir.FunctionType(ret, in_tys), text, constraints,
                                    side_effect=True), list(args))
    if len(outs) <= 1:
        return res
    return [builder.extract_value(res, n) for n in range(len(outs))]


def _u32(context, builder, value, ty):
    return context.cast(builder, value, ty, types.uint32)


def _is_bars(bars, i):
    return (isinstance(bars, types.Array) and bars.dtype in (types.uint64, types.int64)
            and isinstance(i, types.Integer))


def _void(name, text):
    """An intrinsic of one instruction with no operand."""
    def typer(typingctx):
        def codegen(context, builder, sig, args):
            _inline(builder, text, "", "", [])
            return context.get_dummy_value()
        return types.void(), codegen
    typer.__name__ = name
    return intrinsic(typer)


def _constant(name, check, text_of):
    """An intrinsic of one instruction whose operand is a compile-time integer constant."""
    def typer(typingctx, n):
        if not isinstance(n, types.IntegerLiteral):
            return None                 # Numba retries with the literal type
        problem = check(n.literal_value)
        if problem:
            raise errors.TypingError(f"{name}: {problem}, got {n.literal_value}")
        text = text_of(n.literal_value)

        def codegen(context, builder, sig, args):
            _inline(builder, text, "", "", [])
            return context.get_dummy_value()
        return types.void(n), codegen
    typer.__name__ = name
    return intrinsic(typer)


# --- addresses --------------------------------------------------------------------------------
@helper
@intrinsic
def shared_addr(typingctx, smem, i):
    """The 32-bit shared-window address of smem[i] (vector.shared_address)."""
    if not (isinstance(smem, types.Array) and isinstance(i, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        return shared_address(context, builder, sig.args[0], args[0], args[1], sig.args[1])
    return types.uint32(smem, i), codegen


@pure_device
def wgmma_desc(addr, lbo, sbo, swizzle):
    """The 64-bit wgmma matrix descriptor: fields (x & 0x3FFFF) >> 4 of the start address at
    bits 0‥13, the leading byte offset at 16‥29, the stride byte offset at 32‥45, the swizzle
    mode at 62‥63 (base offset 0)."""
    return (np.uint64((addr & 0x3FFFF) >> 4)
            | (np.uint64((lbo & 0x3FFFF) >> 4) << np.uint64(16))
            | (np.uint64((sbo & 0x3FFFF) >> 4) << np.uint64(32))
            | (np.uint64(swizzle) << np.uint64(62)))


@pure_device
def kmajor_index(r, k, rows):
    """Halves index of element (r, k) of a rows × K tile stored as core matrices (no swizzle):
    core matrix (r // 8, k // 8) at 64·(r // 8) + 8·rows·(k // 8), row r % 8 of it 8 halves
    (16 bytes) long. SBO = 128 bytes, LBO = 16·rows bytes."""
    return (k // 8) * (8 * rows) + (r // 8) * 64 + (r % 8) * 8 + k % 8


@pure_device
def kmajor_sw128_index(r, k):
    """Halves index of element (r, k), k < 64, of a tile stored with the 128-byte swizzle:
    rows of 64 halves, chunk k // 8 of row r at chunk (k // 8) ^ (r % 8). SBO = 1024 bytes:
    sw128_index's first 64-column half (its ``rows`` then unused)."""
    return sw128_index(r, k, 0)


@pure_device
def sw128_index(r, c, rows):
    """Halves index of element (r, c) of a rows × W tile (W a multiple of 64) that lies
    row-major in global memory (Q, K or V: a row = one token), stored with the 128-byte
    swizzle in 64-column halves: half c // 64 holds all rows at 128·rows bytes each, row r of
    it 128 bytes at 128·r, its 16-byte chunk j = (c % 64) // 8 at chunk j ^ (r % 8). One tile,
    two readings (docs/hopper_sw128.md; the tile's base on a 1024-byte boundary):
    K-major (A, or B of S = Q·Kᵀ with K = the columns): SBO = 1024, LBO unused (16), the k16
    step s at byte 128·rows·(s // 4) + 32·(s % 4); MN-major (B of P·V, imm-trans-b 1: k =
    the rows, n = the columns): SBO = 1024 (8 rows), LBO = 128·rows (64 columns), the k16 step
    s at byte 2048·s. kmajor_sw128_index(r, k) is the case W = 64."""
    return (c // 64) * (64 * rows) + r * 64 + (((c % 64) // 8) ^ (r % 8)) * 8 + c % 8


@cuda.jit(device=True)
def kmajor_desc(addr, R, ks, SW):
    """The K-major descriptor of k16 step ks of a tile of R rows at addr, as kmajor_index lays
    it out (LBO = 16·R bytes, SBO = 128, the step at byte 32·R·ks) or, SW (a compile-time flag,
    folded once inlined), sw128_index (32 bytes a step into a 64-column half, 128·R bytes to
    the next, SBO = 1024): A from shared memory, or the B of S = Q·Kᵀ and its kin. Built as
    step 0's descriptor plus the step's 16-byte units (desc_step), so that a loop over ks
    builds the descriptor once and adds a constant per step."""
    if SW:
        return desc_step(wgmma_desc(addr, 16, 1024, SWIZZLE_128B),
                         128 * R * (ks // 4) + 32 * (ks % 4))
    return desc_step(wgmma_desc(addr, 16 * R, 128, SWIZZLE_NONE), 32 * R * ks)


@cuda.jit(device=True)
def nmajor_desc(addr, R, ks, SW):
    """The same tile of R rows read N-major (imm-trans-b 1; k = its rows, n = its columns):
    k16 step ks of rows 16·ks … — kmajor_index's tile: LBO = 128 bytes, SBO = 16·R, the step
    at byte 256·ks (attention_wgmma_backward's "one tile, two readings"); SW, sw128_index's:
    LBO = 128·R (the next 64 columns), SBO = 1024, the step at byte 2048·ks
    (docs/hopper_sw128.md). Step 0's descriptor plus the step, as kmajor_desc."""
    if SW:
        return desc_step(wgmma_desc(addr, 128 * R, 1024, SWIZZLE_128B), 2048 * ks)
    return desc_step(wgmma_desc(addr, 128, 16 * R, SWIZZLE_NONE), 256 * ks)


@cuda.jit(device=True)
def desc_step(desc, nbytes):
    """desc with its start address nbytes (a multiple of 16) further on: the address field
    (bits 0‥13) counts 16-byte units of an address below 256 KB, and a shared window's
    addresses stay below that (228 KB at most), so the add never carries out of the field.
    The same value as wgmma_desc(addr + nbytes, …); where nbytes is a compile-time constant,
    one integer add instead of rebuilding every field (SASS: 10–14 instructions a k16 step
    down to 1–2, attention_wgmma_backward's loops)."""
    return desc + uint64(nbytes >> 4)


@cuda.jit(device=True)
def to_1024(smem):
    """Words from smem[0] (uint32) to the first 1024-byte boundary of the shared window at or
    after it: where tiles in the 128-byte swizzle start (the swizzle works on address bits,
    and dynamic shared memory is not promised that alignment)."""
    return ((SW128_ALIGN - (shared_addr(smem, 0) & (SW128_ALIGN - 1))) & (SW128_ALIGN - 1)) // 4


@pure_device
def mnmajor_index(k, n, cols):
    """Halves index of element (k, n) of a K × cols tile (B of a product, row-major in global
    memory: V[key][d]) stored N-major as core matrices (no swizzle): core matrix (k // 8, n // 8)
    at 8·cols·(k // 8) + 64·(n // 8), its row k % 8 holding n % 8 = 0‥7 (16 bytes). LBO =
    16·cols bytes (k-blocks), SBO = 128 bytes (n-blocks); the k16 step s starts at 16·cols·s."""
    return (k // 8) * (8 * cols) + (n // 8) * 64 + (k % 8) * 8 + n % 8


# --- mbarrier -----------------------------------------------------------------------------------
@helper
@intrinsic
def mbar_init(typingctx, bars, i, count):
    if not (_is_bars(bars, i) and isinstance(count, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        a = shared_address(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        n = _u32(context, builder, args[2], sig.args[2])
        _inline(builder, "mbarrier.init.shared::cta.b64 [$0], $1;", "", "rr", [a, n])
        return context.get_dummy_value()
    return types.void(bars, i, count), codegen


@helper
@intrinsic
def mbar_arrive(typingctx, bars, i):
    if not _is_bars(bars, i):
        return None

    def codegen(context, builder, sig, args):
        a = shared_address(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        _inline(builder, "{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [$0];\n}",
                "", "r", [a])
        return context.get_dummy_value()
    return types.void(bars, i), codegen


@helper
@intrinsic
def mbar_arrive_expect_tx(typingctx, bars, i, nbytes):
    if not (_is_bars(bars, i) and isinstance(nbytes, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        a = shared_address(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        n = _u32(context, builder, args[2], sig.args[2])
        _inline(builder, "{\n.reg .b64 state;\n"
                "mbarrier.arrive.expect_tx.shared::cta.b64 state, [$0], $1;\n}", "", "rr", [a, n])
        return context.get_dummy_value()
    return types.void(bars, i, nbytes), codegen


@helper
@intrinsic
def mbar_try_wait_parity(typingctx, bars, i, parity):
    """Loops on try_wait.parity until the phase of this parity has completed (the label is
    local to the { } block, so the helper can be inlined many times)."""
    if not (_is_bars(bars, i) and isinstance(parity, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        a = shared_address(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        p = _u32(context, builder, args[2], sig.args[2])
        _inline(builder, "{\n.reg .pred done;\nLAB_WAIT:\n"
                "mbarrier.try_wait.parity.shared::cta.b64 done, [$0], $1;\n"
                "@!done bra LAB_WAIT;\n}", "", "rr", [a, p])
        return context.get_dummy_value()
    return types.void(bars, i, parity), codegen


fence_mbarrier_init = helper(_void("fence_mbarrier_init", "fence.mbarrier_init.release.cluster;"))
fence_proxy_async = helper(_void("fence_proxy_async", "fence.proxy.async.shared::cta;"))


# --- a semaphore in global memory ---------------------------------------------------------------
@intrinsic
def _sem_load_acquire(typingctx, sem, i):
    """ld.acquire.gpu of sem[i] (a global int32 array)."""
    if not (isinstance(sem, types.Array) and sem.dtype == types.int32 and
            isinstance(i, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        a = element_address(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        return _inline(builder, "{\n.reg .u64 g;\ncvta.to.global.u64 g, $1;\n"
                       "ld.acquire.gpu.global.s32 $0, [g];\n}", "r", "l", [a])
    return types.int32(sem, i), codegen


def sem_wait_geq(sem, i, target):
    """Spin until sem[i] ≥ target (acquire; menu)."""
    while _sem_load_acquire(sem, i) < target:
        pass


sem_wait_geq = helper(cuda.jit(device=True)(sem_wait_geq))


@helper
@intrinsic
def sem_release_add(typingctx, sem, i, n):
    """sem[i] += n with release semantics at GPU scope (menu)."""
    if not (isinstance(sem, types.Array) and sem.dtype == types.int32 and
            isinstance(i, types.Integer) and isinstance(n, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        a = element_address(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        _inline(builder, "{\n.reg .u64 g;\ncvta.to.global.u64 g, $0;\n"
                "red.release.gpu.global.add.s32 [g], $1;\n}", "", "lr",
                [a, _u32(context, builder, args[2], sig.args[2])])
        return context.get_dummy_value()
    return types.void(sem, i, n), codegen


# --- bulk copy ----------------------------------------------------------------------------------
@helper
@intrinsic
def bulk_copy_g2s(typingctx, dst, di, src, si, nbytes, bars, bi):
    """src[si …] → dst[di …], nbytes, completing (complete_tx) on bars[bi]."""
    if not (isinstance(dst, types.Array) and isinstance(src, types.Array) and
            isinstance(di, types.Integer) and isinstance(si, types.Integer) and
            isinstance(nbytes, types.Integer) and _is_bars(bars, bi)):
        return None

    def codegen(context, builder, sig, args):
        d = shared_address(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        s = element_address(context, builder, sig.args[2], args[2], args[3], sig.args[3])
        n = _u32(context, builder, args[4], sig.args[4])
        b = shared_address(context, builder, sig.args[5], args[5], args[6], sig.args[6])
        _inline(builder, "{\n.reg .u64 g;\ncvta.to.global.u64 g, $1;\n"
                "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
                "[$0], [g], $2, [$3];\n}", "", "rlrr", [d, s, n, b])
        return context.get_dummy_value()
    return types.void(dst, di, src, si, nbytes, bars, bi), codegen


# --- named barriers -----------------------------------------------------------------------------
def _named(name, text):
    def typer(typingctx, bar_id, nthreads):
        if not (isinstance(bar_id, types.Integer) and isinstance(nthreads, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            _inline(builder, text, "", "rr", [_u32(context, builder, args[0], sig.args[0]),
                                               _u32(context, builder, args[1], sig.args[1])])
            return context.get_dummy_value()
        return types.void(bar_id, nthreads), codegen
    typer.__name__ = name
    return intrinsic(typer)


bar_sync = helper(_named("bar_sync", "bar.sync $0, $1;"))
bar_arrive = helper(_named("bar_arrive", "bar.arrive $0, $1;"))


# --- setmaxnreg ---------------------------------------------------------------------------------
def _regs(n):
    return None if 24 <= n <= 256 and n % 8 == 0 else \
        "the register count must be a multiple of 8 in 24 … 256"


setmaxnreg_inc = helper(_constant("setmaxnreg_inc", _regs,
                                  lambda n: f"setmaxnreg.inc.sync.aligned.u32 {n};"))
setmaxnreg_dec = helper(_constant("setmaxnreg_dec", _regs,
                                  lambda n: f"setmaxnreg.dec.sync.aligned.u32 {n};"))


# --- wgmma --------------------------------------------------------------------------------------
wgmma_fence = helper(_void("wgmma_fence", "wgmma.fence.sync.aligned;"))
wgmma_commit_group = helper(_void("wgmma_commit_group", "wgmma.commit_group.sync.aligned;"))
wgmma_wait_group = helper(_constant(
    "wgmma_wait_group", lambda n: None if 0 <= n <= 7 else "N must be 0 … 7",
    lambda n: f"wgmma.wait_group.sync.aligned {n};"))


def _acc_pointers(context, builder, aryty, ary, count):
    return [element_pointer(context, builder, aryty, ary, ir.Constant(ir.IntType(64), j),
                            types.int64) for j in range(count)]


@helper
@intrinsic
def wgmma_fence_operand(typingctx, acc, count):
    if not (isinstance(acc, types.Array) and acc.dtype == types.float32):
        return None
    if not isinstance(count, types.IntegerLiteral):
        return None
    h = count.literal_value
    if not 1 <= h <= 128:
        raise errors.TypingError(f"wgmma_fence_operand: count must be 1 … 128, got {h}")

    def codegen(context, builder, sig, args):
        ptrs = _acc_pointers(context, builder, sig.args[0], args[0], h)
        vals = _inline(builder, "", "f" * h, [str(j) for j in range(h)],
                       [builder.load(p) for p in ptrs])
        for p, v in zip(ptrs, vals if h > 1 else [vals]):
            builder.store(v, p)
        return context.get_dummy_value()
    return types.void(acc, count), codegen


def _wgmma(kind, n, rs=False, trans_b=0):
    """wgmma.mma_async m64nNk16 (fp16/bf16; tf32: m64nNk8), fp32 accumulators in acc[0 … N/2 −
    1], scale-d from a register (0: D = A·B). A from shared memory (a descriptor, K-major) or,
    rs, from four .b32 registers (the "RS" form: no imm-trans-a): half pairs, or for tf32 four
    float32 values, passed as their bits; B from shared memory, K-major (trans_b 0) or N-major
    (trans_b 1: imm-trans-b). tf32 takes no imm-trans operands at all (A and B K-major: a k8
    step is 8 floats, 32 bytes, of a row — the bytes of an fp16 k16 step, so kmajor_desc's step
    ks serves as k8 step ks), and its operands are float32 containers whose low 13 mantissa
    bits the tensor core ignores (round them first: mma.tf32). tf32's A fragment in registers,
    per warp w the mma.sync m16n8k8 tf32 one on rows 16w … 16w + 15 (PTX ISA, "Matrix fragments
    for wgmma .m64nNk8"; CUTLASS's ALayout_64x8)::

        a0 = A[16w + g, t]        a1 = A[16w + g + 8, t]
        a2 = A[16w + g, t + 4]    a3 = A[16w + g + 8, t + 4]
    """
    tf32 = kind == "tf32"
    assert not (tf32 and trans_b)
    h = n // 2
    regs = ", ".join(f"${j}" for j in range(h))
    x = 2 * h       # operands after the h outputs and the h inputs tied to them:
    if rs:          # a0‥a3, desc_b, scale_d
        a_text, b_at, sd_at, tail = f"{{${x}, ${x + 1}, ${x + 2}, ${x + 3}}}", x + 4, x + 5, \
            f"{trans_b}"
    else:           # desc_a, desc_b, scale_d
        a_text, b_at, sd_at, tail = f"${x}", x + 1, x + 2, f"0, {trans_b}"
    shape = f"m64n{n}k8" if tf32 else f"m64n{n}k16"
    text = ("{\n.reg .pred p;\n"
            f"setp.ne.b32 p, ${sd_at}, 0;\n"
            f"wgmma.mma_async.sync.aligned.{shape}.f32.{kind}.{kind} "
            f"{{{regs}}}, {a_text}, ${b_at}, p, 1, 1" + ("" if tf32 else f", {tail}") + ";\n}")
    name = f"wgmma_{kind}_n{n}" + ("_rs" if rs else "") + ("_tb" if trans_b else "")

    def codegen(context, builder, sig, args):
        ptrs = _acc_pointers(context, builder, sig.args[0], args[0], h)
        if rs and tf32:             # (the float32 bits as .b32)
            a_vals = [builder.bitcast(context.cast(builder, args[1 + j], sig.args[1 + j],
                                                   types.float32), ir.IntType(32))
                      for j in range(4)]
            a_cons = ["r"] * 4
        elif rs:
            a_vals = [_u32(context, builder, args[1 + j], sig.args[1 + j]) for j in range(4)]
            a_cons = ["r"] * 4
        else:
            a_vals = [context.cast(builder, args[1], sig.args[1], types.uint64)]
            a_cons = ["l"]
        nb = len(a_vals) + 1
        db = context.cast(builder, args[nb], sig.args[nb], types.uint64)
        sd = _u32(context, builder, args[nb + 1], sig.args[nb + 1])
        outs = _inline(builder, text, "f" * h, [str(j) for j in range(h)] + a_cons + ["l", "r"],
                       [builder.load(p) for p in ptrs] + a_vals + [db, sd])
        for p, v in zip(ptrs, outs):
            builder.store(v, p)
        return context.get_dummy_value()

    def ok(acc, desc_b, scale_d):
        return (isinstance(acc, types.Array) and acc.dtype == types.float32 and
                isinstance(desc_b, types.Integer) and
                isinstance(scale_d, (types.Integer, types.Boolean)))

    a_type = types.Float if tf32 else types.Integer
    if rs:
        def typer(typingctx, acc, a0, a1, a2, a3, desc_b, scale_d):
            if not (ok(acc, desc_b, scale_d) and
                    all(isinstance(a, a_type) for a in (a0, a1, a2, a3))):
                return None
            return types.void(acc, a0, a1, a2, a3, desc_b, scale_d), codegen
    else:
        def typer(typingctx, acc, desc_a, desc_b, scale_d):
            if not (ok(acc, desc_b, scale_d) and isinstance(desc_a, types.Integer)):
                return None
            return types.void(acc, desc_a, desc_b, scale_d), codegen

    typer.__name__ = name
    return intrinsic(typer)


wgmma_f16_n64 = helper(_wgmma("f16", 64))
wgmma_f16_n128 = helper(_wgmma("f16", 128))
wgmma_f16_n256 = helper(_wgmma("f16", 256))
wgmma_bf16_n64 = helper(_wgmma("bf16", 64))
wgmma_bf16_n128 = helper(_wgmma("bf16", 128))
wgmma_bf16_n256 = helper(_wgmma("bf16", 256))
WGMMA = {("f16", 64): wgmma_f16_n64, ("f16", 128): wgmma_f16_n128,
         ("f16", 256): wgmma_f16_n256, ("bf16", 64): wgmma_bf16_n64,
         ("bf16", 128): wgmma_bf16_n128, ("bf16", 256): wgmma_bf16_n256}
# N between them (any multiple of 8 up to 256 is one): attention_wgmma's wider K/V tiles, whose
# S = Q Kᵀ is 64 × Bc (FA3 takes Bc = 176 at d = 128)
WGMMA.update({(kind, n): helper(_wgmma(kind, n)) for kind in ("f16", "bf16")
              for n in (96, 160, 176, 192)})

# B N-major (imm-trans-b 1; SS), A from registers (RS, B K-major), and both (RS, B N-major: P·V)
wgmma_f16_n32_tb = helper(_wgmma("f16", 32, False, 1))
wgmma_bf16_n32_tb = helper(_wgmma("bf16", 32, False, 1))
wgmma_f16_n64_tb = helper(_wgmma("f16", 64, False, 1))
wgmma_f16_n128_tb = helper(_wgmma("f16", 128, False, 1))
wgmma_bf16_n64_tb = helper(_wgmma("bf16", 64, False, 1))
wgmma_bf16_n128_tb = helper(_wgmma("bf16", 128, False, 1))
wgmma_f16_n64_rs = helper(_wgmma("f16", 64, True, 0))
wgmma_f16_n128_rs = helper(_wgmma("f16", 128, True, 0))
wgmma_bf16_n64_rs = helper(_wgmma("bf16", 64, True, 0))
wgmma_bf16_n128_rs = helper(_wgmma("bf16", 128, True, 0))
wgmma_f16_n64_rs_tb = helper(_wgmma("f16", 64, True, 1))
wgmma_f16_n128_rs_tb = helper(_wgmma("f16", 128, True, 1))
wgmma_bf16_n64_rs_tb = helper(_wgmma("bf16", 64, True, 1))
wgmma_bf16_n128_rs_tb = helper(_wgmma("bf16", 128, True, 1))
WGMMA_TB = {("f16", 32): wgmma_f16_n32_tb, ("bf16", 32): wgmma_bf16_n32_tb,
            ("f16", 64): wgmma_f16_n64_tb, ("f16", 128): wgmma_f16_n128_tb,
            ("bf16", 64): wgmma_bf16_n64_tb, ("bf16", 128): wgmma_bf16_n128_tb}
WGMMA_RS = {("f16", 64): wgmma_f16_n64_rs, ("f16", 128): wgmma_f16_n128_rs,
            ("bf16", 64): wgmma_bf16_n64_rs, ("bf16", 128): wgmma_bf16_n128_rs}
WGMMA_RS_TB = {("f16", 64): wgmma_f16_n64_rs_tb, ("f16", 128): wgmma_f16_n128_rs_tb,
               ("bf16", 64): wgmma_bf16_n64_rs_tb, ("bf16", 128): wgmma_bf16_n128_rs_tb}


# tf32 (3xTF32 on wgmma: attention_wgmma_tf32): S = Q Kᵀ as SS with N = the K/V tile (32, 64;
# the backward's at d = 128: 16), O += P V as RS with N = d (64, 128)
wgmma_tf32_n16 = helper(_wgmma("tf32", 16))
wgmma_tf32_n32 = helper(_wgmma("tf32", 32))
wgmma_tf32_n64 = helper(_wgmma("tf32", 64))
wgmma_tf32_n128 = helper(_wgmma("tf32", 128))
wgmma_tf32_n64_rs = helper(_wgmma("tf32", 64, True))
wgmma_tf32_n128_rs = helper(_wgmma("tf32", 128, True))
WGMMA_TF32 = {16: wgmma_tf32_n16, 32: wgmma_tf32_n32, 64: wgmma_tf32_n64, 128: wgmma_tf32_n128}
WGMMA_TF32_RS = {64: wgmma_tf32_n64_rs, 128: wgmma_tf32_n128_rs}


# --- cp.async completing on an mbarrier ---------------------------------------------------------
@helper
@intrinsic
def cp_async_mbar_arrive(typingctx, bars, i):
    """cp.async.mbarrier.arrive.noinc.shared::cta.b64 [a]: one arrival on bars[i] once every
    cp.async this thread issued before has landed (noinc: it counts against the count given
    to mbar_init, so init with the number of threads that do this)."""
    if not _is_bars(bars, i):
        return None

    def codegen(context, builder, sig, args):
        a = shared_address(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        _inline(builder, "cp.async.mbarrier.arrive.noinc.shared::cta.b64 [$0];", "", "r", [a])
        return context.get_dummy_value()
    return types.void(bars, i), codegen


# ---------------------------------------------------------------------------------------------
# Test kernels (tests/test_hopper.py): each helper in a kernel of its own
# ---------------------------------------------------------------------------------------------
@pure_device
def acc_to_matrix(d, acc, w, g, t, n):
    """The test kernels' readout: the thread's part of a 64 × n wgmma accumulator into the
    matrix d, by the layout drawn in the menu (warp w, g = lane // 4, t = lane % 4)."""
    for j in range(n // 8):
        d[16 * w + g, 8 * j + 2 * t] = acc[4 * j]
        d[16 * w + g, 8 * j + 2 * t + 1] = acc[4 * j + 1]
        d[16 * w + g + 8, 8 * j + 2 * t] = acc[4 * j + 2]
        d[16 * w + g + 8, 8 * j + 2 * t + 1] = acc[4 * j + 3]


@pure_device
def matrix_to_acc(acc, c, w, g, t, n):
    """The test kernels' start: the thread's part of the 64 × n matrix c into its wgmma
    accumulator fragments (acc_to_matrix's inverse)."""
    for j in range(n // 8):
        acc[4 * j] = c[16 * w + g, 8 * j + 2 * t]
        acc[4 * j + 1] = c[16 * w + g, 8 * j + 2 * t + 1]
        acc[4 * j + 2] = c[16 * w + g + 8, 8 * j + 2 * t]
        acc[4 * j + 3] = c[16 * w + g + 8, 8 * j + 2 * t + 1]


def wgmma_kernel(kind, N, KSTEPS, swizzle=SWIZZLE_NONE, zero_first=False):
    """A kernel d[64, N] = a[64, K] @ bt[N, K]ᵀ + c (K = 16·KSTEPS) for one warpgroup (128
    threads): a and bt hold fp16 or bf16 bits (uint16), c and d float32. The threads store
    the tiles K-major in shared memory (kmajor_index, or kmajor_sw128_index with
    SWIZZLE_128B, K = 64), load c into the accumulator fragments, issue KSTEPS k16 mmas as one
    group, wait, and store the fragments. zero_first: the first mma with scale_d = 0
    (D = A·B: c ignored)."""
    mma = WGMMA[(kind, N)]
    K, H = 16 * KSTEPS, N // 2
    if swizzle == SWIZZLE_128B:
        if K != 64:
            raise ValueError(f"wgmma_kernel: the 128-byte swizzle needs K = 64, got {K}")
        a_lbo = b_lbo = 16                  # unused: encoded 1
        a_sbo = b_sbo = 1024                # 8 rows × 128 bytes
    elif swizzle == SWIZZLE_NONE:
        a_lbo, b_lbo = 16 * 64, 16 * N      # one k-block of all rows (8 halves × rows)
        a_sbo = b_sbo = 128                 # one core matrix
    else:
        raise ValueError(f"wgmma_kernel: swizzle must be SWIZZLE_NONE or SWIZZLE_128B, got "
                         f"{swizzle!r}")
    SW = swizzle == SWIZZLE_128B
    A_SIZE, B_SIZE = 64 * K, N * K          # halves

    @cuda.jit
    def kernel(a, bt, c, d):
        sA = cuda.shared.array(A_SIZE, uint16, alignment=1024)   # 1024: the swizzle atoms'
        sB = cuda.shared.array(B_SIZE, uint16, alignment=1024)
        tid = cuda.threadIdx.x
        for e in range(tid, A_SIZE, 128):
            r, k = e // K, e % K
            sA[kmajor_sw128_index(r, k) if SW else kmajor_index(r, k, 64)] = a[r, k]
        for e in range(tid, B_SIZE, 128):
            r, k = e // K, e % K
            sB[kmajor_sw128_index(r, k) if SW else kmajor_index(r, k, N)] = bt[r, k]
        fence_proxy_async()         # these st.shared before wgmma's (async-proxy) reads
        cuda.syncthreads()          # wait: both tiles are in shared memory
        w, g, t = tid // 32, (tid % 32) // 4, tid % 4
        acc = cuda.local.array(H, float32)
        matrix_to_acc(acc, c, w, g, t, N)   # c in the accumulator layout drawn in the menu
        wgmma_fence_operand(acc, H)
        wgmma_fence()               # the accumulator writes above before the mmas
        for s in range(KSTEPS):     # k16 step s: A columns 16s‥16s+15, B rows the same
            da = wgmma_desc(shared_addr(sA, 16 * s if SW else 16 * 64 * s), a_lbo, a_sbo,
                            swizzle)
            db = wgmma_desc(shared_addr(sB, 16 * s if SW else 16 * N * s), b_lbo, b_sbo,
                            swizzle)
            mma(acc, da, db, s > 0 or not zero_first)      # D = A·B + (D if scale_d)
        wgmma_commit_group()        # the KSTEPS mmas: one group
        wgmma_wait_group(0)         # wait: no group pending, acc holds the result
        wgmma_fence_operand(acc, H)
        acc_to_matrix(d, acc, w, g, t, N)
    return kernel


def wgmma_ab_kernel(kind, N, KSTEPS, rs=False, trans_b=0, b_rows=False, sw128=False):
    """A kernel d[64, N] = a[64, K] @ b[K, N] + c (K = 16·KSTEPS) for one warpgroup, where b is
    row-major (as V[key][d] is) — the two forms the P·V product of FlashAttention-3 needs,
    each testable alone:

    trans_b 0: b stored K-major (b's columns as rows: kmajor_index(n, k, N)), imm-trans-b 0;
    trans_b 1: b stored N-major as it is (mnmajor_index(k, n, N): 16-byte runs of a row of b),
               imm-trans-b 1, LBO = 16·N bytes (k-blocks), SBO = 128 bytes (n-blocks);
    rs False:  a from shared memory (kmajor_index, a descriptor);
    rs True:   a from registers: each thread packs its four words of half pairs straight from
               global memory in the A-fragment layout (mma.sync's m16n8k16 on its warp's 16
               rows) — no shared memory for A.

    b_rows (with trans_b 1): b stored instead as a K-major tile of its K rows
               (kmajor_index(k, n, K), as a K or Q tile lies for S = Q Kᵀ) and read N-major
               through LBO = 128 bytes (k-blocks), SBO = 16·K bytes (n-blocks), the k16 step s
               at byte 256·s: the wgmma backward's second reading of one tile
               (attention_wgmma_backward.py, "one tile, two readings").
    sw128 (with trans_b 1): b stored as sw128_index(k, n, K) (a row of b, 128 bytes a 64
               columns, chunks XOR k % 8) and read MN-major with the 128-byte swizzle: SBO =
               1024, LBO = 128·K (the next 64 columns: N = 128 only), the k16 step s at byte
               2048·s — the V of attention_wgmma with SWIZZLE (docs/hopper_sw128.md).
    (b_rows and sw128 take their descriptor from nmajor_desc, as the kernels do.)

    kind "tf32" (trans_b 0 only: tf32 has no N-major form): a, b float32 (already tf32: the
    tensor core ignores the low 13 mantissa bits), K = 8·KSTEPS (m64nNk8), each element a word
    at kmajor_index(r, 2k, rows) / 2 (the fp16 layout's bytes: a k8 step is the 32 bytes of a
    row an fp16 k16 step is); rs: A from four float32 registers a thread, the m16n8k8 tf32 A
    fragment (a0 = A[g, t], a1 = A[g + 8, t], a2 = A[g, t + 4], a3 = A[g + 8, t + 4]).

    c is loaded into the accumulators; d is written from them (hopper.py's table)."""
    assert not b_rows or trans_b
    assert not sw128 or (trans_b and not b_rows)
    tf32 = kind == "tf32"
    assert not (tf32 and trans_b)
    if tf32:
        mma = WGMMA_TF32_RS[N] if rs else WGMMA_TF32[N]
    elif rs and trans_b:
        mma = WGMMA_RS_TB[(kind, N)]
    elif rs:
        mma = WGMMA_RS[(kind, N)]
    elif trans_b:
        mma = WGMMA_TB[(kind, N)]
    else:
        mma = WGMMA[(kind, N)]
    STEP = 8 if tf32 else 16                # k of one instruction
    W = 2 if tf32 else 1                    # halves an element (kmajor_index counts halves)
    K, H = STEP * KSTEPS, N // 2
    A_SIZE, B_SIZE = 64 * K, N * K
    ELEMENT = float32 if tf32 else uint16

    @cuda.jit
    def kernel(a, b, c, d):
        sA = cuda.shared.array(A_SIZE, ELEMENT, alignment=1024)
        sB = cuda.shared.array(B_SIZE, ELEMENT, alignment=1024)
        tid = cuda.threadIdx.x
        if not rs:
            for e in range(tid, A_SIZE, 128):
                sA[kmajor_index(e // K, W * (e % K), 64) // W] = a[e // K, e % K]
        for e in range(tid, B_SIZE, 128):
            k, n = e // N, e % N
            sB[sw128_index(k, n, K) if sw128 else kmajor_index(k, n, K) if b_rows else
               mnmajor_index(k, n, N) if trans_b else kmajor_index(n, W * k, N) // W] = b[k, n]
        fence_proxy_async()         # these st.shared before wgmma's (async-proxy) reads
        cuda.syncthreads()          # wait: the tiles are in shared memory
        w, g, t = tid // 32, (tid % 32) // 4, tid % 4
        acc = cuda.local.array(H, float32)
        matrix_to_acc(acc, c, w, g, t, N)   # c in the accumulator layout drawn in the menu
        ra = cuda.local.array(4, uint32)
        rf = cuda.local.array(4, float32)
        wgmma_fence_operand(acc, H)
        wgmma_fence()               # the accumulator writes above before the mmas
        for s in range(KSTEPS):     # (step s: 32 bytes of every row on, either kind)
            db = nmajor_desc(shared_addr(sB, 0), K, s, sw128) if b_rows or sw128 \
                else wgmma_desc(shared_addr(sB, STEP * N * s), 16 * N, 128, SWIZZLE_NONE)
            if rs and tf32:         # a0 = A[g, t], a1 = A[g+8, t], a2, a3: k + 4
                for j in range(4):
                    rf[j] = a[16 * w + g + 8 * (j & 1), 8 * s + t + 4 * (j >> 1)]
                mma(acc, rf[0], rf[1], rf[2], rf[3], db, True)
            elif rs:                # a0 = A[g, 2t : 2t+2], a1 = A[g+8, …], a2, a3: k + 8
                for j in range(4):
                    r, k = 16 * w + g + 8 * (j & 1), 16 * s + 2 * t + 8 * (j >> 1)
                    ra[j] = uint32(a[r, k]) | (uint32(a[r, k + 1]) << uint32(16))
                mma(acc, ra[0], ra[1], ra[2], ra[3], db, True)
            else:
                da = wgmma_desc(shared_addr(sA, STEP * 64 * s), 16 * 64, 128, SWIZZLE_NONE)
                mma(acc, da, db, True)
        wgmma_commit_group()        # the KSTEPS mmas: one group
        wgmma_wait_group(0)         # wait: acc holds the result (and ra may be reused)
        wgmma_fence_operand(acc, H)
        acc_to_matrix(d, acc, w, g, t, N)
    return kernel


@cuda.jit
def cp_async_mbarrier_kernel(src, out):
    """64 threads, 3 rounds into one buffer of 64 × 4 words: each thread copies its 16 bytes
    (word 4·tid … of round r of src; thread 5's copy zero-filled) by cp.async and arrives on
    the mbarrier with cp_async_mbar_arrive (count 64); every thread waits for parity r % 2 and
    copies another thread's 16 bytes into out[r]; a syncthreads before the next round's copies
    overwrite the buffer."""
    bars = cuda.shared.array(1, uint64)
    buf = cuda.shared.array(256, uint32, alignment=16)
    tid = cuda.threadIdx.x
    if tid == 0:
        mbar_init(bars, 0, 64)
        fence_mbarrier_init()
    cuda.syncthreads()                  # wait: the barrier is initialised
    for r in range(3):
        cp_async16(buf, 4 * tid, src, 256 * r + 4 * tid, tid != 5)
        cp_async_mbar_arrive(bars, 0)   # one arrival once my copy has landed
        mbar_try_wait_parity(bars, 0, r % 2)    # wait: all 64 copies of round r landed
        o = 4 * ((tid + 7) % 64)
        for e in range(4):
            out[r, 4 * tid + e] = buf[o + e]
        cuda.syncthreads()              # wait: everyone read buf before round r + 1's copies


@cuda.jit
def mbarrier_kernel(src, out):
    """64 threads, 3 phases of two mbarriers: bars[0] counts 64 arrivals (every thread),
    bars[1] counts 2 (lane 0 of each warp). Phase p: warp 1 writes src[p] into row p of buf,
    every thread arrives on bars[0] and waits for parity p % 2, warp 0 reads warp 1's row
    (another lane's element) into out[p]; warp 0 writes −src[p] into buf2, the two lanes 0
    arrive on bars[1], every thread waits for it, warp 1 reads warp 0's row into out[3 + p]."""
    bars = cuda.shared.array(2, uint64)
    buf = cuda.shared.array(3 * 32, float32)
    buf2 = cuda.shared.array(3 * 32, float32)
    tid = cuda.threadIdx.x
    lane = tid % 32
    if tid == 0:
        mbar_init(bars, 0, 64)
        mbar_init(bars, 1, 2)
        fence_mbarrier_init()
    cuda.syncthreads()                          # wait: both barriers are initialised
    for p in range(3):
        if tid >= 32:
            buf[32 * p + lane] = src[p, lane]
        mbar_arrive(bars, 0)
        mbar_try_wait_parity(bars, 0, p % 2)    # wait: phase p of bars[0] completed
        if tid < 32:
            out[p, lane] = buf[32 * p + (lane + 1) % 32]
            buf2[32 * p + lane] = -src[p, lane]
        cuda.syncwarp()                         # the warp's writes before its lane 0 arrives
        if lane == 0:
            mbar_arrive(bars, 1)
        mbar_try_wait_parity(bars, 1, p % 2)    # wait: both lanes 0 arrived (count 2)
        if tid >= 32:
            out[3 + p, lane] = buf2[32 * p + (lane + 3) % 32]


@cuda.jit
def bulk_copy_kernel(src, n0, n1, out, early, probe):
    """64 threads; buf (256 floats) starts at −1. Phase 0: thread 0 expects 4·n0 bytes on
    the mbarrier and copies src[0 : n0] to buf[0 : n0]; every thread waits for parity 0 and
    copies buf to out[0]. Phase 1: src[n0 : n0 + n1] to buf[64 : 64 + n1], parity 1, out[1].
    probe: early[0] = what buf[0] held just after the copy was issued (the simulator lands
    the bytes when a thread waits; on the GPU a race, so probe there only)."""
    bars = cuda.shared.array(1, uint64)
    buf = cuda.shared.array(256, float32, alignment=16)
    tid = cuda.threadIdx.x
    for i in range(tid, 256, 64):
        buf[i] = -1.0
    if tid == 0:
        mbar_init(bars, 0, 1)
        fence_mbarrier_init()
    fence_proxy_async()                 # the −1 stores before the copy engine's writes
    cuda.syncthreads()                  # wait: barrier initialised, buf filled
    if tid == 0:
        mbar_arrive_expect_tx(bars, 0, 4 * n0)
        bulk_copy_g2s(buf, 0, src, 0, 4 * n0, bars, 0)
        if probe:
            early[0] = buf[0]
    if probe:
        cuda.syncthreads()              # (the probe's: nobody waits before thread 0 looked)
    mbar_try_wait_parity(bars, 0, 0)    # wait: the 4·n0 bytes have landed
    for i in range(tid, 256, 64):
        out[0, i] = buf[i]
    cuda.syncthreads()                  # wait: everyone read buf before it is written again
    if tid == 0:
        mbar_arrive_expect_tx(bars, 0, 4 * n1)
        bulk_copy_g2s(buf, 64, src, n0, 4 * n1, bars, 0)
    mbar_try_wait_parity(bars, 0, 1)    # wait: phase 1 (parity 1) completed
    for i in range(tid, 256, 64):
        out[1, i] = buf[i]


FULL, EMPTY = 1, 2          # named_barrier_kernel's barrier ids (0 is cuda.syncthreads()'s)


@cuda.jit
def named_barrier_kernel(src, out):
    """Warp 0 produces rounds of 32 floats into buf, warp 1 consumes them: FULL (producer
    arrives, consumer syncs) says a round is in buf, EMPTY (consumer arrives, producer syncs)
    says it was read and buf may be overwritten."""
    buf = cuda.shared.array(32, float32)
    tid = cuda.threadIdx.x
    lane = tid % 32
    rounds = src.shape[0]
    if tid < 32:                                    # producer
        for r in range(rounds):
            if r > 0:
                bar_sync(EMPTY, 64)                 # wait: the consumer read round r − 1
            buf[lane] = src[r, lane]
            bar_arrive(FULL, 64)                    # round r is in buf
    else:                                           # consumer
        for r in range(rounds):
            bar_sync(FULL, 64)                      # wait: round r is in buf
            out[r, lane] = buf[(lane + 1) % 32]     # another lane's element
            if r < rounds - 1:
                bar_arrive(EMPTY, 64)               # buf may be overwritten


@cuda.jit
def turns_kernel(sem, order):
    """Blocks take turns on sem[0]: block b waits for turn b, then writes order[b] = sem[1] and
    sem[1] + 1 back (plain accesses, safe only one block at a time), then gives turn b + 1.
    order = 0, 1, 2 … when the turns hold (each block saw its predecessor's write)."""
    b = cuda.blockIdx.x
    if cuda.threadIdx.x == 0:
        sem_wait_geq(sem, 0, b)                     # my turn (acquire)
        seen = sem[1]
        order[b] = seen
        sem[1] = seen + 1
        sem_release_add(sem, 0, 1)                  # the next block's (release)


@cuda.jit(**gpu_options(max_registers=128))
def setmaxnreg_kernel(x, out):
    """Two warpgroups (256 threads) under a cap of 128 registers: warpgroup 0 (the producer's
    role in FA3) gives registers up, warpgroup 1 (a consumer) takes them; then each thread
    writes out[tid] = 2·x[tid] (a kernel that still runs after the change)."""
    tid = cuda.threadIdx.x
    if tid < 128:
        setmaxnreg_dec(64)
    else:
        setmaxnreg_inc(192)
    out[tid] = 2 * x[tid]
