package dev.finetune.trainers.generation;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.NDScope;
import ai.djl.ndarray.index.NDIndex;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.pytorch.jni.JniUtils;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.model.DecoderLayer;
import dev.finetune.trainers.model.KvCache;
import dev.finetune.trainers.model.LlamaModel;
import dev.finetune.trainers.model.RotaryEmbedding;
import java.nio.LongBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;

/**
 * Continues a batch of prompts with a KV cache: the prompts are run once, then each new token costs one position.
 *
 * <p>Prompts of different lengths are left-padded into one batch. Padding slots get a segment of their own, so no
 * real token attends to them, and every real token keeps its true position (0 at its row's first token), so a
 * padded row computes exactly what it would alone. Each step runs in its own {@link NDScope}; only the cache lives
 * across steps. Runs with autograd off whatever the calling thread had.
 */
public final class Generator {
    private final LlamaModel model;
    private final Sampler sampler;

    public Generator(LlamaModel model) {
        this.model = model;
        this.sampler = new Sampler(model.scalars());
    }

    /** Generates for every prompt (each at least one token) and returns one completion per prompt, in order. */
    public List<Completion> generate(List<long[]> prompts, GenerationSettings settings) {
        return run(prompts, settings, true);
    }

    /**
     * The same result computed the slow way, re-running the whole sequence for every new token: the yardstick the
     * cache is tested and measured against.
     */
    public List<Completion> generateWithoutCache(List<long[]> prompts, GenerationSettings settings) {
        return run(prompts, settings, false);
    }

    private List<Completion> run(List<long[]> prompts, GenerationSettings settings, boolean cached) {
        Batch batch = Batch.of(prompts, settings.maxNewTokens(), model.config().vocabSize());
        boolean gradMode = JniUtils.isGradMode();
        JniUtils.setGradMode(false);
        try (NDManager scratch = model.manager().newSubManager()) {
            // Stays open (and so keeps its Java buffer alive) until the generation ends.
            NDArray slotSegments = scratch.create(batch.slotSegments, new Shape(batch.rows, batch.capacity));
            NDArray slotNumbers = scratch.arange(0, batch.capacity, 1, DataType.INT64);
            KvCache cache = cached ? model.newCache(scratch, batch.rows, batch.capacity) : null;
            // A new token may attend to every filled slot except padding, so one row of the mask serves all decode steps.
            NDArray afterEverySlot = scratch.full(new Shape(1), batch.capacity, DataType.INT64);
            NDArray realTokens = scratch.zeros(new Shape(batch.rows, 1), DataType.INT64);
            NDArray keyMask = model.mask(afterEverySlot, slotNumbers, realTokens, slotSegments);
            SplittableRandom random = new SplittableRandom(settings.seed());
            Rows rows = new Rows(batch.rows, settings);
            long[] next;
            try (NDScope prompt = new NDScope()) {
                NDArray lastLogits = cached
                        ? prefill(prompts, settings, batch, slotNumbers, slotSegments, cache)
                        : fullStep(batch, batch.promptWidth, batch.promptIds, slotSegments);
                rows.lastPromptLogits = lastLogits.toFloatArray();
                next = sampler.choose(lastLogits, settings, random, rows.history(prompts));
            }
            long[] sequence = Arrays.copyOf(batch.promptIds, batch.promptIds.length);
            for (int step = 0; ; step++) {
                rows.append(next);
                if (rows.allDone() || step + 1 == settings.maxNewTokens()) {
                    break;
                }
                int slot = batch.promptWidth + step;
                try (NDScope scope = new NDScope()) {
                    NDArray lastLogits;
                    if (cached) {
                        lastLogits = decodeStep(batch, slot, next, keyMask, slotNumbers, slotSegments, cache);
                    } else {
                        sequence = batch.extend(sequence, slot, next);
                        lastLogits = fullStep(batch, slot + 1, sequence, slotSegments);
                    }
                    next = sampler.choose(lastLogits, settings, random, rows.history(prompts));
                }
            }
            return rows.completions();
        } finally {
            JniUtils.setGradMode(gradMode);
        }
    }

    /**
     * Runs the prompts through the cache and returns the logits after each, {@code [B, V]}. A prompt that several
     * rows share (GRPO samples a group of completions per prompt) runs once; its keys and values are copied to
     * every row that has it.
     */
    private NDArray prefill(List<long[]> prompts, GenerationSettings settings, Batch batch, NDArray slotNumbers, NDArray slotSegments,
            KvCache cache) {
        Map<LongBuffer, Integer> firstRow = new HashMap<>();
        List<long[]> distinct = new ArrayList<>();
        long[] distinctOfRow = new long[prompts.size()];
        for (int r = 0; r < prompts.size(); r++) {
            Integer known = firstRow.putIfAbsent(LongBuffer.wrap(prompts.get(r)), distinct.size());
            if (known == null) {
                distinct.add(prompts.get(r));
            }
            distinctOfRow[r] = known == null ? distinct.size() - 1 : known;
        }
        if (distinct.size() == prompts.size()) {
            return cachedStep(batch, 0, batch.promptWidth, batch.promptIds, slotNumbers, slotSegments, cache);
        }
        Batch shared = Batch.of(distinct, settings.maxNewTokens(), model.config().vocabSize());
        NDManager step = slotNumbers.getManager();
        NDArray sharedSegments = step.create(shared.slotSegments, new Shape(shared.rows, shared.capacity));
        NDArray rows = step.create(distinctOfRow);
        try (KvCache promptCache = model.newCache(step, shared.rows, shared.promptWidth)) {
            NDArray logits = cachedStep(shared, 0, shared.promptWidth, shared.promptIds, slotNumbers, sharedSegments, promptCache);
            cache.copyRowsFrom(promptCache, rows);
            return logits.get(new NDIndex("{}", rows));
        }
    }

    /** Runs {@code width} new slots from {@code from} through the cache; returns the logits of the last one, {@code [B, V]}. */
    private NDArray cachedStep(Batch batch, int from, int width, long[] ids, NDArray slotNumbers, NDArray slotSegments, KvCache cache) {
        NDManager step = slotNumbers.getManager();
        NDArray idArray = step.create(ids, new Shape(batch.rows, width));
        NDArray positions = step.create(batch.positions(from, width), new Shape(batch.rows, width));
        NDArray querySlots = slotNumbers.get(new NDIndex(from + ":" + (from + width)));
        NDArray keySlots = slotNumbers.get(new NDIndex("0:" + (from + width)));
        NDArray mask = model.mask(querySlots, keySlots, slotSegments.get(new NDIndex(":, " + from + ":" + (from + width))),
                slotSegments.get(new NDIndex(":, 0:" + (from + width))));
        NDArray hidden = model.hiddenWithCache(idArray, positions, mask, cache);
        return lastLogits(hidden);
    }

    /**
     * One new token per row at {@code slot}: the precomputed key mask restricted to the filled slots is all it needs,
     * unless a sliding window moves with the new token.
     */
    private NDArray decodeStep(Batch batch, int slot, long[] next, NDArray keyMask, NDArray slotNumbers,
            NDArray slotSegments, KvCache cache) {
        NDManager step = keyMask.getManager();
        NDArray idArray = step.create(next, new Shape(batch.rows, 1));
        NDArray positions = step.create(batch.positions(slot, 1), new Shape(batch.rows, 1));
        NDArray filled = slotNumbers.get(new NDIndex("0:" + (slot + 1)));
        // keyMask is a query after every slot: with a window it would hide the early slots, so the window's mask is made anew
        NDArray mask = model.config().slidingWindow() == null ? keyMask.get(new NDIndex(":, :, :, 0:" + (slot + 1)))
                : model.mask(slotNumbers.get(new NDIndex(slot + ":" + (slot + 1))), filled,
                        step.zeros(new Shape(batch.rows, 1), DataType.INT64), slotSegments.get(new NDIndex(":, 0:" + (slot + 1))));
        return lastLogits(model.hiddenWithCache(idArray, positions, mask, cache));
    }

    /** The whole sequence again; only the head of the last position is computed, as a sensible uncached decoder would. */
    private NDArray fullStep(Batch batch, int width, long[] ids, NDArray slotSegments) {
        NDManager step = slotSegments.getManager();
        NDArray idArray = step.create(ids, new Shape(batch.rows, width));
        NDArray positions = step.create(batch.positions(0, width), new Shape(batch.rows, width));
        NDArray hidden = model.embed(idArray);
        RotaryEmbedding.Angles angles = model.rotary().at(positions);
        NDArray mask = model.attentionMask(idArray, slotSegments.get(new NDIndex(":, 0:" + width)));
        for (DecoderLayer layer : model.layers()) {
            hidden = layer.infer(hidden, angles, mask, null);
        }
        return lastLogits(hidden);
    }

    private NDArray lastLogits(NDArray hidden) {
        return model.inferHead(hidden.get(new NDIndex(":, -1:, :"))).squeeze(1);
    }

    /** The left-padded layout of a batch: which slot holds what. */
    private static final class Batch {
        final int rows;
        final int promptWidth;
        final int capacity;
        final int[] promptLengths;
        final long[] promptIds;
        final long[] slotSegments;

        private Batch(int rows, int promptWidth, int capacity, int[] promptLengths, long[] promptIds, long[] slotSegments) {
            this.rows = rows;
            this.promptWidth = promptWidth;
            this.capacity = capacity;
            this.promptLengths = promptLengths;
            this.promptIds = promptIds;
            this.slotSegments = slotSegments;
        }

        static Batch of(List<long[]> prompts, int maxNewTokens, int vocabSize) {
            if (prompts.isEmpty()) {
                throw new UserError("prompts", "no prompt given", "give at least one prompt");
            }
            int rows = prompts.size();
            int width = 0;
            int[] lengths = new int[rows];
            for (int r = 0; r < rows; r++) {
                long[] p = prompts.get(r);
                if (p.length == 0) {
                    throw new UserError("prompt " + (r + 1), "empty prompt", "a prompt needs at least one token (usually BOS)");
                }
                for (long id : p) {
                    if (id < 0 || id >= vocabSize) {
                        throw new UserError("prompt " + (r + 1), "token id " + id + " is outside the vocabulary [0, " + vocabSize + ")",
                                "use ids from this model's tokenizer");
                    }
                }
                lengths[r] = p.length;
                width = Math.max(width, p.length);
            }
            int capacity = width + maxNewTokens;
            long[] ids = new long[rows * width];
            long[] segments = new long[rows * capacity];
            for (int r = 0; r < rows; r++) {
                int pad = width - lengths[r];
                System.arraycopy(prompts.get(r), 0, ids, r * width + pad, lengths[r]);
                for (int s = 0; s < pad; s++) {
                    // A segment per padding slot: it attends only to itself and nothing attends to it.
                    segments[r * capacity + s] = -1 - s;
                }
            }
            return new Batch(rows, width, capacity, lengths, ids, segments);
        }

        /** Position ids of slots {@code [from, from + width)}: padding at 0, real tokens counted from each row's start. */
        long[] positions(int from, int width) {
            long[] positions = new long[rows * width];
            for (int r = 0; r < rows; r++) {
                int pad = promptWidth - promptLengths[r];
                for (int i = 0; i < width; i++) {
                    positions[r * width + i] = Math.max(0, from + i - pad);
                }
            }
            return positions;
        }

        /** The full id matrix with {@code next} placed at {@code slot}, for the uncached path. */
        long[] extend(long[] sequence, int slot, long[] next) {
            int oldWidth = slot;
            long[] grown = new long[rows * (slot + 1)];
            for (int r = 0; r < rows; r++) {
                System.arraycopy(sequence, r * oldWidth, grown, r * (slot + 1), oldWidth);
                grown[r * (slot + 1) + slot] = next[r];
            }
            return grown;
        }
    }

    /** Per-row outputs and stop bookkeeping, in Java. */
    private static final class Rows {
        final GenerationSettings settings;
        final List<List<Long>> tokens = new ArrayList<>();
        final Completion.Stop[] stops;
        float[] lastPromptLogits;

        Rows(int count, GenerationSettings settings) {
            this.settings = settings;
            this.stops = new Completion.Stop[count];
            for (int r = 0; r < count; r++) {
                tokens.add(new ArrayList<>());
            }
        }

        /** Each row's prompt and tokens so far; only built when the repetition penalty needs it. */
        List<long[]> history(List<long[]> prompts) {
            if (settings.repetitionPenalty() == 1f) {
                return List.of();
            }
            List<long[]> out = new ArrayList<>(tokens.size());
            for (int r = 0; r < tokens.size(); r++) {
                long[] prompt = prompts.get(r);
                long[] all = Arrays.copyOf(prompt, prompt.length + tokens.get(r).size());
                for (int i = 0; i < tokens.get(r).size(); i++) {
                    all[prompt.length + i] = tokens.get(r).get(i);
                }
                out.add(all);
            }
            return out;
        }

        void append(long[] next) {
            for (int r = 0; r < next.length; r++) {
                if (stops[r] != null) {
                    continue;
                }
                List<Long> row = tokens.get(r);
                row.add(next[r]);
                if (settings.eosIds().contains(next[r])) {
                    stops[r] = Completion.Stop.EOS;
                } else if (endsWithStopSequence(row)) {
                    stops[r] = Completion.Stop.STOP_SEQUENCE;
                } else if (row.size() == settings.maxNewTokens()) {
                    stops[r] = Completion.Stop.MAX_NEW_TOKENS;
                }
            }
        }

        private boolean endsWithStopSequence(List<Long> row) {
            for (long[] stop : settings.stopSequences()) {
                if (stop.length == 0 || stop.length > row.size()) {
                    continue;
                }
                boolean match = true;
                for (int i = 0; i < stop.length && match; i++) {
                    match = row.get(row.size() - stop.length + i) == stop[i];
                }
                if (match) {
                    return true;
                }
            }
            return false;
        }

        boolean allDone() {
            for (Completion.Stop s : stops) {
                if (s == null) {
                    return false;
                }
            }
            return true;
        }

        List<Completion> completions() {
            int vocab = lastPromptLogits.length / stops.length;
            List<Completion> out = new ArrayList<>();
            for (int r = 0; r < stops.length; r++) {
                long[] ids = tokens.get(r).stream().mapToLong(Long::longValue).toArray();
                out.add(new Completion(ids, stops[r] == null ? Completion.Stop.MAX_NEW_TOKENS : stops[r],
                        Arrays.copyOfRange(lastPromptLogits, r * vocab, (r + 1) * vocab)));
            }
            return out;
        }
    }
}
