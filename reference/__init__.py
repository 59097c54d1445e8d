"""Pure-NumPy float64 oracles for lesson 22; every kernel is checked against one of these.

This package imports NumPy only (never numba), so it runs where no GPU is.
Softmax, §1–§3 and §17–§20: see :mod:`reference.softmax` for the menu and the conventions
(-inf rows give zeros, NaN or +inf in a row gives a NaN row).
"""

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
from .philox import (
    dropout_keep_mask,
    dropout_threshold,
    philox4x32_10,
    seed_key,
)

__all__ = [
    "softmax_naive",
    "softmax_stable",
    "softmax_three_pass",
    "online_softmax_state",
    "normalize_with_ml",
    "softmax_online",
    "merge_ml",
    "softmax_tiled_ml",
    "softmax_of_first_tile_only",
    "ORACLES",
    "causal_mask",
    "attention",
    "attention_per_query",
    "attention_state",
    "merge_states",
    "merge_attention",
    "flash_attention_tiled",
    "attention_flops",
    "naive_attention_bytes",
    "flash_attention_bytes",
    "attention_state_sizes",
    "attention_backward",
    "attention_backward_intermediates",
    "attention_backward_flops",
    "cu_seqlens",
    "check_cu_seqlens",
    "pack",
    "unpack",
    "packed_to_padded",
    "padded_to_packed",
    "varlen_dropout_masks",
    "varlen_attention",
    "varlen_attention_backward",
    "philox4x32_10",
    "seed_key",
    "dropout_threshold",
    "dropout_keep_mask",
]
