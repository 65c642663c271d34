package dev.finetune.trainers.train;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import java.util.List;

/**
 * Prompt + completion sequences laid out for one forward pass, right-padded, and which next-token predictions
 * belong to a completion: what DPO and GRPO score (the log-probability of the completion given the prompt).
 *
 * <p>{@code targets[r, t]} is the token at {@code t + 1} and {@code completionMask[r, t]} is 1 exactly when that
 * token is part of row {@code r}'s completion; both are built in Java so the graph holds no op on them.
 */
public record CompletionRows(int rows, int columns, long[] inputIds, long[] positionIds, long[] segmentIds,
        long[] targets, float[] completionMask, int[] completionLengths) {

    /**
     * Row {@code i} is {@code prompts[i] ++ completions[i]}, right-padded with {@code padId} (never attended to:
     * padding has segment 0); every prompt needs at least one token.
     */
    public static CompletionRows of(List<long[]> prompts, List<long[]> completions, int padId) {
        if (prompts.size() != completions.size() || prompts.isEmpty()) {
            throw new IllegalArgumentException(prompts.size() + " prompts for " + completions.size() + " completions");
        }
        int rows = prompts.size();
        int columns = 1;
        for (int r = 0; r < rows; r++) {
            if (prompts.get(r).length == 0) {
                throw new IllegalArgumentException("row " + r + " has an empty prompt");
            }
            columns = Math.max(columns, prompts.get(r).length + completions.get(r).length);
        }
        long[] ids = new long[rows * columns];
        long[] positions = new long[rows * columns];
        long[] segments = new long[rows * columns];
        long[] targets = new long[rows * columns];
        float[] mask = new float[rows * columns];
        int[] lengths = new int[rows];
        java.util.Arrays.fill(ids, padId);
        for (int r = 0; r < rows; r++) {
            long[] prompt = prompts.get(r);
            long[] completion = completions.get(r);
            int length = prompt.length + completion.length;
            lengths[r] = completion.length;
            for (int t = 0; t < length; t++) {
                int i = r * columns + t;
                ids[i] = t < prompt.length ? prompt[t] : completion[t - prompt.length];
                positions[i] = t;
                segments[i] = 1;
            }
            for (int t = prompt.length - 1; t + 1 < length; t++) {
                int i = r * columns + t;
                targets[i] = completion[t + 1 - prompt.length];
                mask[i] = 1f;
            }
        }
        return new CompletionRows(rows, columns, ids, positions, segments, targets, mask, lengths);
    }

    /** Real (non-padding) tokens. */
    public long tokenCount() {
        long tokens = 0;
        for (long segment : segmentIds) {
            tokens += segment != 0 ? 1 : 0;
        }
        return tokens;
    }

    public ModelInputs inputs(NDManager manager) {
        Shape shape = new Shape(rows, columns);
        return new ModelInputs(manager.create(inputIds, shape), manager.create(positionIds, shape),
                manager.create(segmentIds, shape));
    }

    /**
     * {@code log p(completion token | everything before it)} for {@code logits [rows, columns, V]}: {@code [rows,
     * columns]}, exactly 0 outside the completions (and so with exactly zero gradient there). Consumes logits that
     * carry a gradient ({@link TokenScores}); {@link #score} gives the token statistics from the same pass.
     */
    public NDArray tokenLogProbs(NDArray logits, NDManager manager) {
        return score(logits, manager).logProbs();
    }

    /**
     * Per row, over its completion tokens: the summed entropy of the next-token distribution, the summed mean
     * logit over the vocabulary, and how many targets are the argmax (TRL's {@code entropy},
     * {@code logits/*} and {@code mean_token_accuracy} before averaging).
     */
    public record Stats(double[] entropy, double[] meanLogit, long[] correct) {}

    /** {@link #tokenLogProbs} and the {@link Stats} of the same logits, read in one pass. */
    public record Scored(NDArray logProbs, Stats stats) {}

    public Scored score(NDArray logits, NDManager manager) {
        return scored(TokenScores.perToken(logits, targets, completionMask, manager));
    }

    /** {@link #score} of the logits {@code forward} makes of these rows' {@code inputs}, as the model prefers. */
    public Scored score(ForwardPass forward, ModelInputs inputs, NDManager manager) {
        return scored(forward.perToken(inputs, targets, completionMask, manager));
    }

    private Scored scored(TokenScores.PerToken scored) {
        double[] entropySum = new double[rows];
        double[] logitSum = new double[rows];
        long[] correct = new long[rows];
        for (int r = 0; r < rows; r++) {
            for (int t = 0; t < columns; t++) {
                int i = r * columns + t;
                if (completionMask[i] != 0) {
                    entropySum[r] += scored.entropy()[i];
                    logitSum[r] += scored.meanLogit()[i];
                    correct[r] += scored.correct()[i] != 0 ? 1 : 0;
                }
            }
        }
        return new Scored(scored.logProbs(), new Stats(entropySum, logitSum, correct));
    }

    /** The completion mask as an array {@code [rows, columns]}. */
    public NDArray mask(NDManager manager) {
        return manager.create(completionMask, new Shape(rows, columns));
    }
}
