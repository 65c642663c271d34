package dev.finetune.trainers.train;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import dev.finetune.recipes.plan.Kernels;
import dev.finetune.trainers.model.TorchScript;
import java.util.HashMap;
import java.util.Map;

/**
 * Everything the objectives read from the logits {@code [B, T, V]} after the LM head, in one compiled module
 * ({@code token_scores.py}): the target tokens' log-probabilities, with their gradient, and the token metrics
 * (entropy of the prediction, whether the target is its argmax, the mean logit).
 *
 * <p>The logits are the step's largest array, and every pass over them counts: log-softmax, gather, the metrics
 * and the backward of log-softmax and gather made seven full passes and five fresh {@code [B, T, V]} allocations
 * (filling a fresh array that size costs about twice filling a reused one: page faults). The module makes one exp
 * per logit, works
 * through rows in chunks that stay in cache, and writes the loss's gradient factor {@code weights·(softmax -
 * onehot)} into the logits' own storage; backward then writes the logits' gradient in one pass.
 *
 * <p>So under a gradient <b>the logits are consumed</b>: after a call, their storage holds that factor and must not
 * be read. Without a gradient (reference log-probabilities) they are left as they were.
 */
public final class TokenScores {
    private static final String SOURCE = "/dev/finetune/trainers/train/token_scores.py";
    /** Compiled once per process, like code, and kept for its lifetime. */
    private static final Map<String, TorchScript> COMPILED = new HashMap<>();

    private TokenScores() {}

    /**
     * {@code loss}: 0-dim, Σ weights·(-log softmax(logits)[targets]); {@code entropy} and {@code correct} (1 where
     * the target is the argmax, the lowest index among equal maxima as with {@code argmax}) per position, in
     * {@code [B, T]} row-major order.
     */
    public record Sft(NDArray loss, float[] entropy, float[] correct) {}

    /**
     * {@code logProbs [B, T]}: weights·log softmax(logits)[targets]; then per position the entropy, the argmax
     * hit as in {@link Sft} and the mean logit over the vocabulary.
     */
    public record PerToken(NDArray logProbs, float[] entropy, float[] correct, float[] meanLogit) {}

    /**
     * {@code targets} and {@code weights} hold one value per position of {@code logits}' first two dimensions;
     * a position with weight 0 gets exactly zero gradient (its target must still be a valid index).
     */
    public static Sft sft(NDArray logits, long[] targets, float[] weights, NDManager manager) {
        return sft(script("SftLoss").forward(inputs(logits, targets, weights, manager)));
    }

    /**
     * {@link #sft} of the logits {@code normed · headWeightᵀ}, with the LM head inside: {@code normed [B, T, D]}
     * (after the final norm), {@code headWeight [V, D]} (tied embedding or {@code lm_head}). The logits never enter
     * the graph, and only a chunk of them exists at a time; the head's gradients are taken from each chunk while it
     * holds the loss's gradient factor, so backward writes no {@code [B, T, V]} array.
     */
    public static Sft sftThroughHead(NDArray normed, NDArray headWeight, long[] targets, float[] weights,
            NDManager manager) {
        return sftThroughHead(normed, headWeight, targets, weights, manager,
                Kernels.headChunkRows(headWeight.getShape().get(0)));
    }

    /** {@link #sftThroughHead} over chunks of {@code chunkRows} positions. */
    static Sft sftThroughHead(NDArray normed, NDArray headWeight, long[] targets, float[] weights,
            NDManager manager, long chunkRows) {
        Shape shape = new Shape(normed.getShape().get(0), normed.getShape().get(1));
        return sft(script("HeadSftLoss").forward(new NDList(normed, headWeight, manager.create(targets, shape),
                manager.create(weights, shape), manager.create(chunkRows))));
    }

    private static Sft sft(NDList out) {
        try (NDArray entropy = out.get(1); NDArray correct = out.get(2)) {
            return new Sft(out.get(0), entropy.toFloatArray(), correct.toFloatArray());
        }
    }

    public static PerToken perToken(NDArray logits, long[] targets, float[] weights, NDManager manager) {
        return perToken(script("TokenLogProbs").forward(inputs(logits, targets, weights, manager)));
    }

    /**
     * {@link #perToken} of the logits {@code normed · headWeightᵀ}, with the LM head inside as in
     * {@link #sftThroughHead}: backward writes no {@code [B, T, V]} gradient; the logits are kept for it only when
     * the head's weight is trained.
     */
    public static PerToken perTokenThroughHead(NDArray normed, NDArray headWeight, long[] targets, float[] weights,
            NDManager manager) {
        Shape shape = new Shape(normed.getShape().get(0), normed.getShape().get(1));
        return perToken(script("HeadTokenLogProbs").forward(new NDList(normed, headWeight,
                manager.create(targets, shape), manager.create(weights, shape))));
    }

    private static PerToken perToken(NDList out) {
        try (NDArray entropy = out.get(1); NDArray correct = out.get(2); NDArray mean = out.get(3)) {
            return new PerToken(out.get(0), entropy.toFloatArray(), correct.toFloatArray(), mean.toFloatArray());
        }
    }

    private static NDList inputs(NDArray logits, long[] targets, float[] weights, NDManager manager) {
        Shape shape = new Shape(logits.getShape().get(0), logits.getShape().get(1));
        return new NDList(logits, manager.create(targets, shape), manager.create(weights, shape));
    }

    private static synchronized TorchScript script(String module) {
        return COMPILED.computeIfAbsent(module, m -> TorchScript.load(SOURCE, m, NDManager.newBaseManager()));
    }
}
