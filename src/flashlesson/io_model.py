"""``flashlesson.io_model``: global-memory traffic predicted from formulas (the IO model).

For every softmax method and for naive and flash attention — forward and backward (§30 flash,
§31 naive), causal, with a key padding mask, packed varlen (§35) — the element reads and writes
of each global array, as formulas of the shape, the dtype and the launch parameters (taken from
the same functions and config objects the launchers use, ``flashlesson.configs``). Also here:
``compulsory_traffic`` (§46) and the §48 ASIC view, ``sram_model`` / ``sram_sweep``
(``flashlesson traffic sram``).

The counter that holds these numbers to the library's own calls, element by element, is
``flashlesson.traffic`` (it sits on top of this module and of the operations; this module
reads the configs and the softmax registry only, and runs no kernel). The model works on either
device, with the launch parameters of the device this process runs on.
"""

import sys
from dataclasses import dataclass, field

import numpy as np

from .configs import GEMM_TILES, FlashConfig, default_config
from .softmax_methods import METHODS as SOFTMAX_METHODS, choose, threads_for_block_methods


# ---------------------------------------------------------------------------------------------
# One array's traffic (model and counter alike)
# ---------------------------------------------------------------------------------------------
@dataclass
class Access:
    """Element reads and writes of one global array; ``elements`` is its size."""
    reads: int = 0
    writes: int = 0
    itemsize: int = 4
    elements: int = 0
    by_kernel: dict = field(default_factory=dict, compare=False)   # kernel → [reads, writes]

    @property
    def bytes(self):
        return (self.reads + self.writes) * self.itemsize

    @property
    def read_bytes(self):
        return self.reads * self.itemsize

    @property
    def write_bytes(self):
        return self.writes * self.itemsize


def total_bytes(arrays):
    return sum(a.bytes for a in arrays.values())


def _cdiv(a, b):
    return -(-a // b)


# ---------------------------------------------------------------------------------------------
# The model: softmax (§1–§11, §18–20)
# ---------------------------------------------------------------------------------------------
def softmax_traffic(rows, n, method="auto", dtype=np.float32, threads=None, x="x", y="y"):
    """Element reads/writes of each global array of ``softmax(x[rows, n], method=…)``.

    Every method reads each x element ``Method.reads`` times (the registry's count) and writes
    each y element once; the block-per-row loops ``for j in range(tid, N, T)`` and the warp
    kernels' guards (``j < N``, ``row < rows``) issue no load past the row. three_pass adds
    its per-row m and l (§3): row_max writes m (thread 0), row_sum_exp reads m[row] in each of
    its T threads and writes l, normalize reads m[row] and l[row] in each of its T threads —
    T is the launcher's block size (``threads_for_block_methods``). ``x``, ``y``: the names
    to give the two arrays (the naive attention calls them s and p).
    """
    name = choose(n, dtype) if method == "auto" else method
    if name not in SOFTMAX_METHODS:
        raise ValueError(f"method: expected auto or one of {', '.join(SOFTMAX_METHODS)}; "
                         f"got {method!r}")
    m = SOFTMAX_METHODS[name]
    m.check_n(n)
    size = np.dtype(dtype).itemsize
    e = rows * n
    out = {x: Access(m.reads * e, 0, size, e), y: Access(0, m.writes * e, size, e)}
    if name == "three_pass":
        t = threads_for_block_methods(n, threads)
        out["m"] = Access(2 * t * rows, rows, 4, rows)   # read by every thread of passes 2, 3
        out["l"] = Access(t * rows, rows, 4, rows)       # read by every thread of pass 3
    return out


# ---------------------------------------------------------------------------------------------
# The model: attention (§14 naive, §23–24/§32/§34 flash)
# ---------------------------------------------------------------------------------------------
def _gemm(Z, M, N, K, tiles):
    """``gemm.matmul_kernel``, grid (ceil(N/BN), ceil(M/BM), Z): each block loads its BM rows
    of A and BN columns of op(B) over the whole K (guards: nothing past M, N, K), so A is read
    once per column block and B once per row block; C is written once."""
    BM, BN = tiles[0], tiles[1]
    return Z * _cdiv(N, BN) * M * K, Z * _cdiv(M, BM) * N * K, Z * M * N


def naive_attention_traffic(B, H, nq, nk, d, causal=False, return_lse=True, tiles=None,
                            key_padding_mask=None):
    """§14: S = QKᵀ·scale (GEMM) → P = softmax(S) (``auto``) → O = PV (GEMM) [→ LSE of S].

    tiles: the GEMM tiles (BM, BN, TY, TX), default ``GEMM_TILES``. Causal changes nothing:
    the GEMM computes every tile and writes −inf above the diagonal. Returns name → Access for
    q, k, v, s, p, o (and lse when ``return_lse``: ``row_lse`` reads S once more).
    key_padding_mask (§35, bool [B, Nk]): ``pad_scores`` reads the mask once per element of S
    and writes −inf into S where a key is padded (so here the values matter: H·Nq writes per
    padded key of each batch row).
    """
    bh = B * H
    tiles = tiles or GEMM_TILES
    q_r, k_r, s_w = _gemm(bh, nq, nk, d, tiles)            # S[z] = Q[z] K[z]ᵀ
    p_r, v_r, o_w = _gemm(bh, nq, d, nk, tiles)            # O[z] = P[z] V[z]
    sm = softmax_traffic(bh * nq, nk, "auto", np.float32, x="s", y="p")
    e_s = bh * nq * nk
    out = {
        "q": Access(q_r, 0, 4, bh * nq * d),
        "k": Access(k_r, 0, 4, bh * nk * d),
        "v": Access(v_r, 0, 4, bh * nk * d),
        "s": Access(sm["s"].reads, s_w, 4, e_s),
        "p": Access(p_r, sm["p"].writes, 4, e_s),
        "o": Access(0, o_w, 4, bh * nq * d),
    }
    if return_lse:
        out["s"].reads += e_s                               # row_lse: one more pass over S
        out["lse"] = Access(0, bh * nq, 4, bh * nq)
    if key_padding_mask is not None:
        mask = _check_mask(key_padding_mask, B, nk)
        out["s"].writes += H * nq * int((~mask).sum())      # pad_scores: −inf where padded
        out["key_padding_mask"] = Access(e_s, 0, 1, B * nk)
    return out


def flash_tiles_visited(nq, nk, causal, config):
    """(q0, number of K/V tiles) for each Q tile of one head, as ``flash_forward_kernel``
    computes them: every tile, or (causal, bottom-right) those up to the diagonal."""
    Br, Bc = config.Br, config.Bc
    n_tiles = _cdiv(nk, Bc)
    out = []
    for q0 in range(0, nq, Br):
        t = n_tiles
        if causal:
            last_key = q0 + Br - 1 + nk - nq            # the last key the tile's last row sees
            t = min(n_tiles, last_key // Bc + 1) if last_key >= 0 else 0
        out.append((q0, t))
    return out


def flash_attention_traffic(B, H, nq, nk, d, causal=False, config=None,
                            key_padding_mask=None):
    """§23–24, §32, §34: one kernel, one block per (Q tile, head).

    Q: each Q tile loaded once (``load_Qt``), its rows < Nq, columns < d: Nq·d per head.
    K, V: each visited K/V tile loaded once per Q tile, min(Bc, Nk − k0) rows of d — the
    zeros past Nk and past d are written into shared memory, not loaded. Causal: a Q tile
    stops at the diagonal (``flash_tiles_visited``). O: Nq·d writes, LSE: Nq writes (one
    thread per row). config: default ``default_config(d, Nq, B·H)``, as the launcher.
    key_padding_mask (§35, bool [B, Nk] or None): with a mask the kernel masks every tile, and
    each thread reads the mask entry of each (row, key) of its part of S that is a key < Nk and
    not causally hidden — rows past Nq of a partial Q tile included (``_flash_pad_reads``); which
    keys are padded does not matter, only that there is a mask.
    """
    bh = B * H
    cfg = config or default_config(d, nq, bh)
    if not isinstance(cfg, FlashConfig):
        raise TypeError(f"config: expected a FlashConfig, got {type(cfg).__name__}")
    # the first t tiles of keys hold min(t·Bc, Nk) keys (only the last tile is partial)
    kv_rows = sum(min(t * cfg.Bc, nk) for _, t in flash_tiles_visited(nq, nk, causal, cfg))
    out = {
        "q": Access(bh * nq * d, 0, 4, bh * nq * d),
        "k": Access(bh * kv_rows * d, 0, 4, bh * nk * d),
        "v": Access(bh * kv_rows * d, 0, 4, bh * nk * d),
        "o": Access(0, bh * nq * d, 4, bh * nq * d),
        "lse": Access(0, bh * nq, 4, bh * nq),
    }
    if key_padding_mask is not None:
        _check_mask(key_padding_mask, B, nk)
        out["key_padding_mask"] = Access(bh * _flash_pad_reads(nq, nk, causal, cfg), 0, 1,
                                         B * nk)
    return out


def _check_mask(mask, B, nk):
    if np.shape(mask) != (B, nk):
        raise ValueError(f"key_padding_mask: expected shape (B, Nk) = {(B, nk)}, got "
                         f"{np.shape(mask)}")
    return np.asarray(mask, bool)


def _visible_keys(rows, keys, offset, causal):
    """For query rows ``rows`` (an array) and the first ``keys`` keys: how many each row sees
    (causal: key ≤ row + offset), counted for rows past Nq too (their threads still test)."""
    if not causal:
        return np.full(len(rows), keys, np.int64)
    return np.clip(np.minimum(rows + offset + 1, keys), 0, None)


def _flash_pad_reads(nq, nk, causal, cfg):
    """Mask reads of one head in ``flash_forward_kernel(…, PAD=True)``: for each Q tile, each
    of its Br rows, each key < Nk of the visited tiles that causality does not hide."""
    total = 0
    for q0, t in flash_tiles_visited(nq, nk, causal, cfg):
        rows = np.arange(q0, q0 + cfg.Br, dtype=np.int64)
        total += int(_visible_keys(rows, min(t * cfg.Bc, nk), nk - nq, causal).sum())
    return total


def attention_traffic(B, H, nq, nk, d, method="flash", causal=False, config=None,
                      return_lse=True, key_padding_mask=None):
    """The model of ``attention(…, method=method)``: name → Access."""
    if method == "flash":
        return flash_attention_traffic(B, H, nq, nk, d, causal, config, key_padding_mask)
    if method == "naive":
        if config is not None:
            raise ValueError("config: only method 'flash' takes a configuration")
        return naive_attention_traffic(B, H, nq, nk, d, causal, return_lse,
                                       key_padding_mask=key_padding_mask)
    raise ValueError(f"method: expected naive or flash; got {method!r}")


# ---------------------------------------------------------------------------------------------
# The model: backward (§30 flash, §31 naive), key padding and packed varlen (§35)
# ---------------------------------------------------------------------------------------------
def _add(out, name, reads=0, writes=0, elements=0, itemsize=4):
    a = out.setdefault(name, Access(0, 0, itemsize, elements))
    a.reads += reads
    a.writes += writes


def _flash_bwd_head(out, nq, nk, d, causal, cfg, pad):
    """One head (of Nq queries, Nk keys) of the flash backward: adds to ``out``'s counts.

    bwd_preprocess: O and dO once each, D written (a thread a row).
    dK/dV kernel, one block per K/V tile of Bc keys: Kj, Vj loaded once (rows < Nk), dKj, dVj
    written once; the Q tiles from ``first`` on (causal: the first query that sees key k0)
    stream Qi, dOi (rows < Nq) and a thread per row reads LSE and D; with a mask each of the
    TC threads of a key row reads that key's mask entry once per Q tile (keys < Nk).
    dQ kernel, one block per Q tile of dq_Br queries: Qi, dOi once; LSE and D read by each of
    the dq_TC threads of a row; the K/V tiles up to the diagonal (the forward's rule) stream
    Kj, Vj and their mask entries (a thread per key < Nk); dQi written once."""
    offset = nk - nq
    # bwd_preprocess
    _add(out, "o", nq * d)
    _add(out, "do", nq * d)
    _add(out, "dvec", 0, nq)
    # dK/dV
    n_q_tiles = _cdiv(nq, cfg.Br)
    for k0 in range(0, nk, cfg.Bc):
        keys = min(cfg.Bc, nk - k0)
        first = max(k0 - offset, 0) // cfg.Br if causal else 0
        visits = max(n_q_tiles - first, 0)
        rows = max(nq - first * cfg.Br, 0)
        _add(out, "k", keys * d)
        _add(out, "v", keys * d)
        _add(out, "q", rows * d)
        _add(out, "do", rows * d)
        _add(out, "lse", rows)
        _add(out, "dvec", rows)
        _add(out, "dk", 0, keys * d)
        _add(out, "dv", 0, keys * d)
        if pad:
            _add(out, "key_padding_mask", cfg.TC * keys * visits, itemsize=1)
    # dQ
    dq_cfg = FlashConfig(Br=cfg.dq_Br, Bc=cfg.dq_Bc, TR=cfg.dq_TR, TC=cfg.dq_TC)
    for q0, t in flash_tiles_visited(nq, nk, causal, dq_cfg):
        rows = min(cfg.dq_Br, nq - q0)
        keys = min(t * cfg.dq_Bc, nk)
        _add(out, "q", rows * d)
        _add(out, "do", rows * d)
        _add(out, "lse", cfg.dq_TC * rows)
        _add(out, "dvec", cfg.dq_TC * rows)
        _add(out, "k", keys * d)
        _add(out, "v", keys * d)
        _add(out, "dq", 0, rows * d)
        if pad:
            _add(out, "key_padding_mask", keys, itemsize=1)


def _sizes(out, sizes):
    for name, (elements, itemsize) in sizes.items():
        if name in out:
            out[name].elements, out[name].itemsize = elements, itemsize
    return out


def _bwd_sizes(bh, nq, nk, d, B):
    e_q, e_k = bh * nq * d, bh * nk * d
    return {"q": (e_q, 4), "do": (e_q, 4), "o": (e_q, 4), "dq": (e_q, 4), "k": (e_k, 4),
            "v": (e_k, 4), "dk": (e_k, 4), "dv": (e_k, 4), "lse": (bh * nq, 4),
            "dvec": (bh * nq, 4), "key_padding_mask": (B * nk, 1),
            "p": (bh * nq * nk, 4), "dp": (bh * nq * nk, 4)}


def flash_backward_traffic(B, H, nq, nk, d, causal=False, config=None, key_padding_mask=None):
    """§30: ``attention_backward(…, method="flash")``: D = rowsum(dO∘O), then the dK/dV and the
    dQ kernels (``_flash_bwd_head`` says who reads what). Nothing N × N: every array is
    [B·H, N, d] or [B·H, N]. config: a ``BwdConfig``, default ``default_config(d)`` as the
    launcher. Dropout adds no traffic (Z is regenerated by Philox, never stored). Returns
    name → Access for q, k, v, do, o, lse, dvec (D), dq, dk, dv (and key_padding_mask)."""
    from .configs import BwdConfig, bwd_default_config as bwd_config
    cfg = config or bwd_config(d)
    if not isinstance(cfg, BwdConfig):
        raise TypeError(f"config: expected a BwdConfig, got {type(cfg).__name__}")
    pad = key_padding_mask is not None
    if pad:
        _check_mask(key_padding_mask, B, nk)
    head = {}
    _flash_bwd_head(head, nq, nk, d, causal, cfg, pad)
    bh = B * H
    out = {n: Access(bh * a.reads, bh * a.writes, a.itemsize) for n, a in head.items()}
    return _sizes(out, _bwd_sizes(bh, nq, nk, d, B))


def naive_backward_traffic(B, H, nq, nk, d, causal=False, key_padding_mask=None,
                           dropout=False, tiles=None):
    """§31: ``attention_backward(…, method="naive")``: P and dP stored in HBM.

    D = rowsum(dO∘O) (bwd_preprocess); S = Q Kᵀ·scale → p (GEMM; causal: −inf written, every
    tile still computed); P = e^{S − LSE} in place (``naive_probs``: S, LSE and the mask read
    once per element); dP = dO Vᵀ → dp (GEMM); dS = P∘(dP∘Z − D) in dp's place (``naive_ds``:
    P, dP, D read once per element; with dropout P∘Z written back too); then three GEMMs
    dV = (P∘Z)ᵀ dO, dK = dSᵀ Q·scale, dQ = dS K·scale. Each GEMM reads A once per column block
    and B once per row block (``_gemm``). tiles: default the launcher's ``NAIVE_GEMM_TILES``."""
    from .configs import NAIVE_GEMM_TILES
    t = tiles or NAIVE_GEMM_TILES
    bh = B * H
    e = bh * nq * nk
    out = {}
    _add(out, "o", bh * nq * d)                                 # bwd_preprocess
    _add(out, "do", bh * nq * d)
    _add(out, "dvec", 0, bh * nq)
    a, b, c = _gemm(bh, nq, nk, d, t)                           # S = Q Kᵀ · scale → p
    _add(out, "q", a)
    _add(out, "k", b)
    _add(out, "p", 0, c)
    _add(out, "p", e, e)                                        # naive_probs: P = e^{S − LSE}
    _add(out, "lse", e)
    if key_padding_mask is not None:
        _check_mask(key_padding_mask, B, nk)
        _add(out, "key_padding_mask", e, itemsize=1)
    a, b, c = _gemm(bh, nq, nk, d, t)                           # dP = dO Vᵀ → dp
    _add(out, "do", a)
    _add(out, "v", b)
    _add(out, "dp", 0, c)
    _add(out, "p", e, e if dropout else 0)                      # naive_ds: dS = P∘(dP∘Z − D)
    _add(out, "dp", e, e)
    _add(out, "dvec", e)
    a, b, c = _gemm(bh, nk, d, nq, t)                           # dV = (P∘Z)ᵀ dO
    _add(out, "p", a)
    _add(out, "do", b)
    _add(out, "dv", 0, c)
    a, b, c = _gemm(bh, nk, d, nq, t)                           # dK = dSᵀ Q · scale
    _add(out, "dp", a)
    _add(out, "q", b)
    _add(out, "dk", 0, c)
    a, b, c = _gemm(bh, nq, d, nk, t)                           # dQ = dS K · scale
    _add(out, "dp", a)
    _add(out, "k", b)
    _add(out, "dq", 0, c)
    return _sizes(out, _bwd_sizes(bh, nq, nk, d, B))


def backward_traffic(B, H, nq, nk, d, method="flash", causal=False, config=None,
                     key_padding_mask=None):
    """The model of ``attention_backward(…, method=method)``: name → Access."""
    if method == "flash":
        return flash_backward_traffic(B, H, nq, nk, d, causal, config, key_padding_mask)
    if method == "naive":
        if config is not None:
            raise ValueError("config: only method 'flash' takes a configuration")
        return naive_backward_traffic(B, H, nq, nk, d, causal, key_padding_mask)
    raise ValueError(f"method: expected naive or flash; got {method!r}")


def varlen_traffic(seqlens_q, seqlens_k, H, d, causal=False, backward=False, config=None,
                   max_seqlen_q=None, max_seqlen_k=None):
    """§35 packed sequences: ``varlen_attention`` (forward) or ``varlen_attention_backward``.

    Sequence b is its own padded problem (B = 1, Nq = seqlens_q[b], Nk = seqlens_k[b]): no
    padding is loaded or computed. On top, every thread of every block — the grid is sized by
    the longest sequences, so also the blocks that find their tile past their sequence's end
    and return — reads cu_q[b], cu_q[b+1], cu_k[b], cu_k[b+1] (``attention_geometry``).
    """
    from .configs import bwd_default_config as bwd_config
    lq, lk = list(map(int, seqlens_q)), list(map(int, seqlens_k))
    if len(lq) != len(lk) or not lq or min(lq + lk) < 0:
        raise ValueError("seqlens_q, seqlens_k: expected as many lengths ≥ 0 each, at least one")
    batch = len(lq)
    max_q = max_seqlen_q or max(max(lq), 1)
    max_k = max_seqlen_k or max(max(lk), 1)
    tq, tk = sum(lq), sum(lk)
    out = {}
    if not backward:
        cfg = config or default_config(d, max_q, batch * H)
        for nq, nk in zip(lq, lk):
            if nq:
                for name, a in flash_attention_traffic(1, H, nq, nk, d, causal, cfg).items():
                    _add(out, name, a.reads, a.writes)
        blocks = [(_cdiv(max_q, cfg.Br) * batch * H, cfg.threads)] if tq else []
        sizes = {"q": (tq * H * d, 4), "o": (tq * H * d, 4), "lse": (tq * H, 4),
                 "k": (tk * H * d, 4), "v": (tk * H * d, 4)}
    else:
        cfg = config or bwd_config(d)
        head = {}
        for nq, nk in zip(lq, lk):
            _flash_bwd_head(head, nq, nk, d, causal, cfg, False)
        for name, a in head.items():
            _add(out, name, H * a.reads, H * a.writes)
        t1, t2 = cfg.threads
        blocks = [(_cdiv(max_k, cfg.Bc) * batch * H, t1), (_cdiv(max_q, cfg.dq_Br) * batch * H,
                                                          t2)]
        sizes = {n: (tq * H * d, 4) for n in ("q", "do", "o", "dq")}
        sizes.update({n: (tk * H * d, 4) for n in ("k", "v", "dk", "dv")})
        sizes.update({"lse": (tq * H, 4), "dvec": (tq * H, 4)})
    for n_blocks, threads in blocks:
        _add(out, "cu_seqlens_q", 2 * n_blocks * threads)
        _add(out, "cu_seqlens_k", 2 * n_blocks * threads)
    sizes.update({"cu_seqlens_q": (batch + 1, 4), "cu_seqlens_k": (batch + 1, 4)})
    return _sizes({n: a for n, a in out.items() if a.reads or a.writes}, sizes)


# ---------------------------------------------------------------------------------------------
# §46: what DRAM should see — each array a kernel touches, once per kernel
# ---------------------------------------------------------------------------------------------
# The model above counts element accesses by threads: what the kernels ask of the memory
# system. DRAM sees less whenever a re-read hits L1 or L2 — a softmax row re-read by
# block_reread (16 KB), a K/V tile re-read by every Q tile of a head while the head's blocks
# run together, a GEMM operand re-read per tile. The *compulsory* traffic assumes every re-read
# inside a kernel hits and nothing survives between kernels (arrays ≫ the 50 MB L2 of an H200):
# each array a kernel reads is read once, each it writes is written once. Nsight Compute's DRAM
# bytes at sizes ≫ L2 are compared with it (scripts/profile_io.py). Kernels in launch order:
# (kernel name prefix, arrays read, arrays written).
KERNEL_ARRAYS = {
    ("softmax", "three_pass"): (("row_max", "x", "m"), ("row_sum_exp", "x m", "l"),
                                ("normalize", "x m l", "y")),
    ("softmax", "*"): (("softmax", "x", "y"),),
    ("attention", "naive"): (("matmul", "q k", "s"), ("softmax", "s", "p"),
                             ("matmul", "p v", "o"), ("row_lse", "s", "lse")),
    ("attention", "flash"): (("flash_forward", "q k v", "o lse"),),
    ("backward", "flash"): (("bwd_preprocess", "o do", "dvec"),
                            ("flash_bwd_dkdv", "q k v do lse dvec", "dk dv"),
                            ("flash_bwd_dq", "q k v do lse dvec", "dq")),
    ("backward", "naive"): (("bwd_preprocess", "o do", "dvec"), ("matmul", "q k", "p"),
                            ("naive_probs", "p lse", "p"), ("matmul", "do v", "dp"),
                            ("naive_ds", "p dp dvec", "dp"), ("matmul", "p do", "dv"),
                            ("matmul", "dp q", "dk"), ("matmul", "dp k", "dq")),
}


def compulsory_traffic(kind, method, model):
    """[(kernel name prefix, read bytes, write bytes)] in launch order for ``kind`` ("softmax",
    "attention", "backward") and ``method``, with array sizes from ``model`` (name → Access,
    e.g. ``softmax_traffic``): each array a kernel touches, once (see ``KERNEL_ARRAYS``)."""
    key = (kind, method) if (kind, method) in KERNEL_ARRAYS else (kind, "*")
    if key not in KERNEL_ARRAYS:
        raise ValueError(f"no kernel list for {kind} {method!r}")

    def size(names):
        return sum(model[n].elements * model[n].itemsize for n in names.split() if n in model)
    return [(k, size(r), size(w)) for k, r, w in KERNEL_ARRAYS[key]]


# ---------------------------------------------------------------------------------------------
# §48 the ASIC view: HBM traffic as a function of the on-chip SRAM size M
# ---------------------------------------------------------------------------------------------
# The FlashAttention paper (Dao et al. 2022, Algorithm 1, Theorem 2) sizes its tiles from the
# SRAM: Bc = ⌈M / 4d⌉ keys, Br = min(Bc, d) queries (M in elements), so that K_j, V_j, Q_i,
# O_i and S_ij fit; the loop over K/V tiles is outside, so Q_i, O_i, ℓ_i, m_i go back and forth
# to HBM once per K/V tile: Θ(N²d²/M) accesses, against Θ(Nd + N²) for standard attention,
# whatever M. This project's kernel (like FlashAttention-2) puts the Q tile outside: then K and
# V are re-read once per Q tile, and the resident tile is the one to make large. The sweep
# below gives both orders the paper's rule for their outer tile (outer = ⌈M / 4d⌉, inner =
# min(outer, d)) and counts elements moved, for one head, N = Nq = Nk, not causal.
def sram_tiles(m_elements, d, n=None):
    """The paper's tiles for M elements of SRAM: (outer, inner) = (⌈M/4d⌉, min(⌈M/4d⌉, d)),
    the outer one no longer than the sequence (N) when given."""
    outer = max(_cdiv(int(m_elements), 4 * d), 1)
    if n is not None:
        outer = min(outer, n)
    return outer, min(outer, d)


def sram_model(n, d, m_elements):
    """HBM element traffic of one head (N queries and keys, head dim d) with M elements of
    SRAM: a dict with the tiles and the counts of

    - ``fa1``: the paper's Algorithm 1 (K/V tiles outside, Bc = ⌈M/4d⌉, Tc = ⌈N/Bc⌉): K, V
      read once; O, ℓ, m initialised in HBM; per K/V tile every Q_i, O_i, ℓ_i, m_i read and
      O_i, ℓ_i, m_i written: 3Nd + 2N + Tc·(3Nd + 4N);
    - ``fa2``: this project's order (Q tile outside, Br = ⌈M/4d⌉): Q read once, K and V once
      per Q tile, O and the LSE written once: 2Nd + 2Nd·Tr + N;
    - ``naive``: standard attention (the paper's Algorithm 0): Q, K read, S written, S read,
      P written, P and V read, O written: 4N² + 4Nd, independent of M;
    - the paper's bounds N²d²/M (flash) and Nd + N² (standard), for the ratios.
    """
    if min(n, d, m_elements) < 1:
        raise ValueError(f"n, d, M: expected positive sizes, got {n}, {d}, {m_elements}")
    bc1, br1 = sram_tiles(m_elements, d, n)
    tc = _cdiv(n, bc1)                                        # outer iterations of Algorithm 1
    fa1 = (2 * n * d                                          # K_j, V_j: once
           + n * d + 2 * n                                    # O = 0, ℓ = 0, m = −∞ into HBM
           + tc * (2 * n * d + 2 * n)                         # per K/V tile: Q_i, O_i, ℓ_i, m_i
           + tc * (n * d + 2 * n))                            # … and O_i, ℓ_i, m_i written
    br2, bc2 = sram_tiles(m_elements, d, n)
    tr = _cdiv(n, br2)                                        # Q tiles of this kernel's order
    fa2 = n * d + 2 * n * d * tr + n * d + n                  # Q; K, V per Q tile; O; LSE
    naive = 4 * n * n + 4 * n * d
    return {"M": int(m_elements), "fa1_Bc": bc1, "fa1_Br": br1, "fa1": fa1,
            "fa2_Br": br2, "fa2_Bc": bc2, "fa2": fa2, "naive": naive,
            "flash_bound": n * n * d * d / m_elements, "naive_bound": n * d + n * n,
            "floor": 4 * n * d}


DEFAULT_SRAM_KIB = tuple(2.0 ** e for e in range(0, 15))      # 1 KiB … 16 MiB


def sram_sweep(n, d, sram_kib=DEFAULT_SRAM_KIB, itemsize=4):
    """``sram_model`` over SRAM sizes given in KiB (bytes, turned into elements of
    ``itemsize`` bytes); adds the bytes (elements × itemsize) and the model/bound ratios."""
    rows = []
    for kib in sram_kib:
        m = int(kib * 1024) // itemsize
        r = sram_model(n, d, m)
        r["KiB"] = kib
        for key in ("fa1", "fa2", "naive", "floor"):
            r[f"{key} bytes"] = r[key] * itemsize
        r["fa1 / bound"] = r["fa1"] / r["flash_bound"]
        r["fa2 / bound"] = r["fa2"] / r["flash_bound"]
        r["naive / bound"] = r["naive"] / r["naive_bound"]
        rows.append(r)
    return rows


def kernel_sram_point(n, d, config=None):
    """Where this project's kernel sits on the sweep: (shared memory bytes of its tiles,
    its model bytes for one head of N × N × d) with the H200 default tiles for d (or
    ``config``). Its acc and S live in registers, on-chip memory the shared-memory figure
    leaves out."""
    from .configs import GPU_CONFIGS
    cfg = config or next(c for limit, c in GPU_CONFIGS if d <= limit)
    return cfg, cfg.smem_bytes(d), total_bytes(flash_attention_traffic(1, 1, n, n, d, False,
                                                                       cfg))


SRAM_HEADERS = ["SRAM KiB", "M (elements)", "FA1 Bc, Br", "FA1 MB", "FA1 / (N²d²/M)",
                "FA2 Br, Bc", "FA2 MB", "FA2 / (N²d²/M)", "naive MB", "naive / (Nd+N²)",
                "naive / FA2"]


def sram_table_rows(rows):
    mb = 1e6
    return [[f"{r['KiB']:g}", f"{r['M']:,}", f"{r['fa1_Bc']}, {r['fa1_Br']}",
             f"{r['fa1 bytes'] / mb:,.1f}", f"{r['fa1 / bound']:.2f}",
             f"{r['fa2_Br']}, {r['fa2_Bc']}", f"{r['fa2 bytes'] / mb:,.1f}",
             f"{r['fa2 / bound']:.2f}", f"{r['naive bytes'] / mb:,.1f}",
             f"{r['naive / bound']:.2f}", f"{r['naive'] / r['fa2']:.2f}"] for r in rows]


def sram_command(args):
    """``flashlesson traffic sram --shape N D [--sram KIB …] [--dtype] [--plot FILE]``."""
    from tabulate import tabulate
    if len(args.shape) != 2 or min(args.shape) < 1:
        print(f"--shape: expected 2 positive integers (N D); got {args.shape}", file=sys.stderr)
        return 2
    n, d = args.shape
    kib = args.sram or DEFAULT_SRAM_KIB
    if min(kib) <= 0:
        print(f"--sram: expected sizes in KiB > 0; got {kib}", file=sys.stderr)
        return 2
    itemsize = np.dtype(args.dtype).itemsize
    rows = sram_sweep(n, d, kib, itemsize)
    print(f"§48: HBM traffic of one head, N = {n}, d = {d}, {np.dtype(args.dtype).name} "
          f"({itemsize} B an element), against on-chip SRAM size (M in elements); the paper's "
          "tiles (outer = ⌈M/4d⌉, inner = min(outer, d)); FA1 = the paper's Algorithm 1 "
          "(K/V outside), FA2 = this project's order (Q outside); bounds Θ(N²d²/M), Θ(Nd + N²)")
    print(tabulate(sram_table_rows(rows), headers=SRAM_HEADERS, disable_numparse=True,
                   colalign=["right"] * len(SRAM_HEADERS)))
    floor = rows[0]["floor bytes"]
    print(f"floor: Q, K, V read once and O written once = 4·N·d elements = {floor / 1e6:.4g} MB "
          f"(FA2 adds the LSE); naive stays at {rows[0]['naive bytes'] / 1e6:.4g} MB for every "
          "M.")
    if d <= 256:
        cfg, smem, kbytes = kernel_sram_point(n, d)
        fa2 = sram_model(n, d, smem // 4)["fa2"] * 4
        print(f"this project's kernel, H200 tiles Br={cfg.Br} Bc={cfg.Bc} (fp32): "
              f"{smem / 1024:.0f} KiB of shared memory per block, {kbytes / 1e6:.4g} MB by its "
              f"model, vs {fa2 / 1e6:.4g} MB for the paper's rule at that M (its acc and S sit "
              "in registers, which the shared-memory size leaves out). H200: 228 KiB of shared "
              "memory per SM, 227 KiB per block.")
    if args.plot:
        from .plots import plot_sram
        if plot_sram(rows, args.plot, n=n, d=d, itemsize=itemsize):
            print(f"wrote {args.plot}")
        else:
            return 1
    return 0
