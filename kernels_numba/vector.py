"""Vector loads and stores: four float32 in one instruction (``ld.v4.f32`` / ``st.v4.f32``);
uint32 arrays too (four words of packed fp16/bf16 pairs, for the tensor-core kernels).

Numba exposes only scalar loads; a tile loop that reads one float per instruction is bound by
the shared-memory pipe (§37's point, on CUDA cores). ``load4(a, i)`` returns
(a[i], a[i+1], a[i+2], a[i+3]) as one 16-byte load; ``store4(a, i, x0, x1, x2, x3)`` writes them
in one 16-byte store; ``load1``/``store1`` are the one-element forms without Numba's
negative-index fix-up (for index arithmetic in unrolled tensor-core loops). ``i`` is a flat element index into the array's data (for a C-contiguous
N-D array: the row-major offset). The caller guarantees that i is a multiple of 4 and that the
array's data is 16-byte aligned (shared arrays are; for global arrays the launcher checks the
pointer). Works on shared and global arrays alike. In the simulator: four plain accesses
(the twins in ``kernels_numba/sim/vector.py``), refusing what the GPU's would: other element
types, an index not a multiple of 4.

Asynchronous copies, global → shared (``cp.async``, sm_80+), so a tile's next K/V rows travel
while the tensor cores work on this one, with no registers held for them (§42 without the
register prefetch): ``cp_async16(dst, di, src, si, ok)`` starts copying src[si … si+3] (four
words, 16 bytes) to dst[di … di+3], or writes four zeros if not ok (a row past N);
``cp_async4`` the same for one word; ``cp_async_wait_all()`` waits for this thread's copies
(then a barrier makes every thread's visible). Flat indices as above; dst a shared array,
src a global one; 16-byte alignment of both for cp_async16. In the simulator the copies are
held back until the thread's ``cp_async_wait_all()``, so a read that forgets to wait sees
stale data and fails a test instead of passing by luck.
"""

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .sim import helper_chooser

# The helpers below are @intrinsics of inline PTX; ``helper`` keeps each on the GPU and swaps in
# its simulator twin of the same name (kernels_numba/sim/vector.py) when the simulator is on.
helper = helper_chooser("vector")

_WORDS = (types.float32, types.uint32)    # 4-byte elements: float32, or packed fp16/bf16 pairs


def element_pointer(context, builder, aryty, ary_value, idx_value, idxty):
    """LLVM pointer to element idx of the array's data (a flat index, no fix-ups): what every
    intrinsic here, and mma.py's ldmatrix, loads from or stores to."""
    ary = context.make_array(aryty)(context, builder, ary_value)
    idx = context.cast(builder, idx_value, idxty, types.intp)
    return builder.gep(ary.data, [idx])


def element_address(context, builder, aryty, ary_value, idx_value, idxty):
    """That pointer as a 64-bit (generic) address, for inline PTX."""
    return builder.ptrtoint(element_pointer(context, builder, aryty, ary_value, idx_value,
                                            idxty), ir.IntType(64))


def shared_address(context, builder, aryty, ary_value, idx_value, idxty):
    """Element idx of a shared array as a 32-bit shared-window address, for inline PTX
    (ldmatrix, cp.async's destination): the array's base converted once (cvta.to.shared,
    no side effects, so LLVM computes it once), the offset added in 32 bits, so that
    ptxas folds constant offsets into the instruction ([R + imm]) instead of a 64-bit add
    per access."""
    ary = context.make_array(aryty)(context, builder, ary_value)
    i32, i64 = ir.IntType(32), ir.IntType(64)
    base = builder.call(ir.InlineAsm(ir.FunctionType(i32, [i64]),
                                     "{ .reg .u64 a; cvta.to.shared.u64 a, $1; "
                                     "cvt.u32.u64 $0, a; }", "=r,l", side_effect=False),
                        [builder.ptrtoint(ary.data, i64)])
    idx = builder.trunc(context.cast(builder, idx_value, idxty, types.intp), i32)
    size = context.get_abi_sizeof(context.get_data_type(aryty.dtype))
    return builder.add(base, builder.mul(idx, ir.Constant(i32, size)))


def _vector_pointer(context, builder, aryty, ary_value, idx_value, idxty):
    ptr = element_pointer(context, builder, aryty, ary_value, idx_value, idxty)
    elem = ir.FloatType() if aryty.dtype == types.float32 else ir.IntType(32)
    vty = ir.VectorType(elem, 4)
    return builder.bitcast(ptr, vty.as_pointer(ptr.type.addrspace)), vty


@helper
@intrinsic
def store4(typingctx, a, i, x0, x1, x2, x3):
    """a[i … i+3] = (x0, x1, x2, x3) as one 16-byte vector store."""
    if not (isinstance(a, types.Array) and a.dtype in _WORDS and
            isinstance(i, types.Integer)):
        return None
    sig = types.void(a, i, x0, x1, x2, x3)

    def codegen(context, builder, sig, args):
        vptr, vty = _vector_pointer(context, builder, sig.args[0], args[0], args[1],
                                    sig.args[1])
        vec = ir.Constant(vty, ir.Undefined)
        for n in range(4):
            x = context.cast(builder, args[2 + n], sig.args[2 + n], sig.args[0].dtype)
            vec = builder.insert_element(vec, x, ir.Constant(ir.IntType(32), n))
        builder.store(vec, vptr, align=16)
        return context.get_dummy_value()

    return sig, codegen


@helper
@intrinsic
def load4(typingctx, a, i):
    """(a[i], a[i+1], a[i+2], a[i+3]) as one 16-byte vector load."""
    if not (isinstance(a, types.Array) and a.dtype in _WORDS and
            isinstance(i, types.Integer)):
        return None
    ret = types.UniTuple(a.dtype, 4)

    def codegen(context, builder, sig, args):
        vptr, _ = _vector_pointer(context, builder, sig.args[0], args[0], args[1],
                                  sig.args[1])
        vec = builder.load(vptr, align=16)
        items = [builder.extract_element(vec, ir.Constant(ir.IntType(32), n))
                 for n in range(4)]
        return context.make_tuple(builder, ret, items)

    return ret(a, i), codegen


@helper
@intrinsic
def load1(typingctx, a, i):
    """a[i] without Numba's negative-index fix-up (i ≥ 0 is the caller's promise): in an
    unrolled loop each a[i] otherwise costs a compare, a select and 64-bit registers."""
    if not (isinstance(a, types.Array) and isinstance(i, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        return builder.load(element_pointer(context, builder, sig.args[0], args[0],
                                            args[1], sig.args[1]))

    return a.dtype(a, i), codegen


@helper
@intrinsic
def store1(typingctx, a, i, x):
    """a[i] = x without the negative-index fix-up (i ≥ 0)."""
    if not (isinstance(a, types.Array) and isinstance(i, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        val = context.cast(builder, args[2], sig.args[2], sig.args[0].dtype)
        builder.store(val, element_pointer(context, builder, sig.args[0], args[0], args[1],
                                           sig.args[1]))
        return context.get_dummy_value()

    return types.void(a, i, x), codegen


def _cp_async(name, nbytes, cache):
    """cp.async of nbytes (src-size nbytes, or 0 = zero-fill when not ok): the destination
    a 32-bit shared-window address (shared_address), the source's generic address made a
    global one in the asm."""
    text = ("{ .reg .u64 g; cvta.to.global.u64 g, $1; "
            f"cp.async.{cache}.shared.global [$0], [g], {nbytes}, $2; }}")

    def codegen(context, builder, sig, args):
        dst = shared_address(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        src = element_address(context, builder, sig.args[2], args[2], args[3], sig.args[3])
        ok = context.cast(builder, args[4], sig.args[4], types.boolean)
        size = builder.select(ok, ir.Constant(ir.IntType(32), nbytes),
                              ir.Constant(ir.IntType(32), 0))
        fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(32), ir.IntType(64),
                                               ir.IntType(32)])
        builder.call(ir.InlineAsm(fnty, text, "r,l,r,~{memory}", side_effect=True),
                     [dst, src, size])
        return context.get_dummy_value()

    def typer(typingctx, dst, di, src, si, ok):
        if not (isinstance(dst, types.Array) and isinstance(src, types.Array) and
                dst.dtype in _WORDS and src.dtype in _WORDS and
                isinstance(di, types.Integer) and isinstance(si, types.Integer)):
            return None
        return types.void(dst, di, src, si, ok), codegen

    typer.__name__ = name
    return intrinsic(typer)


cp_async16 = helper(_cp_async("cp_async16", 16, "cg"))   # .cg: L2 only (the tile is used once)
cp_async4 = helper(_cp_async("cp_async4", 4, "ca"))     # (.cg takes 16 bytes only)


@helper
@intrinsic
def cp_async_wait_all(typingctx):
    """cp.async.wait_all: this thread's copies have landed in shared memory."""
    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(ir.VoidType(), [])
        builder.call(ir.InlineAsm(fnty, "cp.async.wait_all;", "~{memory}",
                                  side_effect=True), [])
        return context.get_dummy_value()
    return types.void(), codegen
