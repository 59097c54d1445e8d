"""One error model for every kernel-vs-oracle comparison: how far a kernel may be from the
float64 oracle, derived from the sizes and magnitudes of the inputs and the arithmetic used.

Every check of a kernel against ``reference/`` (the tests' ``check_attention`` / ``check_grads``,
the examples' ``flashlesson.tour.check_close``) takes its bar from here; nothing else holds a
hard-coded tolerance for a kernel.

Notation. u is the unit roundoff of the arithmetic (half the spacing of the numbers at 1):
float32 2⁻²⁴ ≈ 6.0e-8, TF32 and float16 2⁻¹¹ ≈ 4.9e-4, bfloat16 2⁻⁸ ≈ 3.9e-3. n is a
summation length. Rounding errors are modelled as the probabilistic analysis does (Higham &
Mary, SIAM J. Sci. Comput. 2019): the error of a sum of n terms is a sum of n independent
errors, each at most u times a partial sum, so it grows as λ·u·√n (λ = ``LAMBDA`` = 4: a
bound that holds with probability 1 − 2·e^{−λ²/2}·… per sum, Hoeffding), not as the worst
case n·u. Magnitudes are measured on the inputs (row norms, max |v|), never on a seed's luck.

**Softmax** of a row of n entries, float32 (``softmax_tol(n, dtype)``): p_j = e^{x_j − m}/l.
 - x_j − m: exact when within 2× (Sterbenz), else one rounding: relative u·|x_j − m|.
 - e^x with ``__expf`` (= ex2.approx(x·log₂e)): at most (2 + 1.17·|x|) ulp (CUDA's table);
   the |x| part is absolute in p: p·u·|x| ≤ u·max_t t·e^{−t} = u/e, whatever the row holds.
 - l = Σ e^{x−m} (positive terms): relative λ·u·√n; the division: u.
 So |p̂ − p| ≤ rtol·p + atol with rtol = S·u·(4 + λ√n), atol = S·u, S = ``SAFETY``.
 float16 output: rounded once at the end: + u₁₆ relative, and ½ the subnormal step absolute.

**Attention forward**, per query row i (``attention_tol(q, k, v, …)``), absolute bound on
|O_ic − O_ref,ic| (O is a convex combination of V's rows, so max|v| = V is its scale):
 - A_i = scale·‖q_i‖·max_j ‖k_j‖ bounds every |s_ij| and (Cauchy–Schwarz) every partial sum
   of the dot product. Each of its d roundings is an independent error of at most u times a
   partial sum S_t (std ≤ u|S_t|/√3); for inputs whose terms have no common sign the partial
   sums are a random walk, Σ_t S_t² ≈ A_i²/2 (a coherent-sign input, like all-positive q and
   k, could grow it by √d and is not what the tests use); the scale (or scale·log₂e) and the
   subtraction of m add one rounding of at most u·A_i each. Their std is ≤ u·A_i·√(1/6 + 2/3)
   = ``SCORE_STD``·u·A_i: e_s = λ·SCORE_STD·u·A_i.
 - e_P = e_s + u·(2 + 1.2·ln Nk): only s_ij's own error counts — an error of m multiplies
   every e^{s−m} of the row (and every tile's correction) by one factor that l divides out;
   e^x adds u·(2 + 1.17·|x|), the P-weighted |x| at most ln Nk (≤ the entropy of P).
 - O = Σ_j P_ij v_j / l_i: relative errors ε_j of P_ij move O_ic by Σ_j P_ij ε_j (v_jc − O_ic),
   at most e_P·Σ_j P_ij |v_jc − O_ic| ≤ e_P·√(Σ_j P_ij v_jc²) ≤ e_P·V (a mean absolute
   deviation is at most the root mean square). The sums l and acc over Nk keys (positive
   terms, |acc| ≤ V·l, rescaled once a tile): the partial sums grow to the total, the error
   std ≤ u·√(n/9)·total = ``POSITIVE_SUM``·u·√n·total; the 1/l and the product: 2u.
   o_i = S·V·(e_P + 2λ·POSITIVE_SUM·u·√(2·Nk) + 2u).
 - LSE_i = m_i + ln l_i (m's error cancels against l's, as above): e_P + λ·POSITIVE_SUM·u·√Nk
   (l) + u·(A_i + ln Nk + 2) (the log, the sum): lse_i = S·(that).
 - fp16/bf16 (tensor cores, dtype "float16"/"bfloat16"): the oracle gets the rounded inputs,
   so only the kernel's own roundings count: P rounded to 16 bits for P·V (l keeps the fp32
   P): |ΔO_ic| ≤ u_h·(P|V|)_ic ≤ u_h·V, and O rounded on the way out: u_h·|O_ic|. With the
   oracle's P (``p=``) both are taken elementwise (tight: a 16-bit packing bug at 2× the
   normal error fails), else per row with V. QKᵀ on the tensor cores accumulates in fp32:
   the float32 terms above. Dropout (``dropout_p``): V's scale is max|v|/(1 − p).
 - 3xTF32 (dtype "tf32"; ``TF32X3_*``): the float32 model (the CUDA-core steps, and the
   float32 additions between k8 steps) plus what the tensor core adds to each product over d
   (S = Q Kᵀ) and over the keys (P V). Each operand x = big + small, big = tf32(x) and
   small = tf32(x − big) (``cvt.rna``, 11-bit significands): x − big − small = r with
   |r| ≤ 2⁻¹¹·|x − big| ≤ 2⁻²²·|x|. A product a·b is formed as big·big + big·small +
   small·big = a·b − r_a·b − a·r_b − small_a·small_b: relative error ≤ 3·2⁻²² = 12u, std
   ≤ 2⁻²²·√(1/3 + 1/3 + 1/9) = ``TF32X3_SPLIT_STD``·u (3.53u; each part uniform). The three
   mmas of one k8 step sum from zero on the tensor core, which (Hopper, Khattak & Mikaitis
   2025; kernels_numba/sim/mma.tf32_block_fma) cuts its 9 addends to the grid 2^(E − 25) of
   the largest (≤ u/2 of it each) and rounds the sum toward zero (< 2u of it): ≤
   ``TF32X3_BLOCK``·u = 6.5u of the step's Σ|a_j·b_j|, of one sign for terms of one sign; the
   step sums are then added in float32 (N/8 roundings, fewer than the float32 kernels' N).
   For a score, Σ_c|q_c·k_c|·scale and √(Σ_c (q_c·k_c)²)·scale are both ≤ A_i
   (Cauchy–Schwarz), for O both ≤ (P|V|)_ic ≤ V: e_s and o each gain (TF32X3_BLOCK +
   λ·TF32X3_SPLIT_STD)·u·(A_i or V). (Adding a k8 step's three mmas straight into a running
   accumulator rounds toward zero 3·N/8 times: an error
   that grows as N, outside this model — tests/test_tf32x3_accuracy.py.)

**Attention backward** (``backward_tol(q, k, …)``), relative to each gradient's largest |value|
(as ``tests/conftest.check_grads`` measures): P is recomputed from the saved LSE — here the
error of LSE does not cancel: e_s of S plus e_s of the LSE, 2·λ·SCORE_STD·u·A; e^x: u·(2 +
1.2·ln Nk). dP = dO·Vᵀ, D = rowsum(dO∘O) (length d, twice), dV = Pᵀ·dO, dK = dSᵀ·Q, dQ = dS·K
(lengths Nq, Nq, Nk): sums of random-sign terms, whose partial sums are random walks: error
std ≈ u·√(n/6)·|sum| = ``RANDOM_SUM``·u·√n·|sum|, λ of them; a gradient's largest value
comes from rows where dS = P∘(dP − D) does not cancel, so these relative errors carry over.
 rel = S·u·(2·λ·SCORE_STD·A + 2 + 1.2·ln Nk + λ·RANDOM_SUM·(√Nq + √Nk + 2√d)), A = max A_i.
 fp16/bf16: P and dS rounded to 16 bits before their four products, O (hence D) rounded
 too: + ``HALF_BWD``·u_h (8: two roundings per product path, ×2 for dP − D's cancellation;
 the emulation sees ≤ 2·u_h). O's rounding moves D_i by ~u_h·‖dO_i∘O_i‖₂, an error that
 does not shrink with the gradient: where dS = P∘(dP − D) cancels (a key that takes most
 of a row's weight, with d = 1 a dK that is a few products) it can pass the relative bound,
 so the checks add ``rounded_o_tol`` to it element by element (each ΔD_i independent,
 λ·u_h/√3 of that norm, carried through P into dQ and dK: its docstring). At random inputs
 (the tests' shapes and 1024² d = 64, 200) it adds 3–62 % to the bound, most where causal
 rows see few keys; where it was missing a test failed (CI, 2026-12-02: fp16 d = 1, 9×13
 causal, dk off by 6.0e-3 of its largest value, 1.5× the relative bound; 0.1 of the two).
 3xTF32: S (and the forward's LSE) as in the forward, 2·(TF32X3_BLOCK + λ·TF32X3_SPLIT_STD)·A,
 O (hence D) once more (TF32X3_BLOCK + λ·TF32X3_SPLIT_STD); dP, dV, dK, dQ, random-sign
 products of n terms t_j: the split's errors (std TF32X3_SPLIT_STD·u·‖t‖₂) and the k8 steps'
 (each ≤ TF32X3_BLOCK·u·Σ_step|t|, std ÷ √3, ≤ TF32X3_BLOCK·u·√(8/3)·‖t‖₂ over the steps),
 with ‖t‖₂ ≈ |sum| for the sums behind a gradient's largest value (as above): + 4·λ·
 (TF32X3_SPLIT_STD + TF32X3_BLOCK·√(8/3))·u.

**Sums, merges, linear attention** (float32; each function's docstring has the details):
 - ``sum_tol``: a sum of n terms in any order (the §6/§10 warp and block sums): n − 1
   roundings, each ≤ u·Σ|x|: S·λ·u·√n·Σ|x|. A max is exact (compared with ==).
 - ``tf32x3_dot_tol``: one 3xTF32 dot product from its exact terms t: S·u·(λ·TF32X3_SPLIT_STD
   ·‖t‖₂ + TF32X3_BLOCK·Σ|t| + λ·√(Σ_b C_b²/3)), C_b the partial sums after each k8 step.
 - ``merge_l_tol``: §19's l = Σ_p e^{m_p − m}·l_p through a tree of pairwise merges of depth
   D: a state's shifts along its path add up to m − m_p, so its term is off by ≤ u·(1 + 4D
   + 2.2·(m − m_p)) relative (subtraction, __expf, product, sum per level); deterministic.
 - ``merge_tol``: §22's merge of P (o_p, lse_p): x_p = lse_p − M is rounded absolutely, so
   e^{x_p} carries u·(2 + 2.2|x_p|) relative and lse an absolute error of ulps of |M| — the
   cancellation of an lse near 0 — plus the log and the final sum; o: each w_p·o_p's
   relative error and the P − 1 sums. Deterministic (P is small), times S.
 - ``linear_attention_tol`` (§45, O(N·d²)): O_i = Σ_j w_ij v_j / Σ_j w_ij with positive
   weights w_ij = φ(q_i)·φ(k_j); φ's roundings (x + 1, or __expf: e_φ = u·(2 + 1.2·X), X the
   largest −x) move O by ≤ 2e_φ·(W + |O|), W = Σ_j w_ij|v_jc|/Σ_j w_ij; the state sums over
   the n_i keys a query sees are random walks (random-sign v): λ·RANDOM_SUM·u·√(2n_i + 2)·R,
   R = √(Σ_j (φ(q_i)²·φ(k_j)²)·v_jc²)/Σ_j w_ij; the normalizer's positive sums:
   λ·POSITIVE_SUM·u·√(2n_i)·|O|; the dot products over d (terms of one sign):
   λ·POSITIVE_SUM·u·√(2d + 2)·(W + |O|); the division u·|O|; all times S. Elementwise.

**Safety factor** S = ``SAFETY`` = 2 over the probabilistic (float32) part of the model; the
16-bit roundings of the forward are exact bounds of round-to-nearest and are taken as they
are. Observed (``python3 scripts/tolerance_check.py --seeds 200 --big``: a float32 NumPy
emulation of the tiled kernels — products and sums rounded one by one, no FMA, ex2.approx's
error drawn at random, P and O (forward), P and dS (backward) rounded to 16 bits for fp16/bf16;
the backward from the emulated forward's O and LSE — at the tests' and the tour's shapes and at
GPU shapes: §42's B=1 H=4 Nq=500 Nk=2000 d=128 causal, Q's row 0 × 4 or × 30; the backward at
the tests' GPU shapes 100², 257×130 d=80, 77×300 d=96, 200×65 d=256, 1000² d=64 causal, and
9×13 d=1 causal (2026-12-02, with and without --big: float32 up to 0.18 at d=3, 0.30 at d=1;
the 16-bit ones with rounded_o_tol added); linear attention, the kernels' float32 steps one
rounding at a time — φ, the state summed key by key in two splits (causal: a prefix, each query
answered after its last key), φ(q)·state row by row — at the tests' shapes and 1000² d=64,
4097² d=3, 1500² d=128; merge_attention of 2, 3, 8 parts), the largest max-error / bound over
all seeds:

    ==========================================  =========  =========  =========
    case                                         float32     fp16       bf16
    ==========================================  =========  =========  =========
    softmax, n = 7 … 4096, rows near 1000        ≤ 0.64     ≤ 0.91     —
    attention O, tests' shapes                   0.04–0.12  ≤ 0.74     ≤ 0.71
    attention O, §42's GPU shape                 ≤ 0.11     ≤ 0.40     ≤ 0.47
    attention LSE (all shapes)                   0.10–0.24  (float32 model)
    backward dq, dk, dv (random inputs)          0.02–0.18  ≤ 0.26     ≤ 0.24
    backward, d = 1, 9×13 causal (+ rounded_o)   ≤ 0.30     ≤ 0.24     ≤ 0.28
    backward, one q and one k row × 5 or × 30    ≤ 0.02     —          —
    linear attention, tests' shapes, causal      0.05–0.08  —          —
    linear attention, N = 300 … 4097, full       0.010–0.02 —          —
    merge_attention o, lse (P = 2, 3, 8)         0.11–0.37  —          —
    ==========================================  =========  =========  =========

So the float32 bounds sit 4–25× above the emulated error (the GPU's FMA contraction, __expf
and other summation orders differ from the emulation: hence no tighter), ~1e-5–1e-4·V for
the tests' shapes, still orders of magnitude below what a wrong index, a lost tile or a
missed rescale gives (errors of order |V|: a last K/V tile left unrescaled fails at 10⁴× the
bound, a causal mask off by one at 10⁵×); the softmax's float32 rtol keeps the worst-case
λ·√n (a row with one dominant entry: thousands of tiny terms added to ~1 round one way, not
at random — the emulation reaches 0.64 at n = 4096 with a sequential sum; the kernels' tree
sums do better). Linear attention's bound sits 12–100× above the emulated error (the
deterministic φ and dot-product terms, scaled by W ≈ the mean |v| while O, an average of N
values of v, shrinks as 1/√N); one key left out gives 500× the bound at N = 4097, d = 3,
960× at 1000², d = 64. The 16-bit bounds are within 1.4–4× of what is seen (the roundings are the
error), so a 16-bit packing bug that doubles the error fails. The simulator computes in
float64 between stores, so its errors are smaller still.

3xTF32 (the simulator, whose tf32 mma adds as Hopper's tensor core, at the tests' shapes of
tests/test_attention_tc*.py, q row 0 × 4): O 0.008–0.011 of its bound, LSE 0.015–0.035, the
gradients 0.002–0.014 — worst cases (the k8 step's 6.5u, Cauchy–Schwarz for A_i) leave the
attention bounds far above the error; the sharp checks are ``tf32x3_dot_tol`` on one product
(within 0.15 of it; the unstaged accumulation 1.6–1.7×) and the GPU's comparison with torch
(tests/test_tf32x3_accuracy.py).
"""

import math
from dataclasses import dataclass

import numpy as np

LAMBDA = 4.0        # probabilistic rounding: errors of a length-n sum ≤ λ·u·√n
SAFETY = 2.0        # over the model; the observed ratios (module docstring) are ≤ 0.5
SCORE_STD = (5 / 6) ** 0.5      # std of a score's rounding error / (u·A_i) (module docstring)
POSITIVE_SUM = 1 / 3            # std of a positive n-term sum's error / (u·√n·sum)
RANDOM_SUM = 6 ** -0.5          # std of a random-sign n-term sum's error / (u·√n·|sum|)

HALF_BWD = 8.0      # fp16/bf16 backward: P and dS rounded before 4 products (docstring)
# 3xTF32, in units of float32's u (module docstring): std of one product's split error
# (2⁻²²·√(1/3 + 1/3 + 1/9)), and the tensor core's sum of one k8 step, ≤ 9·u/2 + 2u of Σ|terms|
TF32X3_SPLIT_STD = 4 * (1 / 3 + 1 / 3 + 1 / 9) ** 0.5
TF32X3_BLOCK = 6.5

UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "tf32": 2.0 ** -11, "tf32x3": 2.0 ** -22,
                 "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float64": 2.0 ** -53}
HALF = ("float16", "bfloat16")


def dtype_name(dtype):
    """'float32', 'float16', 'bfloat16', 'tf32' (3xTF32), 'float64' from a NumPy dtype, a
    type, or one of those names ('f16', 'bf16', 'tf32' accepted)."""
    aliases = {"f16": "float16", "fp16": "float16", "half": "float16", "bf16": "bfloat16",
               "fp32": "float32", "f32": "float32", "tf32": "tf32x3", "3xtf32": "tf32x3"}
    if isinstance(dtype, str):
        name = aliases.get(dtype.lower(), dtype.lower())
    elif getattr(dtype, "__name__", "") == "BFloat16":
        name = "bfloat16"
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            raise TypeError(f"dtype: expected a NumPy dtype or one of "
                            f"{sorted(UNIT_ROUNDOFF)}; got {dtype!r}") from None
    if name not in UNIT_ROUNDOFF:
        raise ValueError(f"dtype: expected one of {sorted(UNIT_ROUNDOFF)}; got {dtype!r}")
    return name


def unit_roundoff(dtype):
    """u of the arithmetic: 2⁻²⁴ float32, 2⁻¹¹ float16, 2⁻⁸ bfloat16, 2⁻²² 3xTF32."""
    return UNIT_ROUNDOFF[dtype_name(dtype)]


def _count(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}: expected a positive int; got {value!r}")
    return int(value)


def softmax_tol(n, dtype=np.float32):
    """(rtol, atol) for |softmax kernel − float64 oracle| ≤ atol + rtol·|oracle|, rows of n.

    float32: rtol = S·u·(4 + λ√n), atol = S·u (the __expf |x| term, see the module).
    float16 (computed in float32, rounded once on output): + u₁₆ relative and 2⁻²⁵ absolute
    (half the spacing of float16's subnormals).
    """
    n = _count(n, "n")
    name = dtype_name(dtype)
    u = UNIT_ROUNDOFF["float32"]
    rtol, atol = SAFETY * u * (4 + LAMBDA * math.sqrt(n)), SAFETY * u
    if name in HALF:
        rtol += UNIT_ROUNDOFF[name]
        atol += 2.0 ** -25 if name == "float16" else 0.0
    elif name != "float32":
        raise ValueError(f"dtype: softmax runs in float32 or float16; got {dtype!r}")
    return rtol, atol


@dataclass(frozen=True)
class AttentionTol:
    """Bounds on |kernel − oracle|: ``o`` broadcastable to O ([…, Nq, 1] per row, or per
    element when the oracle's P was given), ``lse`` broadcastable to LSE ([…, Nq])."""
    o: np.ndarray
    lse: np.ndarray

    def __repr__(self):
        return (f"AttentionTol(o ≤ {float(np.max(self.o)):.2e}, "
                f"lse ≤ {float(np.max(self.lse)):.2e})")


def score_bound(q, k, scale=None):
    """A_i = scale·‖q_i‖·max_j ‖k_j‖ (≥ every |s_ij|), one per query row: shape q.shape[:-1]."""
    q = np.asarray(q, np.float64)
    k = np.asarray(k, np.float64)
    d = q.shape[-1]
    scale = d ** -0.5 if scale is None else float(scale)
    kmax = np.max(np.linalg.norm(k, axis=-1), axis=-1, initial=0.0)          # per (b, h)
    return abs(scale) * np.linalg.norm(q, axis=-1) * np.asarray(kmax)[..., None]


def tf32x3_term():
    """(TF32X3_BLOCK + λ·TF32X3_SPLIT_STD): what one 3xTF32 product adds, in u of its scale
    (A_i for a score, V for O; module docstring)."""
    return TF32X3_BLOCK + LAMBDA * TF32X3_SPLIT_STD


def forward_terms(a, nk, dtype="float32"):
    """(e_s, e_P, o/V, lse) of the float32 part of the model, for score bound(s) ``a`` and Nk
    keys, before the safety factor (see the module docstring); dtype "tf32": with the 3xTF32
    terms of the scores and of P V."""
    nk = _count(nk, "nk")
    tf32x3 = dtype_name(dtype) == "tf32x3"
    u = UNIT_ROUNDOFF["float32"]
    a = np.asarray(a, np.float64)
    e_s = LAMBDA * SCORE_STD * u * a + (tf32x3_term() * u * a if tf32x3 else 0.0)
    e_p = e_s + u * (2 + 1.2 * math.log(nk))
    o = e_p + 2 * LAMBDA * POSITIVE_SUM * u * math.sqrt(2 * nk) + 2 * u + \
        (tf32x3_term() * u if tf32x3 else 0.0)
    lse = e_p + LAMBDA * POSITIVE_SUM * u * math.sqrt(nk) + u * (a + math.log(nk) + 2)
    return e_s, e_p, o, lse


def attention_tol(q, k, v, *, scale=None, dtype=None, p=None, o=None, dropout_p=0.0):
    """The bound on |O − O_ref| and |LSE − LSE_ref| for these inputs (module docstring).

    q [..., Nq, d], k, v [..., Nk, d] as the oracle got them (float64 of the rounded fp16/bf16
    inputs for the tensor-core kernels). dtype: the kernel's arithmetic — "float32" (default
    for float32 inputs), "float16", "bfloat16" (tensor cores), "tf32" (3xTF32).
    p, o: the oracle's P [..., Nq, Nk] and O, to take the 16-bit roundings elementwise.
    dropout_p: O sums P_ij·M_ij/(1 − p)·v_j: V's scale is max|v|/(1 − p).
    """
    q = np.asarray(q)
    name = dtype_name(dtype if dtype is not None else
                      (q.dtype if q.dtype != np.float64 else "float32"))
    nk = max(np.shape(k)[-2], 1)
    vabs = np.abs(np.asarray(v, np.float64))
    if not 0.0 <= float(dropout_p) < 1.0:
        raise ValueError(f"dropout_p: expected 0 <= p < 1; got {dropout_p!r}")
    vabs = vabs / (1.0 - float(dropout_p))
    vmax = np.max(vabs, axis=(-2, -1), initial=0.0)[..., None, None]      # per (b, h)
    a = score_bound(q, k, scale)
    _, _, o32, lse32 = forward_terms(a, nk, name)
    # the scale of O: (P|V|)_ic elementwise with the oracle's P (|O_ic| ≤ (P|V|)_ic ≤ V), else V
    pv = None if p is None else np.asarray(p, np.float64) @ vabs
    o_tol = SAFETY * o32[..., None] * (vmax if pv is None else pv)
    if name in HALF:
        uh = UNIT_ROUNDOFF[name]        # exact bounds of one rounding each: no safety factor
        if pv is not None and o is not None:
            o_tol = o_tol + uh * (pv + np.abs(np.asarray(o, np.float64)))
        else:
            o_tol = o_tol + 2 * uh * vmax
    return AttentionTol(o_tol, SAFETY * lse32)


def backward_tol(q, k, v=None, do=None, *, scale=None, dtype="float32"):
    """Relative bound for dq, dk, dv, each against its largest |value| (as
    ``tests/conftest.check_grads`` measures; module docstring). q [..., Nq, d], k [..., Nk, d]
    as the oracle got them (v and dO: accepted for the signature's symmetry; the bound is
    relative, so their scale drops out). dtype: "float32", "float16", "bfloat16", "tf32"."""
    q = np.asarray(q)
    d = q.shape[-1]
    nq, nk = max(q.shape[-2], 1), max(np.shape(k)[-2], 1)
    name = dtype_name(dtype)
    u = UNIT_ROUNDOFF["float32"]
    a = float(np.max(score_bound(q, k, scale), initial=0.0))
    rel = u * (2 * LAMBDA * SCORE_STD * a + 2 + 1.2 * math.log(nk) +
               LAMBDA * RANDOM_SUM * (math.sqrt(nq) + math.sqrt(nk) + 2 * math.sqrt(d)))
    if name == "tf32x3":        # S and LSE, O (in D); dP, dV, dK, dQ (module docstring)
        rel += u * (tf32x3_term() * (2 * a + 1) +
                    4 * LAMBDA * (TF32X3_SPLIT_STD + TF32X3_BLOCK * math.sqrt(8 / 3)))
    rel *= SAFETY
    if name in HALF:
        rel += HALF_BWD * UNIT_ROUNDOFF[name]
    return rel


def rounded_o_tol(p, o, q, k, do, *, scale=None, dtype="float16"):
    """Absolute bounds on (dQ [..., Nq, d], dK [..., Nk, d], dV), element by element, from the
    16-bit rounding of O in D_i = Σ_c dO_ic·O_ic (fp16/bf16 backwards; module docstring,
    "Attention backward"): O_ic·(1 + δ_ic), |δ| ≤ u_h independent, moves D_i by ΔD_i of std
    u_h/√3·‖dO_i∘O_i‖₂, whatever dP − D leaves. dS_ij moves by P_ij·ΔD_i, so
     - dQ_ic = scale·Σ_j dS_ij K_jc by scale·ΔD_i·(P K)_ic (one ΔD_i for the whole row):
       λ·u_h/√3·scale·‖dO_i∘O_i‖₂·|(P K)_ic|;
     - dK_jc = scale·Σ_i dS_ij Q_ic by a sum of independent ΔD_i:
       λ·u_h/√3·scale·√(Σ_i P_ij²·‖dO_i∘O_i‖₂²·Q_ic²);
     - dV = Pᵀ dO reads no D: 0 (``backward_errors``' ``extra`` as it is).
    p [..., Nq, Nk], o: the oracle's P (0 for a hidden key) and O; q, k, do as the oracle got
    them (a hidden key's row of k may hold NaN: it counts as 0, as P does there)."""
    name = dtype_name(dtype)
    if name not in HALF:
        raise ValueError(f"dtype: expected a 16-bit format ({', '.join(sorted(HALF))}); "
                         f"got {dtype!r}")
    p, o, q, k, do = (np.asarray(x, np.float64) for x in (p, o, q, k, do))
    k = np.where(np.isfinite(k), k, 0.0)
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    sigma = UNIT_ROUNDOFF[name] / math.sqrt(3) * np.linalg.norm(do * o, axis=-1)   # ΔD_i's std
    f = LAMBDA * scale
    dq = f * sigma[..., None] * np.abs(p @ k)
    dk = f * np.sqrt(np.swapaxes(p ** 2 * sigma[..., None] ** 2, -1, -2) @ q ** 2)
    return dq, dk, 0.0


def backward_errors(grads, refs, rel, extra=(0.0, 0.0, 0.0), floors=(0.0, 0.0, 0.0)):
    """The errors a backward check compares with ``rel`` (``backward_tol``): for each of
    (dq, dk, dv), max over elements of |g − ref| / (max(max|ref|, floor) + extra/rel) — the
    error relative to the gradient's largest |value|, with an absolute term of the model
    added element by element (``rounded_o_tol``'s; 0 where none) and a floor for a gradient
    that vanishes (the tests' 1e-3 of the largest). An error ≤ rel passes."""
    out = []
    for g, r, e, f in zip(grads, refs, extra, floors):
        r = np.asarray(r, np.float64)
        top = max(float(np.max(np.abs(r), initial=0.0)), float(f), 1e-30) + np.asarray(e) / rel
        out.append(float(np.max(np.abs(np.asarray(g, np.float64) - r) / top, initial=0.0)))
    return out


def sum_tol(abs_sum, n, dtype="float32"):
    """Bound on |Σ̂x − Σx| for a float32 sum of n terms in any order (sequential, a tree, a
    butterfly): each of the n − 1 additions rounds once, an error of at most u times its
    partial sum, itself at most Σ|x|; independent errors: S·λ·u·√n·Σ|x| (``abs_sum`` = Σ|x|,
    an array broadcasts). A max is exact: it needs no bound."""
    n = _count(n, "n")
    return SAFETY * LAMBDA * unit_roundoff(dtype) * math.sqrt(n) * np.asarray(abs_sum,
                                                                                np.float64)


def tf32x3_dot_tol(terms):
    """Bound on |3xTF32 dot product − exact| for each row of ``terms`` [..., n], the exact
    products a_j·b_j in the order of k (as the kernels form them: k8 steps of three mmas summed
    from zero, each step's sum added to the accumulator in float32; module docstring):
     - the split: independent errors of std ≤ TF32X3_SPLIT_STD·u·|t_j|: λ·that·‖t‖₂;
     - the k8 steps on the tensor core: ≤ TF32X3_BLOCK·u·Σ_step|t| each, toward zero, so of one
       sign for terms of one sign: TF32X3_BLOCK·u·Σ|t| (not a √);
     - the n/8 step sums added in float32: each ≤ u·|C_b| (C_b the partial sum after step b),
       independent, std ≤ u·|C_b|/√3: λ·u·√(Σ_b C_b²/3).
    All × S. An accumulator that takes the mmas themselves (three roundings toward zero a k8
    step) falls outside it once n is in the hundreds (tests/test_tf32x3_accuracy.py)."""
    t = np.asarray(terms, np.float64)
    n = t.shape[-1]
    steps = t[..., :n - n % 8].reshape(t.shape[:-1] + (n // 8, 8)).sum(axis=-1)
    if n % 8:
        steps = np.concatenate([steps, t[..., n - n % 8:].sum(axis=-1, keepdims=True)], axis=-1)
    partial = np.cumsum(steps, axis=-1)
    u = UNIT_ROUNDOFF["float32"]
    return SAFETY * u * (LAMBDA * TF32X3_SPLIT_STD * np.sqrt(np.sum(t * t, axis=-1)) +
                         TF32X3_BLOCK * np.sum(np.abs(t), axis=-1) +
                         LAMBDA * np.sqrt(np.sum(partial * partial, axis=-1) / 3))


def merge_l_tol(m_parts, l_parts, depth, axis=0):
    """Bound on |l̂ − l| for l = Σ_p e^{m_p − m}·l_p (§19's merge of P states (m_p, l_p), in a
    tree of ``depth`` pairwise merges, float32), along ``axis``. State p reaches the root
    through ≤ depth merges, each a subtraction (u·|x|), an __expf (u·(2 + 1.2|x|)), a
    product and a sum (u each); the shifts x of its path add up to m − m_p, so its term
    t_p = e^{m_p − m}·l_p has a relative error ≤ u·(1 + 4·depth + 2.2·(m − m_p)) (the 1: l_p
    rounded to float32 on input). Deterministic (depth is small): S·u·Σ_p that·t_p."""
    m_parts = np.asarray(m_parts, np.float64)
    l_parts = np.asarray(l_parts, np.float64)
    m = np.max(m_parts, axis=axis, keepdims=True)
    safe = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(invalid="ignore"):
        t = np.where(np.isneginf(m_parts), 0.0, np.exp(m_parts - safe) * l_parts)
        shift = np.where(t > 0, safe - m_parts, 0.0)
    u = UNIT_ROUNDOFF["float32"]
    return SAFETY * u * np.sum((1 + 4 * depth + 2.2 * shift) * t, axis=axis)


def merge_tol(o_parts, lse_parts):
    """Bounds on |o − o_ref| (per element) and |lse − lse_ref| (per row) of §22's merge
    (``merge_attention``, float32): M = max_p lse_p, x_p = lse_p − M, w_p = e^{x_p}/Σ e^{x},
    lse = M + ln Σ_p e^{x_p}, o = Σ_p w_p·o_p. As an :class:`AttentionTol`.
     - x_p: one rounding, u·|x_p| — absolute in x, so a relative error of e^{x_p}: this is
       where an lse near 0 from parts of size |lse_p| gets an error of ulps of max|lse_p|,
       not of itself; __expf: u·(2 + 1.2|x_p|). The total (P positive terms, ≥ 1): relative
       r = u·Σ_p w_p·(2 + 2.2|x_p|) + (P − 1)·u.
     - lse: r, the log (≤ 1 ulp of a value in [0, ln P]: u·(1 + 2 ln P)) and the final sum
       (u·|lse| ≤ u·(|M| + ln P)).
     - o: each w_p·o_p off by u·(4 + 2.2|x_p|) + r relative (exp, reciprocal, product), the
       P − 1 sums u·Σ_p w_p|o_p| each.
    Deterministic (P is small), times S."""
    o_parts = np.asarray(o_parts, np.float64)
    lse_parts = np.asarray(lse_parts, np.float64)
    n_parts = max(lse_parts.shape[0], 1)
    u = UNIT_ROUNDOFF["float32"]
    big = np.max(lse_parts, axis=0, initial=-np.inf)
    safe = np.where(np.isfinite(big), big, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        e = np.where(np.isneginf(lse_parts), 0.0, np.exp(lse_parts - safe))
        x = np.where(e > 0, np.abs(lse_parts - safe), 0.0)
        total = e.sum(axis=0)
        w = np.where(total > 0, e / np.where(total > 0, total, 1.0), 0.0)
    r = u * np.sum(w * (2 + 2.2 * x), axis=0) + (n_parts - 1) * u
    log_p = math.log(n_parts)
    lse = np.where(total > 0, r + u * (1 + 2 * log_p) + u * (np.abs(safe) + log_p), 0.0)
    wo = w[..., None] * np.abs(o_parts)
    o = np.sum(wo * (u * (4 + 2.2 * x[..., None]) + r[None, ..., None]), axis=0) + \
        (n_parts - 1) * u * wo.sum(axis=0)
    return AttentionTol(SAFETY * o, SAFETY * lse)


def linear_attention_tol(q, k, v, *, causal=False):
    """Bound on |O − O_ref| per element of §45's linear attention (float32 kernels,
    ``kernels_numba/linear_attention.py``): O_ic = N_ic/Z_i, N_ic = Σ_a φ(q_i)_a·KV_ac,
    Z_i = Σ_a φ(q_i)_a·z_a, KV_ac = Σ_j φ(k_j)_a·v_jc, z_a = Σ_j φ(k_j)_a over the n_i keys
    query i sees (Nk, or the causal prefix). With the weights w_ij = φ(q_i)·φ(k_j) > 0,
    O_i = Σ_j w_ij v_j / Σ_j w_ij, and the two scales are W_ic = Σ_j w_ij|v_jc|/Z_i (the
    weighted mean of |v|) and R_ic = √(Σ_j (Σ_a φ(q_i)_a²φ(k_j)_a²)·v_jc²)/Z_i (the random-walk
    size of the key sums, as seen through φ(q_i)). Sources, each absolute in O:
     - φ(x) = x + 1 (one rounding) or __expf(x): relative ≤ e_φ = u·(2 + 1.2·X), X the largest
       −x of q and k. A weight w_ij gets ≤ 2·e_φ (positive sums of products), in N and Z alike,
       so O moves by ≤ 2·e_φ·Σ_j w_ij|v_jc − O_ic|/Z_i ≤ 2·e_φ·(W_ic + |O_ic|).
     - KV over n_i keys (random-sign terms: v; the splits' partials and their sum: ≤ 2·n_i
       roundings; one product each): std ≤ RANDOM_SUM·u·√(2n_i + 2)·T_ac, T_ac² = Σ_j
       φ(k_j)_a²v_jc²; through φ(q_i) (independent over a): λ·RANDOM_SUM·u·√(2n_i + 2)·R_ic.
     - z over n_i keys (positive): relative λ·POSITIVE_SUM·u·√(2n_i), so |O| times that.
     - the dot products over D = d rows (products, G groups' partials, their sum: ≤ 2d + 2
       roundings) — N's terms share their sign (every KV_ac is a positive combination of the
       same v_:c), so both are positive-sum-like: λ·POSITIVE_SUM·u·√(2d + 2)·(W_ic + |O_ic|);
       the division: u·|O_ic|.
     o_ic = S·(2e_φ·(W + |O|) + λ·u·(RANDOM_SUM·√(2n_i + 2)·R + POSITIVE_SUM·(√(2n_i)·|O|
            + √(2d + 2)·(W + |O|))) + u·|O|);
    a query that sees no key: 0 (the kernel writes 0 exactly). Assumes random-sign v (as
    the attention model assumes of its dot products). Returns an array of O's shape.
    O(Nq·Nk·d) per head (the quadratic form): for test shapes."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    nq, d = q.shape[-2:]
    nk = k.shape[-2]
    u = UNIT_ROUNDOFF["float32"]

    def phi(x):
        return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))

    visible = np.ones((nq, nk), bool)
    if causal:                                   # bottom-right: query i sees j ≤ i + Nk − Nq
        visible = np.arange(nk)[None, :] <= np.arange(nq)[:, None] + (nk - nq)
    n_i = visible.sum(axis=1).astype(np.float64)[:, None]            # keys each query sees
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    out = np.zeros(lead + (nq, v.shape[-1]))
    qb, kb, vb = (np.broadcast_to(x, lead + x.shape[-2:]) for x in (q, k, v))
    for idx in np.ndindex(*lead):
        qi, ki, vi = qb[idx], kb[idx], vb[idx]
        fq, fk = phi(qi), phi(ki)
        x_neg = max(0.0, -float(min(qi.min(initial=0.0), ki.min(initial=0.0))))
        e_phi = u * (2 + 1.2 * x_neg)
        w = np.where(visible, fq @ fk.T, 0.0)
        w2 = np.where(visible, (fq ** 2) @ (fk ** 2).T, 0.0)
        z = w.sum(axis=1, keepdims=True)
        zs = np.where(z > 0, z, 1.0)
        o = np.abs(w @ vi) / zs
        big_w = (w @ np.abs(vi)) / zs
        r = np.sqrt(w2 @ vi ** 2) / zs
        bound = (2 * e_phi * (big_w + o) +
                 LAMBDA * u * (RANDOM_SUM * np.sqrt(2 * n_i + 2) * r +
                               POSITIVE_SUM * (np.sqrt(2 * n_i) * o +
                                               math.sqrt(2 * d + 2) * (big_w + o))) + u * o)
        out[idx] = np.where(z > 0, SAFETY * bound, 0.0)
    return out


__all__ = ["AttentionTol", "HALF", "POSITIVE_SUM", "RANDOM_SUM", "SCORE_STD", "LAMBDA",
           "SAFETY", "TF32X3_BLOCK", "TF32X3_SPLIT_STD", "UNIT_ROUNDOFF",
           "attention_tol", "backward_errors", "backward_tol", "rounded_o_tol", "dtype_name",
           "forward_terms", "linear_attention_tol", "merge_l_tol", "merge_tol",
           "score_bound", "softmax_tol", "sum_tol", "tf32x3_dot_tol", "tf32x3_term",
           "unit_roundoff"]
