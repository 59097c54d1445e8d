"""Bad input over the whole public API — each case a clear TypeError or ValueError
whose message starts with the argument's name, raised before any kernel runs (so cheap), and a
refused call leaves nothing behind (a valid call after them still works).

The cases come from tables (``edge_table``); test ids read ``refuse-<Error>-<argument>-…``.
Documented results (empty inputs, rows with no key, awkward shapes) are in
``test_edge_documented.py``; the command line in ``test_cli.py``.
"""

import numpy as np
import pytest
from conftest import SIM, check_attention
from edge_table import COUNTS, Refuse, check_refusal, label, params
from numba import cuda

import flashlesson
from flashlesson.attention_methods import FLOAT32_METHODS
from flashlesson import (BwdConfig, FlashConfig, LinearConfig, TcBwdConfig, TcConfig, attention,
                         attention_backward, dropout_keep_mask, linear_attention,
                         merge_attention, softmax, varlen_attention, varlen_attention_backward)
from flashlesson.reference import attention as ref_attention

F32 = np.float32


def z(*shape, dtype=F32):
    return np.zeros(shape, dtype)


# ---------------------------------------------------------------------------------------------
# Scalar arguments shared by many functions: (argument, bad value, error)
# ---------------------------------------------------------------------------------------------
BAD_SCALE = [("str-1.0", "1.0", TypeError), ("bool-True", True, TypeError),
             ("list", [1.0], TypeError), ("complex", 1j, TypeError),
             ("float-1e300", 1e300, ValueError), ("float-inf", float("inf"), ValueError),
             ("float-minf", -float("inf"), ValueError), ("float-nan", float("nan"), ValueError),
             ("np.float64-1e39", np.float64(1e39), ValueError)]
BAD_FLAG = [("str-False", "False", TypeError), ("int-0", 0, TypeError),
            ("int-1", 1, TypeError), ("None", None, TypeError), ("float-1.0", 1.0, TypeError)]
BAD_DROPOUT = [("str-0.1", "0.1", TypeError), ("bool-True", True, TypeError),
               ("None", None, TypeError), ("float-1.0", 1.0, ValueError),
               ("float-neg", -0.1, ValueError), ("float-nan", float("nan"), ValueError)]
BAD_SEED = [("int-neg", -1, ValueError), ("int-2^64", 2**64, ValueError),
            ("float-1.5", 1.5, TypeError), ("str-7", "7", TypeError),
            ("bool-True", True, TypeError)]
BAD_METHOD = [("str-flashy", "flashy", ValueError), ("None", None, ValueError),
              ("int-3", 3, ValueError)]


def scalar_cases(function, call, args, extra=()):
    """Refusals of ``call(**{arg: bad})`` for each named scalar argument family."""
    families = {"scale": BAD_SCALE, "causal": BAD_FLAG, "return_lse": BAD_FLAG,
                "dropout_p": BAD_DROPOUT, "seed": BAD_SEED, "method": BAD_METHOD}
    cases = []
    for arg in args:
        for lab, value, err in families[arg]:
            cases.append(Refuse(function, arg, lab, err,
                                lambda arg=arg, value=value: call(**{arg: value})))
    for arg, lab, err, kwargs in extra:
        cases.append(Refuse(function, arg, lab, err, lambda kwargs=kwargs: call(**kwargs)))
    return cases


# ---------------------------------------------------------------------------------------------
# softmax
# ---------------------------------------------------------------------------------------------
def _softmax(x=None, **kw):
    return softmax(z(2, 8) if x is None else x, **kw)


_dev = None


def _device_x():
    global _dev
    if _dev is None:
        _dev = cuda.to_device(np.zeros((4, 8), F32))
    return _dev


SOFTMAX_CASES = scalar_cases("softmax", _softmax, ["method"], extra=[
    ("x", "float64", TypeError, dict(x=z(2, 8, dtype=np.float64))),
    ("x", "int32", TypeError, dict(x=z(2, 8, dtype=np.int32))),
    ("x", "bool", TypeError, dict(x=z(2, 8, dtype=bool))),
    ("x", "0-d", ValueError, dict(x=np.array(1.0, F32))),
    ("x", "np-scalar", TypeError, dict(x=np.float32(1.0))),
    ("x", "str", TypeError, dict(x="abc")),
    ("x", "None", TypeError, dict(x=object())),
    ("threads", "int-33", ValueError, dict(threads=33)),
    ("threads", "int-0", ValueError, dict(threads=0)),
    ("threads", "int-2048", ValueError, dict(threads=2048)),
    ("threads", "float-64.0", ValueError, dict(threads=64.0)),
    ("threads", "bool-True", ValueError, dict(threads=True)),
    ("out", "wrong-shape", ValueError, dict(out=z(2, 9))),
    ("out", "wrong-dtype", ValueError, dict(out=z(2, 8, dtype=np.float64))),
    ("out", "list", TypeError, dict(out=[[0.0] * 8] * 2)),
    ("out", "not-contiguous", ValueError, dict(out=z(2, 16)[:, ::2])),
    ("out", "device-for-host", TypeError, dict(out=cuda.to_device(z(2, 8)))),
])
# a method's longest row (§5 registry), and a partial overlap of out and x (device and host)
SOFTMAX_CASES += [
    Refuse("softmax", "softmax method 'warp'", "N-33", ValueError,
           lambda: softmax(z(1, 33), method="warp")),
    Refuse("softmax", "out", "overlap-device", ValueError,
           lambda: softmax(_device_x()[:3], out=_device_x()[1:])),
    Refuse("softmax", "out", "overlap-host", ValueError,
           lambda: (lambda buf: softmax(buf[:12].reshape(3, 4), out=buf[4:].reshape(3, 4)))(
               z(16))),
]


# ---------------------------------------------------------------------------------------------
# attention (every method), attention_backward (every method)
# ---------------------------------------------------------------------------------------------
def _attention(method, q=None, k=None, v=None, **kw):
    d = 8
    q = z(1, 1, 4, d) if q is None else q
    k = z(1, 1, 5, d) if k is None else k
    v = z(1, 1, 5, d) if v is None else v
    return attention(q, k, v, method=method, **kw)


def _array_cases(function, call, names=("q", "k", "v")):
    cases = []
    for name in names:
        other = {"q": (1, 1, 4, 8)}.get(name, (1, 1, 5, 8))
        cases += [
            Refuse(function, name, "float64", TypeError,
                   lambda name=name, s=other: call(**{name: z(*s, dtype=np.float64)})),
            Refuse(function, name, "int32", TypeError,
                   lambda name=name, s=other: call(**{name: z(*s, dtype=np.int32)})),
            Refuse(function, name, "3-D", ValueError,
                   lambda name=name, s=other: call(**{name: z(*s[1:])})),
            Refuse(function, name, "str", TypeError, lambda name=name: call(**{name: "q"})),
        ]
    return cases


ATTENTION_CASES = []
# (flash_wgmma takes fp16/bf16 with d = 64 or 128 only: its refusals are in test_attention_tc.py)
for _m in FLOAT32_METHODS:
    _call = (lambda m: lambda **kw: _attention(m, **kw))(_m)
    _fn = f"attention[{_m}]"
    ATTENTION_CASES += scalar_cases(_fn, _call, ["scale", "causal", "return_lse", "seed"]
                                    + (["dropout_p"] if _m != "flash_tc" else []))
    ATTENTION_CASES += _array_cases(_fn, _call)
    ATTENTION_CASES += [
        Refuse(_fn, "k, v", "d-mismatch", ValueError, lambda c=_call: c(k=z(1, 1, 5, 7))),
        Refuse(_fn, "v", "nk-mismatch", ValueError, lambda c=_call: c(v=z(1, 1, 6, 8))),
        Refuse(_fn, "key_padding_mask", "float32", TypeError,
               lambda c=_call: c(key_padding_mask=z(1, 5))),
        Refuse(_fn, "key_padding_mask", "int32", TypeError,
               lambda c=_call: c(key_padding_mask=z(1, 5, dtype=np.int32))),
        Refuse(_fn, "key_padding_mask", "shape", ValueError,
               lambda c=_call: c(key_padding_mask=np.ones((1, 4), bool))),
        Refuse(_fn, "key_padding_mask", "1-D", ValueError,
               lambda c=_call: c(key_padding_mask=np.ones(5, bool))),
        Refuse(_fn, "config", "dict", TypeError, lambda c=_call: c(config={"Br": 32})),
    ]
    if _m != "flash_tc":
        ATTENTION_CASES += [
            Refuse(_fn, "q", "d-0", ValueError,
                   lambda c=_call: c(q=z(1, 1, 4, 0), k=z(1, 1, 5, 0), v=z(1, 1, 5, 0))),
            Refuse(_fn, "q", "d-257", ValueError,
                   lambda c=_call: c(q=z(1, 1, 1, 257), k=z(1, 1, 1, 257), v=z(1, 1, 1, 257))),
        ]
ATTENTION_CASES += [
    Refuse("attention[flash_tc]", "q", "d-12", ValueError,
           lambda: _attention("flash_tc", q=z(1, 1, 4, 12), k=z(1, 1, 5, 12), v=z(1, 1, 5, 12))),
    Refuse("attention[flash_tc]", "dropout_p", "float-0.1", ValueError,
           lambda: _attention("flash_tc", dropout_p=0.1)),
    Refuse("attention[flash_tc]", "dropout_p", "str-0.1", TypeError,
           lambda: _attention("flash_tc", dropout_p="0.1")),
    Refuse("attention[flash_tc]", "config", "FlashConfig", TypeError,
           lambda: _attention("flash_tc", config=FlashConfig(32, 16, 8, 4))),
    Refuse("attention[flash_tc]", "config", "Bc-24", ValueError,
           lambda: _attention("flash_tc", config=TcConfig(Bc=24))),
    Refuse("attention[naive]", "config", "any", ValueError,
           lambda: _attention("naive", config=FlashConfig(32, 16, 8, 4))),
    Refuse("attention[flash]", "config", "Br-not-multiple", ValueError,
           lambda: _attention("flash", config=FlashConfig(36, 16, 8, 4))),
    Refuse("attention[flash]", "config", "BwdConfig", TypeError,
           lambda: _attention("flash", config=flashlesson.configs.BWD_SIM_CONFIG)),
    Refuse("attention[flash]", "q, k, v", "host-and-device", TypeError,
           lambda: _attention("flash", q=cuda.to_device(z(1, 1, 4, 8)))),
    Refuse("attention[flash]", "q", "B*H-65536", ValueError,
           lambda: _attention("flash", q=z(1, 65536, 1, 1), k=z(1, 65536, 1, 1),
                              v=z(1, 65536, 1, 1))),
]
# grid limits: a causal call's query tiles go on the grid's y axis (≤ 65535 blocks), as do the
# naive path's GEMM row tiles; refused before launching (any tile size ≤ 128 rows exceeds it)
_LONG = 65535 * 128 + 1
ATTENTION_CASES += [
    Refuse("attention[flash]", "q", "causal-grid-y", ValueError,
           lambda: _attention("flash", q=z(1, 1, _LONG, 1), k=z(1, 1, 1, 1), v=z(1, 1, 1, 1),
                              causal=True)),
    Refuse("attention[naive]", "the naive path's GEMM", "grid-y", ValueError,
           lambda: _attention("naive", q=z(1, 1, _LONG, 1), k=z(1, 1, 1, 1), v=z(1, 1, 1, 1))),
]


def _backward(default_method, **kw):
    d = 8
    args = dict(do=z(1, 1, 4, d), q=z(1, 1, 4, d), k=z(1, 1, 5, d), v=z(1, 1, 5, d),
                o=z(1, 1, 4, d), lse=z(1, 1, 4))
    args.update({k: kw.pop(k) for k in list(kw) if k in args})
    kw.setdefault("method", default_method)
    return attention_backward(args["do"], args["q"], args["k"], args["v"], args["o"],
                              args["lse"], **kw)


BACKWARD_CASES = []
for _m in flashlesson.backward_methods.FLOAT32_METHODS:     # (not flash_wgmma: fp16/bf16)
    _call = (lambda m: lambda **kw: _backward(m, **kw))(_m)
    _fn = f"attention_backward[{_m}]"
    BACKWARD_CASES += scalar_cases(_fn, _call, ["scale", "causal", "seed"]
                                   + (["dropout_p"] if _m != "flash_tc" else []))
    BACKWARD_CASES += _array_cases(_fn, _call, ("q", "k", "v"))
    BACKWARD_CASES += [
        Refuse(_fn, "do", "shape", ValueError, lambda c=_call: c(do=z(1, 1, 5, 8))),
        Refuse(_fn, "o", "shape", ValueError, lambda c=_call: c(o=z(1, 1, 4, 9))),
        Refuse(_fn, "lse", "shape", ValueError, lambda c=_call: c(lse=z(1, 1, 5))),
        Refuse(_fn, "lse", "float64", TypeError,
               lambda c=_call: c(lse=z(1, 1, 4, dtype=np.float64))),
        Refuse(_fn, "key_padding_mask", "float32", TypeError,
               lambda c=_call: c(key_padding_mask=z(1, 5))),
        Refuse(_fn, "key_padding_mask", "shape", ValueError,
               lambda c=_call: c(key_padding_mask=np.ones((2, 5), bool))),
        Refuse(_fn, "key_padding_mask", "device-for-host", TypeError,
               lambda c=_call: c(key_padding_mask=cuda.to_device(np.ones((1, 5), bool)))),
    ]
BACKWARD_CASES += scalar_cases("attention_backward",
                               lambda method: _backward("flash", method=method), ["method"])
BACKWARD_CASES += [
    Refuse("attention_backward[flash]", "config", "FlashConfig", TypeError,
           lambda: _backward("flash", config=FlashConfig(32, 16, 8, 4))),
    Refuse("attention_backward[naive]", "config", "any", ValueError,
           lambda: _backward("naive", config=flashlesson.configs.BWD_SIM_CONFIG)),
    Refuse("attention_backward[flash_tc]", "config", "BwdConfig", TypeError,
           lambda: _backward("flash_tc", config=flashlesson.configs.BWD_SIM_CONFIG)),
    Refuse("attention_backward[flash_tc]", "dropout_p", "float-0.1", ValueError,
           lambda: _backward("flash_tc", dropout_p=0.1)),
]


# ---------------------------------------------------------------------------------------------
# varlen forward and backward
# ---------------------------------------------------------------------------------------------
CU = np.array([0, 3, 5], np.int32)          # two sequences of 3 and 2 rows


def _varlen(backward=False, **kw):
    d = 8
    args = dict(q=z(5, 1, d), k=z(5, 1, d), v=z(5, 1, d), cu_seqlens_q=CU, cu_seqlens_k=CU,
                max_seqlen_q=3, max_seqlen_k=3)
    if backward:
        args.update(do=z(5, 1, d), o=z(5, 1, d), lse=z(5, 1))
    args.update(kw)
    names = ("do", "q", "k", "v", "o", "lse") if backward else ("q", "k", "v")
    positional = [args.pop(n) for n in names + ("cu_seqlens_q", "cu_seqlens_k")]
    fn = varlen_attention_backward if backward else varlen_attention
    return fn(*positional, **args)


VARLEN_CASES = []
for _bw in (False, True):
    _call = (lambda bw: lambda **kw: _varlen(bw, **kw))(_bw)
    _fn = "varlen_attention_backward" if _bw else "varlen_attention"
    VARLEN_CASES += scalar_cases(_fn, _call, ["scale", "causal", "dropout_p", "seed"]
                                 + ([] if _bw else ["return_lse"]))
    for name in ("max_seqlen_q", "max_seqlen_k"):
        VARLEN_CASES += [
            Refuse(_fn, name, "shorter", ValueError, lambda c=_call, n=name: c(**{n: 2})),
            Refuse(_fn, name, "longer-than-total", ValueError,
                   lambda c=_call, n=name: c(**{n: 6})),
            Refuse(_fn, name, "float", TypeError, lambda c=_call, n=name: c(**{n: 3.0})),
            Refuse(_fn, name, "bool", TypeError, lambda c=_call, n=name: c(**{n: True})),
            Refuse(_fn, name, "negative", ValueError, lambda c=_call, n=name: c(**{n: -1})),
        ]
    for name in ("cu_seqlens_q", "cu_seqlens_k"):
        VARLEN_CASES += [
            Refuse(_fn, name, "int64", TypeError,
                   lambda c=_call, n=name: c(**{n: CU.astype(np.int64)})),
            Refuse(_fn, name, "not-0-first", ValueError,
                   lambda c=_call, n=name: c(**{n: np.array([1, 3, 5], np.int32)})),
            Refuse(_fn, name, "decreasing", ValueError,
                   lambda c=_call, n=name: c(**{n: np.array([0, 6, 5], np.int32)})),
            Refuse(_fn, name, "last-not-total", ValueError,
                   lambda c=_call, n=name: c(**{n: np.array([0, 3, 4], np.int32)})),
        ]
    VARLEN_CASES += [
        Refuse(_fn, "q", "4-D", ValueError, lambda c=_call: c(q=z(1, 5, 1, 8))),
        Refuse(_fn, "k, v", "heads", ValueError, lambda c=_call: c(k=z(5, 2, 8))),
        Refuse(_fn, "config", "TcConfig", TypeError, lambda c=_call: c(config=TcConfig())),
        Refuse(_fn, "cu_seqlens_k", "batch-mismatch", ValueError,
               lambda c=_call: c(cu_seqlens_k=np.array([0, 5], np.int32))),
    ]


# ---------------------------------------------------------------------------------------------
# merge_attention, dropout_keep_mask, linear_attention
# ---------------------------------------------------------------------------------------------
def _merge(o=None, lse=None):
    return merge_attention(z(2, 3, 4) if o is None else o, z(2, 3) if lse is None else lse)


def _lse_with(value):
    lse = z(2, 3)
    lse[1, 2] = value
    return lse


MERGE_CASES = [
    Refuse("merge_attention", "lse_parts", "plus-inf", ValueError,
           lambda: _merge(lse=_lse_with(np.inf))),
    Refuse("merge_attention", "lse_parts", "nan", ValueError,
           lambda: _merge(lse=_lse_with(np.nan))),
    Refuse("merge_attention", "lse_parts", "plus-inf-device", ValueError,
           lambda: merge_attention(cuda.to_device(z(2, 3, 4)),
                                   cuda.to_device(_lse_with(np.inf)))),
    Refuse("merge_attention", "lse_parts", "shape", ValueError, lambda: _merge(lse=z(2, 4))),
    Refuse("merge_attention", "lse_parts", "float64", TypeError,
           lambda: _merge(lse=z(2, 3, dtype=np.float64))),
    Refuse("merge_attention", "o_parts", "float16", TypeError,
           lambda: _merge(o=z(2, 3, 4, dtype=np.float16))),
    Refuse("merge_attention", "o_parts", "1-D", ValueError, lambda: _merge(o=z(4), lse=z(1))),
    Refuse("merge_attention", "o_parts", "no-parts", ValueError,
           lambda: _merge(o=z(0, 3, 4), lse=z(0, 3))),
    Refuse("merge_attention", "o_parts", "d-0", ValueError,
           lambda: _merge(o=z(2, 3, 0), lse=z(2, 3))),
    Refuse("merge_attention", "o_parts, lse_parts", "host-and-device", TypeError,
           lambda: _merge(o=cuda.to_device(z(2, 3, 4)))),
]

_GOOD_MASK = dict(seed=1, batch=1, heads=1, nq=2, nk=3, p=0.1)
MASK_CASES = [Refuse("dropout_keep_mask", n, label(v), e,
                     lambda n=n, v=v: dropout_keep_mask(**{**_GOOD_MASK, n: v}))
              for n, v, e in [("batch", 0, ValueError), ("batch", 2.0, TypeError),
                              ("heads", True, TypeError), ("nq", -1, ValueError),
                              ("nk", "3", TypeError), ("p", 1.0, ValueError),
                              ("p", "0.1", TypeError), ("seed", -1, ValueError),
                              ("seed", 0.5, TypeError)]]


def _linear(**kw):
    args = dict(q=z(1, 1, 4, 8), k=z(1, 1, 5, 8), v=z(1, 1, 5, 8))
    args.update(kw)
    return linear_attention(args.pop("q"), args.pop("k"), args.pop("v"), **args)


LINEAR_CASES = scalar_cases("linear_attention", _linear, ["causal"]) + \
    _array_cases("linear_attention", _linear) + [
    Refuse("linear_attention", "q", "d-129", ValueError,
           lambda: _linear(q=z(1, 1, 4, 129), k=z(1, 1, 5, 129), v=z(1, 1, 5, 129))),
    Refuse("linear_attention", "config", "FlashConfig", TypeError,
           lambda: _linear(config=FlashConfig(32, 16, 8, 4))),
    Refuse("linear_attention", "config", "G-3", ValueError,
           lambda: _linear(config=LinearConfig(G=3))),
]


# ---------------------------------------------------------------------------------------------
# The configurations: every int field a positive int, every bool field a bool
# ---------------------------------------------------------------------------------------------
BAD_INT = [("int-0", 0, ValueError), ("int-neg", -4, ValueError), ("float-32.0", 32.0, TypeError),
           ("bool-True", True, TypeError), ("str-32", "32", TypeError), ("None", None, TypeError)]
BAD_BOOL = [("int-1", 1, TypeError), ("str-True", "True", TypeError), ("None", None, TypeError),
            ("float-0.0", 0.0, TypeError)]
GOOD_CONFIGS = {
    FlashConfig: dict(Br=32, Bc=16, TR=8, TC=4, KU=1, GROUP=4),
    BwdConfig: dict(Bc=32, Br=16, TR=8, TC=4, dq_Br=32, dq_Bc=16, dq_TR=8, dq_TC=4),
    TcConfig: dict(Bc=16, WARPS=2, MT=1, PF=False, ASYNC=False),
    TcBwdConfig: dict(Bq=16, KV_WARPS=1, Bk=16, Q_WARPS=1, KV_ASYNC=False, Q_ASYNC=False),
    LinearConfig: dict(G=1, BN=8, splits=1),
}
CONFIG_CASES = []
for _cls, _good in GOOD_CONFIGS.items():
    for _field, _value in _good.items():
        bads = BAD_BOOL if isinstance(_value, bool) else BAD_INT
        if _cls is LinearConfig and _field == "splits":
            bads = [b for b in BAD_INT if b[0] != "None"]       # (None: automatic splits)
        for _lab, _bad, _err in bads:
            CONFIG_CASES.append(Refuse(_cls.__name__, f"{_cls.__name__}.{_field}", _lab, _err,
                                       lambda c=_cls, g=_good, f=_field, b=_bad:
                                       c(**{**g, f: b})))

ALL = (SOFTMAX_CASES + ATTENTION_CASES + BACKWARD_CASES + VARLEN_CASES + MERGE_CASES
       + MASK_CASES + LINEAR_CASES + CONFIG_CASES)


@pytest.mark.parametrize("case", params(ALL))
def test_refused(case):
    check_refusal(case)


def test_counts_per_class():
    """The cases per class (refuse-TypeError, refuse-ValueError, documented) and function, as
    the coordinator reports them; also a floor, so a table cannot silently shrink."""
    import test_edge_documented  # noqa: F401 - fills COUNTS with the documented cases
    by_class = {}
    for (kind, err, fn), n in sorted(COUNTS.items()):
        by_class.setdefault(f"{kind}-{err}", 0)
        by_class[f"{kind}-{err}"] += n
        print(f"{kind:10s} {err:10s} {fn:36s} {n:4d}")
    print(by_class, "total", sum(by_class.values()))
    assert by_class["refuse-TypeError"] >= 150 and by_class["refuse-ValueError"] >= 150
    assert by_class["documented-oracle"] >= 40


def test_a_valid_call_after_refused_ones_still_works(rng):
    """Refused configurations (float tiles, zeros) leave no kernel-cache entry behind: the same
    tiles as ints then run and match the oracle."""
    for bad in (dict(Br=32.0), dict(Bc=16.0), dict(TR=0), dict(TC=4.0), dict(KU=True)):
        with pytest.raises((TypeError, ValueError), match=r"^FlashConfig\."):
            FlashConfig(**{**GOOD_CONFIGS[FlashConfig], **bad})
    for bad in (dict(scale="0.5"), dict(causal="False"), dict(dropout_p="0")):
        with pytest.raises(TypeError):
            attention(z(1, 1, 3, 8), z(1, 1, 5, 8), z(1, 1, 5, 8), **bad)
    q, k, v = (rng.standard_normal((1, 1, n, 8)).astype(F32) for n in (3, 5, 5))
    cfg = FlashConfig(**GOOD_CONFIGS[FlashConfig]) if SIM else None
    o, lse = attention(q, k, v, causal=True, return_lse=True, config=cfg)
    check_attention(o, lse, *ref_attention(q, k, v, causal=True), q, k, v)
