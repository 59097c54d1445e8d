"""§37 — tensor cores from Numba: ``mma.sync`` helpers, and the same helpers in the simulator.

Numba has no public tensor-core API. These helpers put one PTX instruction into the kernel as
LLVM inline assembly (``@intrinsic`` + ``llvmlite.ir.InlineAsm``): no linked file, no call, no
local memory — the fragments stay in registers like any other Numba scalar. In the CUDA
simulator each helper is replaced by its twin (``kernels_numba/sim/mma.py``, chosen in
``kernels_numba/sim/__init__.py``): a warp rendezvous where all 32 lanes hand in their
fragments, the 16×8 product is computed in NumPy, each lane gets its own part back. So a
tensor-core kernel is one source on the GPU and on the CPU, like every other kernel here.

Menu (the warp computes D = A·B + C; every lane passes its fragment registers)::

    mma_f16(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3) -> (d0, d1, d2, d3)
        mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32   A 16×16 fp16, B 16×8 fp16, C/D fp32
    mma_bf16(...)      the same with bf16 inputs (…f32.bf16.bf16.f32)
    mma_tf32(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3) -> (d0, d1, d2, d3)
        mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32  A 16×8, B 8×8, operands float32
        whose low 13 mantissa bits the tensor core ignores (round them first: tf32()); the
        sum is rounded toward zero, not to nearest (the Limits below)
    pack_f16(lo, hi) / pack_bf16(lo, hi) -> uint32   two float32 → one register of two halves,
                                                     round to nearest even (cvt.rn.*x2.f32)
    tf32(x) -> float32                  x rounded to tf32 (10 mantissa bits; cvt.rna.tf32.f32)
    ex2(x) -> float32                   2^x on the special-function unit, denormal results
                                        flushed to 0 (ex2.approx.ftz.f32): one instruction,
                                        where e^x (__expf) costs a multiply and a denormal
                                        fix-up around it; the backward's P = 2^(S·scale·log2e
                                        − LSE·log2e) = e^(S·scale − LSE), as FlashAttention-2
    pair_lo(a, b) / pair_hi(a, b) -> uint32   (low half of a, low half of b) / (high, high):
                                              regroups two rows of half pairs into two columns
    unpack_f16(w) / unpack_bf16(w) -> (lo, hi)   one register of two halves → two float32
    ldsm_x4(smem, i) -> (r0, r1, r2, r3)   ldmatrix.sync.aligned.m8n8.x4.shared.b16: four 8×8
        matrices of halves from shared memory (uint32 words), lane l giving the start (word
        index i, 16-byte aligned) of row l % 8 of matrix l // 8; lane 4g + t gets, in r_m,
        the word of matrix m's row g holding its columns 2t, 2t + 1 — a b0/b1 fragment of
        B = (rows)ᵀ, so K rows give Kᵀ's fragments
    ldsm_x4_trans(smem, i)             the same with .trans: lane 4g + t gets rows 2t, 2t + 1
        of column g (two halves of two different rows in one word) — B's fragment straight
        from row-major B, so V rows give V's fragments without a transposed copy

Fragment layout (PTX ISA, "Matrix fragments for mma.m16n8k16"), lane = 4·g + t, g = lane // 4
(the row group, 0..7) and t = lane % 4 (0..3); "x2" registers hold two halves, low half first::

    A 16×16 (row-major)            B 16×8 (column-major)       C, D 16×8 fp32
    a0 = A[g,   2t : 2t+2]         b0 = B[2t   : 2t+2,   g]    c0, c1 = C[g,   2t], C[g,   2t+1]
    a1 = A[g+8, 2t : 2t+2]         b1 = B[2t+8 : 2t+10,  g]    c2, c3 = C[g+8, 2t], C[g+8, 2t+1]
    a2 = A[g,   2t+8 : 2t+10]
    a3 = A[g+8, 2t+8 : 2t+10]

                 k →  0 1 | 2 3 | 4 5 | 6 7 | 8 9 |10 11| …       n →  0  1 | 2  3 | 4  5 | 6  7
    A row g:       lane 4g  4g+1  4g+2  4g+3  4g    4g+1        C row g:  4g     4g+1   4g+2   4g+3
                   (a0 ……………………………………)  (a2 …………)                      (c0,c1 of those lanes)
    A row g+8:     same lanes, registers a1 and a3               C row g+8: same lanes, c2, c3

  m16n8k8 tf32: a0 = A[g, t], a1 = A[g+8, t], a2 = A[g, t+4], a3 = A[g+8, t+4];
                b0 = B[t, g], b1 = B[t+4, g]; C, D as above.

Why this layout suits attention: D of S = Q·Kᵀ, taken as two n-blocks side by side, *is* the A
fragment of the next product P·V (c0,c1 of n-block 2j → a0, c2,c3 → a1, n-block 2j+1 → a2, a3):
P goes from the accumulator to the next mma without leaving the registers (§37). B = Kᵀ
column-major is K row-major: b0 is one 32-bit word of a K row (two consecutive d).

Limits. Hardware sm_80 or newer (the H200 is sm_90). All 32 lanes of the warp must call each
mma with the same shape (warp-collective, as in PTX); in the simulator a lane that skips it is
reported, never a hang. The simulator's fp16/bf16 mmas accumulate in float64 and round once to
float32 (the tensor core's own accumulation differs at the ulp level); its tf32 mma adds as
Hopper's tensor core does (``sim/mma.tf32_block_fma``: the 8 products and c cut to the grid of
the largest, the sum rounded toward zero — not IEEE, and what decides 3xTF32's accuracy:
``attention_tc.mma3``).

Tests: ``tests/test_mma.py`` (each helper alone against NumPy, simulator and GPU).
"""

from llvmlite import ir
from numba import cuda, types, uint32
from numba.cuda.extending import intrinsic

from .sim import helper_chooser
from .vector import shared_address

# Each helper below is an @intrinsic of inline PTX. ``helper`` keeps it on the GPU and swaps in
# its simulator twin of the same name (kernels_numba/sim/mma.py) when the simulator is on.
helper = helper_chooser("mma")


_I32, _F32 = ir.IntType(32), ir.FloatType()


def _operand(context, builder, value, fromty, want):
    """Cast a Numba value to the inline asm's operand: i32 register or f32 register."""
    if want == "r":
        if isinstance(fromty, types.Float):
            value = context.cast(builder, value, fromty, types.float32)
            return builder.bitcast(value, _I32)
        return context.cast(builder, value, fromty, types.uint32)
    return context.cast(builder, value, fromty, types.float32)


def _asm(context, builder, sig, args, text, outs, ins):
    """Emit ``text`` as inline PTX: outs/ins are constraint letters ('r' i32, 'f' f32)."""
    ll = {"r": _I32, "f": _F32}
    ret = ll[outs[0]] if len(outs) == 1 else ir.LiteralStructType([ll[o] for o in outs])
    fnty = ir.FunctionType(ret, [ll[c] for c in ins])
    constraints = ",".join(["=" + o for o in outs] + list(ins))
    asm = ir.InlineAsm(fnty, text, constraints, side_effect=False)
    operands = [_operand(context, builder, v, ty, c)
                for v, ty, c in zip(args, sig.args, ins)]
    res = builder.call(asm, operands)
    if len(outs) == 1:
        return res
    return [builder.extract_value(res, n) for n in range(len(outs))]


def _mma(name, shape, kind):
    text = (f"mma.sync.aligned.{shape}.row.col.f32.{kind}.{kind}.f32 "
            "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};")
    ret = types.UniTuple(types.float32, 4)

    def codegen(context, builder, sig, args):
        d = _asm(context, builder, sig, args, text, "ffff", "rrrrrr" + "ffff")
        return context.make_tuple(builder, ret, d)

    def typer(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        return ret(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3), codegen

    typer.__name__ = name
    return intrinsic(typer)


mma_f16 = helper(_mma("mma_f16", "m16n8k16", "f16"))
mma_bf16 = helper(_mma("mma_bf16", "m16n8k16", "bf16"))
mma_tf32 = helper(_mma("mma_tf32", "m16n8k8", "tf32"))


def _to_register(name, text, ins, rty=types.uint32):
    """An intrinsic for one PTX instruction with a 32-bit register result, returned as
    ``rty`` (uint32, or float32 for the same bits)."""
    def codegen(context, builder, sig, args):
        res = _asm(context, builder, sig, args, text, "r", ins)
        return builder.bitcast(res, _F32) if rty == types.float32 else res

    if len(ins) == 2:
        def typer(typingctx, a, b):
            return rty(a, b), codegen
    else:
        def typer(typingctx, a):
            return rty(a), codegen
    typer.__name__ = name
    return intrinsic(typer)


# cvt.rn.f16x2.f32 d, a, b puts a in the high half and b in the low half.
pack_f16 = helper(_to_register("pack_f16", "cvt.rn.f16x2.f32 $0, $2, $1;", "ff"))
pack_bf16 = helper(_to_register("pack_bf16", "cvt.rn.bf16x2.f32 $0, $2, $1;", "ff"))
tf32 = helper(_to_register("tf32", "cvt.rna.tf32.f32 $0, $1;", "f", types.float32))


@helper
@intrinsic
def ex2(typingctx, x):
    def codegen(context, builder, sig, args):
        return _asm(context, builder, sig, args, "ex2.approx.ftz.f32 $0, $1;", "f", "f")
    return types.float32(x), codegen


def _to_two_floats(name, text):
    ret = types.UniTuple(types.float32, 2)

    def codegen(context, builder, sig, args):
        return context.make_tuple(builder, ret, _asm(context, builder, sig, args, text,
                                                     "ff", "r"))

    def typer(typingctx, w):
        return ret(w), codegen
    typer.__name__ = name
    return intrinsic(typer)


unpack_f16 = helper(_to_two_floats("unpack_f16", "{ .reg .f16 lo, hi; mov.b32 {lo, hi}, $2; "
                                   "cvt.f32.f16 $0, lo; cvt.f32.f16 $1, hi; }"))
unpack_bf16 = helper(_to_two_floats("unpack_bf16", "{ .reg .b32 t0, t1; shl.b32 t0, $2, 16; "
                                    "and.b32 t1, $2, 0xFFFF0000; mov.b32 $0, t0; "
                                    "mov.b32 $1, t1; }"))
# prmt.b32: bytes of {b, a} numbered 7..4 (b) 3..0 (a); 0x5410 = b.lo:a.lo, 0x7632 = b.hi:a.hi
pair_lo = helper(_to_register("pair_lo", "prmt.b32 $0, $1, $2, 0x5410;", "rr"))
pair_hi = helper(_to_register("pair_hi", "prmt.b32 $0, $1, $2, 0x7632;", "rr"))


def _ldsm(name, trans):
    """ldmatrix x4 from a shared uint32 array: the element's 32-bit shared-window address
    (vector.shared_address), four registers out. The memory clobber keeps LLVM from moving
    it across the barriers and stores around it."""
    text = (f"ldmatrix.sync.aligned.m8n8.x4{'.trans' if trans else ''}.shared.b16 "
            "{$0, $1, $2, $3}, [$4];")
    ret = types.UniTuple(types.uint32, 4)

    def codegen(context, builder, sig, args):
        addr = shared_address(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        fnty = ir.FunctionType(ir.LiteralStructType([_I32] * 4), [_I32])
        asm = ir.InlineAsm(fnty, text, "=r,=r,=r,=r,r,~{memory}", side_effect=True)
        res = builder.call(asm, [addr])
        return context.make_tuple(builder, ret,
                                  [builder.extract_value(res, n) for n in range(4)])

    def typer(typingctx, smem, i):
        if not (isinstance(smem, types.Array) and smem.dtype == types.uint32 and
                isinstance(i, types.Integer)):
            return None
        return ret(smem, i), codegen

    typer.__name__ = name
    return intrinsic(typer)


ldsm_x4 = helper(_ldsm("ldsm_x4", False))
ldsm_x4_trans = helper(_ldsm("ldsm_x4_trans", True))


# ---------------------------------------------------------------------------------------------
# Test kernels: one warp, one instruction, operands laid out as in the table above
# ---------------------------------------------------------------------------------------------
def mma16_kernel(BF16):
    """A kernel d[16, 8] = a[16, 16] @ b[16, 8] + c for one warp (a, b float32, rounded here to
    fp16, or bf16 with BF16): each lane packs its fragment as the table above says."""
    mma = mma_bf16 if BF16 else mma_f16
    pack = pack_bf16 if BF16 else pack_f16

    @cuda.jit
    def kernel(a, b, c, d):
        lane = cuda.threadIdx.x
        g = lane // 4
        t = lane % 4
        d0, d1, d2, d3 = mma(
            pack(a[g, 2 * t], a[g, 2 * t + 1]), pack(a[g + 8, 2 * t], a[g + 8, 2 * t + 1]),
            pack(a[g, 2 * t + 8], a[g, 2 * t + 9]), pack(a[g + 8, 2 * t + 8], a[g + 8, 2 * t + 9]),
            pack(b[2 * t, g], b[2 * t + 1, g]), pack(b[2 * t + 8, g], b[2 * t + 9, g]),
            c[g, 2 * t], c[g, 2 * t + 1], c[g + 8, 2 * t], c[g + 8, 2 * t + 1])
        d[g, 2 * t] = d0
        d[g, 2 * t + 1] = d1
        d[g + 8, 2 * t] = d2
        d[g + 8, 2 * t + 1] = d3
    return kernel


mma_f16_kernel, mma_bf16_kernel = mma16_kernel(False), mma16_kernel(True)


@cuda.jit
def mma_tf32_kernel(a, b, c, d):
    """d[16, 8] = a[16, 8] @ b[8, 8] + c, operands rounded to tf32 here."""
    lane = cuda.threadIdx.x
    g = lane // 4
    t = lane % 4
    d0, d1, d2, d3 = mma_tf32(tf32(a[g, t]), tf32(a[g + 8, t]), tf32(a[g, t + 4]),
                              tf32(a[g + 8, t + 4]), tf32(b[t, g]), tf32(b[t + 4, g]),
                              c[g, 2 * t], c[g, 2 * t + 1], c[g + 8, 2 * t], c[g + 8, 2 * t + 1])
    d[g, 2 * t] = d0
    d[g, 2 * t + 1] = d1
    d[g + 8, 2 * t] = d2
    d[g + 8, 2 * t + 1] = d3


@cuda.jit
def pack_kernel(x, f16, bf16, lo, hi, t32):
    """Per element pair: the packing helpers, so tests can compare them with NumPy."""
    i = cuda.grid(1)
    if i < f16.shape[0]:
        f16[i] = pack_f16(x[2 * i], x[2 * i + 1])
        bf16[i] = pack_bf16(x[2 * i], x[2 * i + 1])
        lo[i] = pair_lo(f16[i], bf16[i])
        hi[i] = pair_hi(f16[i], bf16[i])
        t32[2 * i] = tf32(x[2 * i])
        t32[2 * i + 1] = tf32(x[2 * i + 1])


@cuda.jit
def ex2_kernel(x, y):
    """y[i] = ex2(x[i]), so tests can compare it with NumPy's 2^x."""
    i = cuda.grid(1)
    if i < x.shape[0]:
        y[i] = ex2(x[i])


@cuda.jit
def ldsm_kernel(src, out, out_t):
    """One warp: src [32, 4] words = four 8 × 8 matrices of halves (matrix m: rows 8m … 8m + 7)
    → shared memory, one row per 8 words (a padded tile's 16-byte aligned rows); lane l gives
    the start of row l, then ldsm_x4 and ldsm_x4_trans; out[lane], out_t[lane] = the four
    registers each lane got."""
    smem = cuda.shared.array(32 * 8, uint32)
    lane = cuda.threadIdx.x
    for c in range(8):
        smem[8 * lane + c] = src[lane, c] if c < 4 else 0
    cuda.syncthreads()                  # wait: every row is in shared memory
    r0, r1, r2, r3 = ldsm_x4(smem, 8 * lane)
    out[lane, 0] = r0
    out[lane, 1] = r1
    out[lane, 2] = r2
    out[lane, 3] = r3
    r0, r1, r2, r3 = ldsm_x4_trans(smem, 8 * lane)
    out_t[lane, 0] = r0
    out_t[lane, 1] = r1
    out_t[lane, 2] = r2
    out_t[lane, 3] = r3
