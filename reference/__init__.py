"""Pure-NumPy float64 oracles for lesson 22; every kernel is checked against one of these.

This package imports NumPy only (never numba), so it runs where no GPU is.
Softmax, §1–§3 and §17–§20: see :mod:`reference.softmax` for the menu and the conventions
(-inf rows give zeros, NaN or +inf in a row gives a NaN row).
"""

import types

from .softmax import (
    ORACLES,
    merge_ml,
    normalize_with_ml,
    online_softmax_state,
    softmax_naive,
    softmax_of_first_tile_only,
    softmax_online,
    softmax_stable,
    softmax_three_pass,
    softmax_tiled_ml,
)
from .attention import (
    attention,
    attention_flops,
    attention_per_query,
    attention_state,
    attention_state_sizes,
    causal_mask,
    flash_attention_bytes,
    flash_attention_tiled,
    merge_attention,
    merge_states,
    naive_attention_bytes,
)
from .attention_backward import (
    attention_backward,
    attention_backward_flops,
    attention_backward_intermediates,
    flash_attention_backward_tiled,
)
from .varlen import (
    check_cu_seqlens,
    cu_seqlens,
    pack,
    packed_to_padded,
    padded_to_packed,
    unpack,
    varlen_attention,
    varlen_attention_backward,
    varlen_dropout_masks,
)
from .linear_attention import (
    elu_feature_map,
    linear_attention,
    linear_attention_flops,
    linear_attention_quadratic,
)
from .philox import (
    dropout_keep_mask,
    dropout_threshold,
    philox4x32_10,
    seed_key,
)

# Everything imported above, and nothing else (not the submodules themselves).
__all__ = [name for name, value in list(globals().items())
           if not name.startswith("_") and not isinstance(value, types.ModuleType)]
