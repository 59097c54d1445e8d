"""Vector loads and stores: four float32 in one instruction (``ld.v4.f32`` / ``st.v4.f32``);
uint32 arrays too (four words of packed fp16/bf16 pairs, for the tensor-core kernels).

Numba exposes only scalar loads; a tile loop that reads one float per instruction is bound by
the shared-memory pipe (§37's point, on CUDA cores). ``load4(a, i)`` returns
(a[i], a[i+1], a[i+2], a[i+3]) as one 16-byte load; ``store4(a, i, x0, x1, x2, x3)`` writes them
in one 16-byte store; ``load1``/``store1`` are the one-element forms without Numba's
negative-index fix-up (for index arithmetic in unrolled tensor-core loops). ``i`` is a flat element index into the array's data (for a C-contiguous
N-D array: the row-major offset). The caller guarantees that i is a multiple of 4 and that the
array's data is 16-byte aligned (shared arrays are; for global arrays the launcher checks the
pointer). Works on shared and global arrays alike. In the simulator: four plain accesses.
"""

from numba import cuda, types
from numba.extending import intrinsic
from llvmlite import ir


if cuda.config.ENABLE_CUDASIM:
    def load4(a, i):
        """(a[i], a[i+1], a[i+2], a[i+3]) of the flattened array."""
        flat = a.reshape(-1) if a.ndim > 1 else a
        return flat[i], flat[i + 1], flat[i + 2], flat[i + 3]

    def store4(a, i, x0, x1, x2, x3):
        """a[i], a[i+1], a[i+2], a[i+3] = x0, x1, x2, x3 (flattened array)."""
        flat = a.reshape(-1) if a.ndim > 1 else a
        flat[i], flat[i + 1], flat[i + 2], flat[i + 3] = x0, x1, x2, x3

    def load1(a, i):
        """a[i] of the flattened array (i ≥ 0)."""
        if i < 0:
            raise IndexError(f"load1: negative index {i}")
        return (a.reshape(-1) if a.ndim > 1 else a)[i]

    def store1(a, i, x):
        """a[i] = x, flattened array (i ≥ 0)."""
        if i < 0:
            raise IndexError(f"store1: negative index {i}")
        (a.reshape(-1) if a.ndim > 1 else a)[i] = x
else:
    _WORDS = (types.float32, types.uint32)    # 4-byte elements: float32, or packed fp16/bf16 pairs

    def _vector_pointer(context, builder, aryty, ary_value, idx_value, idxty):
        ary = context.make_array(aryty)(context, builder, ary_value)
        idx = context.cast(builder, idx_value, idxty, types.intp)
        ptr = builder.gep(ary.data, [idx])
        elem = ir.FloatType() if aryty.dtype == types.float32 else ir.IntType(32)
        vty = ir.VectorType(elem, 4)
        return builder.bitcast(ptr, vty.as_pointer(ptr.type.addrspace)), vty

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

    @intrinsic
    def load1(typingctx, a, i):
        """a[i] without Numba's negative-index fix-up (i ≥ 0 is the caller's promise): in an
        unrolled loop each a[i] otherwise costs a compare, a select and 64-bit registers."""
        if not (isinstance(a, types.Array) and isinstance(i, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, args[0])
            idx = context.cast(builder, args[1], sig.args[1], types.intp)
            return builder.load(builder.gep(ary.data, [idx]))

        return a.dtype(a, i), codegen

    @intrinsic
    def store1(typingctx, a, i, x):
        """a[i] = x without the negative-index fix-up (i ≥ 0)."""
        if not (isinstance(a, types.Array) and isinstance(i, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, args[0])
            idx = context.cast(builder, args[1], sig.args[1], types.intp)
            val = context.cast(builder, args[2], sig.args[2], sig.args[0].dtype)
            builder.store(val, builder.gep(ary.data, [idx]))
            return context.get_dummy_value()

        return types.void(a, i, x), codegen

