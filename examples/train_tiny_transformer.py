"""Train a tiny causal transformer twice — attention by flashlesson's kernels, then by torch's —
and compare the two loss curves. (GPU and torch only; not a section of the tour.)

The claim it checks: ``flashlesson.torch.scaled_dot_product_attention`` (the flash forward of
§32 and the recomputing backward of §30 as a torch autograd function) is a drop-in for
``torch.nn.functional.scaled_dot_product_attention`` in training, not only in one forward
pass: from the same initial weights, on the same batches, the two trainings follow the same
loss curve, step for step, up to float32 rounding.

What you will see: a 2-layer pre-LayerNorm transformer (d_model 128, 4 heads of d = 32, MLP
4×, learned positions, vocabulary 64; float32, TF32 off) trained for 50 AdamW steps (lr 5e-3)
on batches of 16 sequences of 128 tokens, each a random block of 16 tokens repeated — so after
the first block every next token can be copied from 15 positions back, and the loss falls
from about ln 64 ≈ 4.2 toward the floor set by the first, unpredictable block (15/128 · ln 64
≈ 0.49). Both losses every 5 steps, their largest relative difference, and each run's time
(the Numba kernels are compiled once, before the timed runs). Exit status 0 if the curves
agree within 1e-3 relative at every step, 1 if not, 2 if there is no GPU or no torch.

How close to expect: the two attentions differ by float32 rounding (~1e-7 relative), and this
training does not amplify that much — on a CPU, with torch's SDPA against an explicit
softmax(QKᵀ/√d)V, or against SDPA with 3e-6 relative noise added to its output, the curves
stayed within ~1e-6 over the 50 steps. (With lr 1e-2 they did not: the same 1e-6 noise grew to
1e-2, so the learning rate is part of this comparison.)

Run: ``python examples/train_tiny_transformer.py``.
"""

import copy
import sys
import time

STEPS, EVERY, WARMUP = 50, 5, 3
BATCH, SEQ, VOCAB, PERIOD = 16, 128, 64, 16
D_MODEL, HEADS, LAYERS = 128, 4, 2
LR = 5e-3
POS_STD = 1.0             # learned positions start as large as the token embeddings (std 1)
TOLERANCE = 1e-3            # largest |loss_flash − loss_torch| / loss_torch allowed at any step
DEVICE = "cuda"


def need_gpu_and_torch():
    """torch and flashlesson on a CUDA GPU, or a clear message and exit status 2."""
    try:
        import torch
    except ImportError:
        print("train_tiny_transformer: needs torch with CUDA (pip install -e \".[torch]\"); "
              "torch is not installed", file=sys.stderr)
        raise SystemExit(2)
    if not torch.cuda.is_available():
        print("train_tiny_transformer: needs a CUDA GPU; torch sees none", file=sys.stderr)
        raise SystemExit(2)
    import flashlesson
    if flashlesson.SIMULATOR:
        print("train_tiny_transformer: flashlesson runs in Numba's CUDA simulator here "
              f"({flashlesson.device.REASON}); this script needs its kernels on the GPU",
              file=sys.stderr)
        raise SystemExit(2)
    return torch


def build(torch):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(D_MODEL), nn.LayerNorm(D_MODEL)
            self.qkv = nn.Linear(D_MODEL, 3 * D_MODEL)
            self.proj = nn.Linear(D_MODEL, D_MODEL)
            self.mlp = nn.Sequential(nn.Linear(D_MODEL, 4 * D_MODEL), nn.GELU(),
                                     nn.Linear(4 * D_MODEL, D_MODEL))

        def forward(self, x, sdpa):
            b, n, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, HEADS, c // HEADS).permute(
                2, 0, 3, 1, 4)                                          # each [B, H, N, d]
            y = sdpa(q, k, v, is_causal=True)                           # [B, H, N, d]
            x = x + self.proj(y.transpose(1, 2).reshape(b, n, c))
            return x + self.mlp(self.ln2(x))

    class TinyLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(VOCAB, D_MODEL)
            self.pos = nn.Parameter(POS_STD * torch.randn(SEQ, D_MODEL))
            self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
            self.ln = nn.LayerNorm(D_MODEL)
            self.head = nn.Linear(D_MODEL, VOCAB)

        def forward(self, idx, sdpa):
            x = self.tok(idx) + self.pos[:idx.shape[1]]
            for block in self.blocks:
                x = block(x, sdpa)
            return self.head(self.ln(x))

    def loss_fn(model, x, y, sdpa):
        logits = model(x, sdpa)
        return F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))

    return TinyLM, loss_fn


def batches(torch, device):
    """STEPS batches (x, y) of [BATCH, SEQ] tokens: a random block of PERIOD tokens repeated;
    y is x shifted by one (next-token prediction). Made once, used by both trainings."""
    g = torch.Generator().manual_seed(1234)
    out = []
    for _ in range(STEPS):
        block = torch.randint(0, VOCAB, (BATCH, PERIOD), generator=g)
        seq = block.repeat(1, (SEQ + 1) // PERIOD + 1)[:, :SEQ + 1]
        out.append((seq[:, :-1].to(device), seq[:, 1:].to(device)))
    return out


def train(torch, model, loss_fn, data, sdpa):
    """Train on ``data``; returns the losses and each step's wall time (s). ``loss.item()``
    waits for the GPU, so a step's time is its host work and its kernels together."""
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    losses, times = [], []
    torch.cuda.synchronize()
    for x, y in data:
        t0 = time.perf_counter()
        loss = loss_fn(model, x, y, sdpa)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    return losses, times


def main():
    torch = need_gpu_and_torch()
    import flashlesson
    from flashlesson.torch import scaled_dot_product_attention as flash_sdpa
    torch_sdpa = torch.nn.functional.scaled_dot_product_attention
    # strict float32 in both runs: TF32 matmuls would differ from the kernels' FP32 by ~1e-3
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = torch.device(DEVICE)

    TinyLM, loss_fn = build(torch)
    torch.manual_seed(0)
    model0 = TinyLM().to(device)
    data = batches(torch, device)

    # compile the Numba kernels (forward, D, dK/dV, dQ for d = 32, causal) outside the timing
    t0 = time.perf_counter()
    q = torch.randn(BATCH, HEADS, SEQ, D_MODEL // HEADS, device=device, requires_grad=True)
    flash_sdpa(q, q, q, is_causal=True).sum().backward()
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0

    # warm-up: a few steps of each training on a copy, so that torch's own first uses (cuBLAS,
    # AdamW, the caching allocator) and the call plans' first calls are paid before either run
    for sdpa in (flash_sdpa, torch_sdpa):
        train(torch, copy.deepcopy(model0), loss_fn, data[:WARMUP], sdpa)
    runs = {}
    for name, sdpa in (("flashlesson", flash_sdpa), ("torch", torch_sdpa)):
        runs[name] = train(torch, copy.deepcopy(model0), loss_fn, data, sdpa)
    fl, fl_t = runs["flashlesson"]
    tt, tt_t = runs["torch"]
    fl_s, tt_s = sum(fl_t), sum(tt_t)
    fl_med, tt_med = sorted(fl_t)[len(fl_t) // 2], sorted(tt_t)[len(tt_t) // 2]
    rel = [abs(a - b) / abs(b) for a, b in zip(fl, tt)]
    worst = max(rel)

    print(__doc__.split("\n\n")[1])
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}, flashlesson "
          f"{flashlesson.__version__}: {LAYERS} layers, d_model {D_MODEL}, {HEADS} heads of "
          f"d = {D_MODEL // HEADS}, batch {BATCH} × {SEQ} tokens, AdamW lr {LR}, float32\n")
    print(f"{'step':>5}  {'flashlesson':>12}  {'torch SDPA':>12}  {'rel. diff':>9}")
    for i in list(range(0, STEPS, EVERY)) + ([STEPS - 1] if (STEPS - 1) % EVERY else []):
        print(f"{i:>5}  {fl[i]:>12.6f}  {tt[i]:>12.6f}  {rel[i]:>9.1e}")
    floor = (PERIOD - 1) / SEQ * torch.log(torch.tensor(float(VOCAB))).item()
    print(f"\nloss {fl[0]:.3f} → {fl[-1]:.3f} (floor ≈ {floor:.2f}: the first block cannot be "
          f"predicted); largest relative difference over {STEPS} steps: {worst:.1e} at step "
          f"{rel.index(worst)} (tolerance {TOLERANCE:.0e})")
    print(f"time: flashlesson {fl_s:.2f} s, torch {tt_s:.2f} s for {STEPS} steps; median step "
          f"{1e3 * fl_med:.2f} ms against {1e3 * tt_med:.2f} ms: {fl_med / tt_med:.2f}× torch "
          f"SDPA's step (both after {WARMUP} warm-up steps; Numba kernels compiled before, in "
          f"{compile_s:.1f} s)")
    ok = worst <= TOLERANCE
    print("the two trainings agree" if ok else "the two trainings DIFFER beyond the tolerance")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
