class Optimizer(Module):
  __parameters__ = []
  __buffers__ = []
  training : bool
  def gradient_norm(self: __torch__.Optimizer, params: List[Tensor]) -> float:
    # torch.nn.utils.clip_grad_norm_'s norm: the norm of the per-tensor norms; summed in float64
    grads = annotate(List[Tensor], [])
    for p in params:
      g = p.grad
      if g is not None:
        grads.append(g)
    if len(grads) == 0:
      return 0.
    norms = torch.stack(torch._foreach_norm(grads, 2.)).double()
    return float(torch.sqrt(torch.sum(norms * norms)).item())
  def adamw(self: __torch__.Optimizer, params: List[Tensor], exp_avgs: List[Tensor], exp_avg_sqs: List[Tensor],
      hyper: List[float]) -> int:
    # hyper: update number (1-based), lr, beta1, beta2, eps, weight decay, gradient scale. torch.optim.AdamW's
    # own fused kernel; parameters without a gradient are skipped, as torch skips them; gradients are zeroed.
    ps = annotate(List[Tensor], [])
    gs = annotate(List[Tensor], [])
    ms = annotate(List[Tensor], [])
    vs = annotate(List[Tensor], [])
    for i in range(len(params)):
      g = params[i].grad
      if g is not None:
        ps.append(params[i])
        gs.append(g)
        ms.append(exp_avgs[i])
        vs.append(exp_avg_sqs[i])
    if len(ps) == 0:
      return 0
    if hyper[6] != 1.:
      torch._foreach_mul_(gs, hyper[6])
    if hyper[5] != 0.:
      # decoupled decay as w - w·lr·wd, rounded once; the kernel's w·(1 - lr·wd) rounds the factor as well, and
      # over a few steps drifts by an ulp from the exact decay that GrpoObjectiveTest checks
      torch._foreach_sub_(ps, torch._foreach_mul(ps, hyper[1] * hyper[5]))
    step = torch.full(annotate(List[int], []), hyper[0])
    steps = annotate(List[Tensor], [])
    for p in ps:
      steps.append(step)
    torch._fused_adamw_(ps, gs, ms, vs, annotate(List[Tensor], []), steps, lr=hyper[1], beta1=hyper[2],
        beta2=hyper[3], weight_decay=0., eps=hyper[4], amsgrad=False, maximize=False)
    # one zero_ per gradient: a _foreach_zero_ here, after the fused kernel, left them unchanged in 2.7.1
    for g in gs:
      g.zero_()
    return len(ps)
  def sgd(self: __torch__.Optimizer, params: List[Tensor], hyper: List[float]) -> int:
    # hyper: lr, weight decay, gradient scale. torch.optim.SGD's foreach path without momentum: the decay is added
    # to the gradient, then one step against it; parameters without a gradient are skipped; gradients are zeroed.
    ps = annotate(List[Tensor], [])
    gs = annotate(List[Tensor], [])
    for p in params:
      g = p.grad
      if g is not None:
        ps.append(p)
        gs.append(g)
    if len(ps) == 0:
      return 0
    if hyper[2] != 1.:
      torch._foreach_mul_(gs, hyper[2])
    steps = gs
    if hyper[1] != 0.:
      steps = torch._foreach_add(gs, ps, alpha=hyper[1])
    torch._foreach_add_(ps, steps, alpha=-hyper[0])
    for g in gs:
      g.zero_()
    return len(ps)
  def zero_gradients(self: __torch__.Optimizer, params: List[Tensor]) -> int:
    grads = annotate(List[Tensor], [])
    for p in params:
      g = p.grad
      if g is not None:
        g.zero_()
        grads.append(g)
    return len(grads)
