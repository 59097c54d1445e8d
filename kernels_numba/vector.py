"""Vector loads from shared memory: four float32 in one instruction (``ld.shared.v4.f32``).

Numba exposes only scalar loads; a tile loop that reads one float per instruction is bound by
the shared-memory pipe (§37's point, on CUDA cores). ``load4(a, i)`` returns
(a[i], a[i+1], a[i+2], a[i+3]) as one 16-byte load. The caller guarantees that i is a multiple
of 4 and that the array's data is 16-byte aligned (shared arrays are). In the simulator it is
four plain reads.
"""

from numba import cuda, types
from numba.extending import intrinsic
from llvmlite import ir


if cuda.config.ENABLE_CUDASIM:
    def load4(a, i):
        """(a[i], a[i+1], a[i+2], a[i+3])."""
        return a[i], a[i + 1], a[i + 2], a[i + 3]
else:
    @intrinsic
    def load4(typingctx, a, i):
        """(a[i], a[i+1], a[i+2], a[i+3]) as one 16-byte vector load."""
        if not (isinstance(a, types.Array) and a.dtype == types.float32 and
                isinstance(i, types.Integer)):
            return None
        ret = types.UniTuple(types.float32, 4)

        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, args[0])
            idx = context.cast(builder, args[1], sig.args[1], types.intp)
            ptr = builder.gep(ary.data, [idx])
            vty = ir.VectorType(ir.FloatType(), 4)
            vptr = builder.bitcast(ptr, vty.as_pointer(ptr.type.addrspace))
            vec = builder.load(vptr, align=16)
            items = [builder.extract_element(vec, ir.Constant(ir.IntType(32), n))
                     for n in range(4)]
            return context.make_tuple(builder, ret, items)

        return ret(a, i), codegen
