class SftLoss(Module):
  __parameters__ = []
  __buffers__ = []
  training : bool
  def forward(self: __torch__.SftLoss, logits: Tensor, targets: Tensor, weights: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    # Σ weights·(-log softmax(logits)[targets]) (a 0-dim loss), and per position the entropy of the prediction and
    # whether the target is its argmax. Under a gradient the loss back-propagates weights·(softmax - onehot).
    gradient = torch.is_grad_enabled() and logits.requires_grad
    factor = torch.reshape(torch.detach(logits), [-1, torch.size(logits, -1)])
    scored = __torch__.scores(factor, torch.reshape(targets, [-1]), torch.reshape(weights, [-1]), gradient, False)
    loss = torch.neg(torch.sum(torch.mul(torch.reshape(scored[0], torch.size(weights)), weights)))
    if gradient:
      # value + (s - s) is exactly the value, and its gradient is the factor, which now sits in the logits'
      # storage: backward is one multiply, where log-softmax's and gather's made a zero-filled scatter and an exp
      # pass. (The view of the logits is taken only now: one taken before the factor was written would be
      # replayed as an as_strided view in backward, which zero-fills a copy of the whole gradient.)
      surrogate = torch.dot(torch.reshape(logits, [-1]), torch.reshape(factor, [-1]))
      loss = torch.add(loss, torch.sub(surrogate, torch.detach(surrogate)))
    shape = torch.size(weights)
    return (loss, torch.reshape(scored[1], shape), torch.reshape(scored[2], shape))
class HeadSftLoss(Module):
  __parameters__ = []
  __buffers__ = []
  training : bool
  def forward(self: __torch__.HeadSftLoss, normed: Tensor, weight: Tensor, targets: Tensor, weights: Tensor, chunk: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    # SftLoss with the LM head (logits = normed·weightᵀ) inside, over chunks of `chunk` rows: the logits of one
    # chunk at a time, made without a graph in one reused buffer, so the whole [N, V] array never exists (for a
    # 32,000 vocabulary at 2,048 tokens it was 262 MB, and as much again for its gradient). The head's gradients are
    # taken while a chunk's logits hold their loss's factor, weights·(softmax - onehot): d normed = factor·weight,
    # d weight = Σ factorᵀ·normed; backward only scales those [N, D] and [V, D] arrays.
    x = torch.reshape(torch.detach(normed), [-1, torch.size(normed, -1)])
    w = torch.detach(weight)
    flat_targets = torch.reshape(targets, [-1])
    flat_weights = torch.reshape(weights, [-1])
    n = torch.size(x, 0)
    rows = max(1, int(chunk))
    gradient = torch.is_grad_enabled() and (normed.requires_grad or weight.requires_grad)
    trained_weight = gradient and weight.requires_grad
    buffer = x.new_empty([min(rows, n), torch.size(w, 0)])
    weight_gradient = torch.empty([0])
    logps = annotate(List[Tensor], [])
    entropies = annotate(List[Tensor], [])
    corrects = annotate(List[Tensor], [])
    input_gradients = annotate(List[Tensor], [])
    for start in range(0, n, rows):
      end = min(start + rows, n)
      xc = torch.slice(x, 0, start, end)
      logits = torch.slice(buffer, 0, 0, end - start)
      torch.mm(xc, torch.t(w), out=logits)
      scored = __torch__.scores(logits, torch.slice(flat_targets, 0, start, end), torch.slice(flat_weights, 0, start, end), gradient, False)
      logps.append(scored[0])
      entropies.append(scored[1])
      corrects.append(scored[2])
      if gradient:
        input_gradients.append(torch.mm(logits, w))
        if trained_weight:
          # the first chunk's product is the sum so far: no zero-filled [V, D] to add it to
          if start == 0:
            weight_gradient = torch.mm(torch.t(logits), xc)
          else:
            weight_gradient.addmm_(torch.t(logits), xc)
    shape = torch.size(weights)
    loss = torch.neg(torch.sum(torch.mul(torch.reshape(torch.cat(logps), shape), weights)))
    if gradient:
      surrogate = torch.dot(torch.reshape(normed, [-1]), torch.reshape(torch.cat(input_gradients), [-1]))
      if trained_weight:
        surrogate = torch.add(surrogate, torch.dot(torch.reshape(weight, [-1]), torch.reshape(weight_gradient, [-1])))
      loss = torch.add(loss, torch.sub(surrogate, torch.detach(surrogate)))
    return (loss, torch.reshape(torch.cat(entropies), shape), torch.reshape(torch.cat(corrects), shape))
class TokenLogProbs(Module):
  __parameters__ = []
  __buffers__ = []
  training : bool
  def forward(self: __torch__.TokenLogProbs, logits: Tensor, targets: Tensor, weights: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    # weights·log softmax(logits)[targets] per position (with its gradient), then per position the entropy, whether
    # the target is the argmax, and the mean logit over the vocabulary.
    gradient = torch.is_grad_enabled() and logits.requires_grad
    factor = torch.reshape(torch.detach(logits), [-1, torch.size(logits, -1)])
    scored = __torch__.scores(factor, torch.reshape(targets, [-1]), torch.reshape(weights, [-1]), gradient, True)
    logp = torch.mul(torch.reshape(scored[0], torch.size(weights)), weights)
    if gradient:
      # d logp / d logits = weights·(onehot - softmax) = -factor, as in SftLoss but per position
      rows = torch.sum(torch.mul(torch.reshape(logits, torch.size(factor)), factor), [-1])
      surrogate = torch.reshape(rows, torch.size(weights))
      logp = torch.add(logp, torch.sub(torch.detach(surrogate), surrogate))
    shape = torch.size(weights)
    return (logp, torch.reshape(scored[1], shape), torch.reshape(scored[2], shape), torch.reshape(scored[3], shape))
class HeadTokenLogProbs(Module):
  __parameters__ = []
  __buffers__ = []
  training : bool
  def forward(self: __torch__.HeadTokenLogProbs, normed: Tensor, weight: Tensor, targets: Tensor, weights: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    # TokenLogProbs with the LM head inside, as HeadSftLoss is SftLoss's. Each position's upstream gradient is known
    # only in backward, so the head's gradients stay in the graph: the surrogate Σ_d normed·(factor·weight) equals
    # Σ_v logits·factor per position, and backward gives normed its gradient from the kept [N, D] product and, when
    # the weight is trained, the weight its own from the factor (then kept).
    x = torch.reshape(torch.detach(normed), [-1, torch.size(normed, -1)])
    gradient = torch.is_grad_enabled() and (normed.requires_grad or weight.requires_grad)
    factor = torch.mm(x, torch.t(torch.detach(weight)))
    scored = __torch__.scores(factor, torch.reshape(targets, [-1]), torch.reshape(weights, [-1]), gradient, True)
    logp = torch.mul(torch.reshape(scored[0], torch.size(weights)), weights)
    if gradient:
      rows = torch.sum(torch.mul(torch.reshape(normed, torch.size(x)), torch.mm(factor, weight)), [-1])
      surrogate = torch.reshape(rows, torch.size(weights))
      logp = torch.add(logp, torch.sub(torch.detach(surrogate), surrogate))
    shape = torch.size(weights)
    return (logp, torch.reshape(scored[1], shape), torch.reshape(scored[2], shape), torch.reshape(scored[3], shape))
def scores(x: Tensor, targets: Tensor, weights: Tensor, gradient: bool, mean_logit: bool) -> List[Tensor]:
  # x [N, V] (no graph), targets [N], weights [N]: per row log softmax(x)[target], the entropy of softmax(x), 1.
  # where the target is the argmax (the lowest index among equal maxima, as torch.argmax), the mean of x. One exp
  # per logit, worked through in chunks of rows that stay in cache. When gradient, x is overwritten with
  # weights·(softmax(x) - onehot(target)): its gradient factor, so the step allocates no second [N, V] array.
  n = torch.size(x, 0)
  v = torch.size(x, 1)
  rows = max(1, 1048576 // v)
  exps = x.new_empty([min(rows, n), v])
  shifted = x.new_empty([min(rows, n), v])
  targets2 = torch.unsqueeze(targets, 1)
  weights2 = torch.unsqueeze(weights, 1)
  logps = annotate(List[Tensor], [])
  entropies = annotate(List[Tensor], [])
  corrects = annotate(List[Tensor], [])
  means = annotate(List[Tensor], [])
  for start in range(0, n, rows):
    end = min(start + rows, n)
    xc = torch.slice(x, 0, start, end)
    tc = torch.slice(targets2, 0, start, end)
    e = torch.slice(exps, 0, 0, end - start)
    b = torch.slice(shifted, 0, 0, end - start)
    if mean_logit:
      means.append(torch.mean(xc, [1]))
    xt = torch.gather(xc, 1, tc)
    # the largest other logit, with the target's own hidden for a moment
    torch.scatter_(xc, 1, tc, -inf)
    other = torch.amax(xc, [1], True)
    torch.scatter_(xc, 1, tc, xt)
    top = torch.maximum(other, xt)
    torch.sub(xc, top, out=b)
    torch.exp(b, out=e)
    total = torch.sum(e, [1], True)
    torch.mul_(b, e)
    log_total = torch.log(total)
    logps.append(torch.sub(torch.sub(xt, top), log_total))
    # -Σ p·log p with p = e/total and log p = b - log total
    entropies.append(torch.sub(log_total, torch.div(torch.sum(b, [1], True), total)))
    correct = torch.gt(xt, other)
    tied = torch.eq(xt, other)
    if bool(torch.any(tied)):
      # the target shares the maximum with another token: correct only if it has the lowest index
      tied_rows = torch.squeeze(torch.nonzero(torch.squeeze(tied, 1)), 1)
      first = torch.argmax(torch.index_select(xc, 0, tied_rows), 1, True)
      correct = torch.index_put(correct, [tied_rows], torch.eq(first, torch.index_select(tc, 0, tied_rows)))
    corrects.append(correct)
    if gradient:
      wc = torch.slice(weights2, 0, start, end)
      torch.mul(e, torch.div(wc, total), out=xc)
      torch.scatter_add_(xc, 1, tc, torch.neg(wc))
  out = [torch.squeeze(torch.cat(logps), 1), torch.squeeze(torch.cat(entropies), 1),
      torch.to(torch.squeeze(torch.cat(corrects), 1), 6)]
  if mean_logit:
    out.append(torch.cat(means))
  return out
