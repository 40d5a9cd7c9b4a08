"""Adam with compressed communication that survives sparsification and sign:
1-bit Adam's recipe (Tang et al., 2021) as a DDP communication hook.

    import gradcomp.adam as gca
    state = gca.AdamState(algo="oktopk", params={"DENSITY": "0.01"}, dense_steps=30,
                          compress="gradient", precondition=True)     # collective
    model.register_comm_hook(state, gca.adam_hook)
    opt = gca.PreconditionedAdamW(model.parameters(), lr=3e-3, weight_decay=0.05)
    # training loop unchanged: loss.backward(); opt.step(); schedulers work on opt

Why: with plain AdamW after the hook, a top-k (or sign) compressed gradient
with error feedback reaches Adam as bursts: a coordinate is zero for about
1/density steps, then carries its whole accumulated residual at once. Adam
normalizes each coordinate by the root of its running second moment, so a
burst becomes one step of about lr whatever its size, and the second moment
itself is learned from the bursts (docs/results/accuracy.md, "Top-k and sign
with AdamW"). 1-bit Adam's answer: run Adam dense for a warm-up, then freeze
its second moment v and compress only what remains linear in the
gradients; the frozen v is a fixed diagonal preconditioner, so error
feedback's bursts are applied in proportion to their size and nothing is
lost.

What the hook does, per parameter (state kept per parameter, so DDP's
bucket rebuild after step 1 is harmless):
  - steps < dense_steps (the warm-up, at least 1): the bucket is averaged
    densely by the process group's allreduce (as GradcompState(dense_steps=)
    does); m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2 from the average.
  - later steps, compress="momentum" (1-bit Adam): each rank hands its local
    momentum b1 m + (1-b1) g_local to gradcomp's compressed allreduce (the
    algorithm's error feedback carries what was not sent); its average
    becomes m on every rank. v stays frozen.
    compress="gradient": the gradient is compressed (with error feedback) and
    m = b1 m + (1-b1) C(g) is formed from the result; v stays frozen.
    precondition=True: what is compressed is first divided by the frozen
    sqrt(v_hat) + eps (top-k then selects by Adam's step size, not by the
    raw gradient, whose scale differs ~100x between tensors); m is kept in
    that space.
  - the bucket returns Adam's direction m_hat / (sqrt(v_hat) + eps) (bias
    corrections as torch.optim.Adam; v's at the last warm-up step), which DDP
    writes into each parameter's .grad.
PreconditionedAdamW then steps p <- p (1 - lr wd) - lr grad (AdamW's
decoupled weight decay, per parameter group, lr from its group so
schedulers work). m and v are computed from data identical on every rank,
so every rank's parameters stay bit-equal.

Memory: m and v (fp32) per parameter, as Adam's own. The optimizer keeps
no state. Measured (docs/results/accuracy.md, "Top-k and sign with AdamW:
gradcomp.adam"): sign with compress="momentum" (1-bit Adam) and top-k with
compress="gradient", precondition=True.
"""
import torch

from gradcomp.capi import GradcompError
from gradcomp.torch import GradcompState, allreduce_hook

__all__ = ["AdamState", "adam_hook", "PreconditionedAdamW"]

COMPRESS = ("momentum", "gradient")


class AdamState(GradcompState):
    """GradcompState (its arguments, collective) plus Adam's moments.
    dense_steps: the dense warm-up whose last v is frozen (>= 1; 1-bit Adam
    uses 15-25 % of training); betas, eps: Adam's; compress: "momentum"
    (1-bit Adam: the local momentum is compressed) or "gradient";
    precondition: divide by the frozen sqrt(v_hat) + eps before compressing
    (top-k then selects by Adam's step size, not by the raw gradient)."""

    def __init__(self, process_group=None, algo=None, params=None, store=None, host=None,
                 dense_steps=1, betas=(0.9, 0.999), eps=1e-8, compress="momentum",
                 precondition=False):
        if int(dense_steps) < 1:
            raise GradcompError(1, "gradcomp.adam.AdamState: dense_steps must be >= 1 (the "
                                   "warm-up that learns the second moment it freezes), got %r"
                                % (dense_steps,))
        if compress not in COMPRESS:
            raise GradcompError(1, "gradcomp.adam.AdamState: compress must be one of %s, got %r"
                                % (", ".join(COMPRESS), compress))
        b1, b2 = (float(b) for b in betas)
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0) or not eps > 0:
            raise GradcompError(1, "gradcomp.adam.AdamState: betas must lie in [0, 1) and eps be "
                                   "> 0, got betas=%r eps=%r" % (betas, eps))
        super().__init__(process_group=process_group, algo=algo, params=params, store=store,
                         host=host, dense_steps=int(dense_steps))
        self.betas, self.eps, self.compress = (b1, b2), float(eps), compress
        self.precondition = bool(precondition)
        # parameter -> {"m", "v": fp32 flat; after the warm-up "denom": the
        # frozen sqrt(v_hat) + eps; with precondition, m is then m / denom}
        self.moments = {}

    def frozen(self):
        """True once v is frozen (the warm-up is over)."""
        return self.step >= self.dense_steps

    def _slots(self, bucket, buf):
        """[(parameter, flat slice of buf)] in the bucket's layout."""
        out, at = [], 0
        for p in bucket.parameters():
            n = p.numel()
            out.append((p, buf[at:at + n]))
            at += n
        if at != buf.numel():
            raise GradcompError(7, "gradcomp.adam: bucket %d holds %d elements but its parameters "
                                   "%d" % (bucket.index(), buf.numel(), at))
        return out

    def _moment(self, p):
        s = self.moments.get(p)
        if s is None:
            z = torch.zeros(p.numel(), dtype=torch.float32)
            s = self.moments[p] = {"m": z, "v": z.clone()}
        return s

    def _freeze(self, s):
        """Once, at the first step after the warm-up: denom = sqrt(v_hat) +
        eps from the last warm-up step's v. Coordinates that never had a
        gradient in the warm-up (v == 0: unused embedding rows, dead units)
        take the mean v of their tensor's other coordinates (else of every
        parameter's), so that their first gradient is not divided by eps."""
        if "denom" in s:
            return s["denom"]
        v = s["v"].clone()  # s["v"] stays what the warm-up left
        zero = v == 0
        if zero.any():
            if not zero.all():
                fill = v[~zero].mean()
            else:
                vs = [o["v"] for o in self.moments.values() if (o["v"] != 0).any()]  # noqa
                fill = torch.cat([x[x != 0] for x in vs]).mean() if vs else None
            if fill is not None:
                v[zero] = fill
        s["denom"] = (v / (1.0 - self.betas[1] ** self.dense_steps)).sqrt_().add_(self.eps)
        if self.precondition:
            s["m"].div_(s["denom"])
        return s["denom"]

    def _direction(self, s, step, out):
        """out <- m_hat / (sqrt(v_hat) + eps) for Adam step `step` (0-based)."""
        b1, b2 = self.betas
        m_hat = s["m"] / (1.0 - b1 ** (step + 1))
        if "denom" not in s:  # the warm-up: Adam's
            denom = (s["v"] / (1.0 - b2 ** (step + 1))).sqrt_().add_(self.eps)
            m_hat.div_(denom)
        elif not self.precondition:
            m_hat.div_(s["denom"])
        out.copy_(m_hat)


def adam_hook(state, bucket):
    """DDP communication hook for AdamState: returns Adam's preconditioned
    direction (the same on every rank) in the bucket; use it with
    PreconditionedAdamW."""
    if not isinstance(state, AdamState):
        raise GradcompError(1, "gradcomp.adam.adam_hook: the state must be a "
                               "gradcomp.adam.AdamState, got %s" % type(state).__name__)
    step = state.step  # allreduce_hook advances it at the last bucket
    buf = bucket.buffer()
    slots = state._slots(bucket, buf)
    b1, b2 = state.betas
    frozen = step >= state.dense_steps
    momentum = frozen and state.compress == "momentum"
    if frozen:  # what each rank hands to the compressed allreduce
        for p, g in slots:
            s = state._moment(p)
            denom = state._freeze(s)
            if state.precondition:
                g.div_(denom.to(g.dtype))
            if momentum:  # the local momentum (1-bit Adam)
                g.mul_(1.0 - b1).add_(s["m"].to(g.dtype), alpha=b1)
    fut = allreduce_hook(state, bucket)

    def finish(f):
        avg = f.value()
        if isinstance(avg, (list, tuple)):
            avg = avg[0]
        for p, seg in state._slots(bucket, avg):
            s = state._moment(p)
            g = seg.float()
            if momentum:
                s["m"].copy_(g)
            else:
                s["m"].mul_(b1).add_(g, alpha=1.0 - b1)
                if not frozen:
                    s["v"].mul_(b2).addcmul_(g, g, value=1.0 - b2)
            if seg.dtype == torch.float32:
                state._direction(s, step, seg)
            else:
                d = torch.empty_like(g)
                state._direction(s, step, d)
                seg.copy_(d)
        return avg
    return fut.then(finish)


class PreconditionedAdamW(torch.optim.Optimizer):
    """The step after adam_hook: p <- p (1 - lr weight_decay) - lr p.grad
    (p.grad already holds Adam's direction). Parameter groups, lr and
    weight_decay as torch.optim.AdamW; no state of its own."""

    def __init__(self, params, lr=1e-3, weight_decay=0.01):
        if lr < 0 or weight_decay < 0:
            raise ValueError("lr and weight_decay must be >= 0")
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, wd = group["lr"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if wd:
                    p.mul_(1.0 - lr * wd)
                p.add_(p.grad, alpha=-lr)
        return loss
