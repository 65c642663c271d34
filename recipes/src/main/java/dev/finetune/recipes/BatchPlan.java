package dev.finetune.recipes;


/**
 * The batch arithmetic of a recipe, derived and never written back:
 * {@code global = micro × dataParallelRanks × accumulation}, with Axolotl's reading of {@code batch_size}
 * (micro × accumulation per rank).
 *
 * @param rows training rows when every dataset is a local file we could count, else {@code null}
 * @param generationBatch GRPO: completions per generation round, else 0
 * @param schedule the steps, warm-up and intervals estimated from {@code rows}; {@code null} when {@code rows} is
 *     unknown (the trainer computes the exact one from the batches it builds)
 * @param dataParallelRanks the resolved run's world size ({@link ResolvedRun#worldSize})
 */
public record BatchPlan(
        int micro,
        int dataParallelRanks,
        int accumulation,
        int global,
        long tokensPerStep,
        Long rows,
        int generationBatch,
        SchedulePlan schedule) {

    static BatchPlan derive(Recipe recipe, ResolvedRun run, Long rows, Problems problems, Object where) {
        Recipe.Batch b = recipe.batch();
        Integer micro = b.microBatchSize();
        Integer accumulation = b.gradientAccumulationSteps();
        Integer perRank = b.batchSize();
        int given = (micro != null ? 1 : 0) + (accumulation != null ? 1 : 0) + (perRank != null ? 1 : 0);
        boolean checkable = !problems.invalid.contains("micro_batch_size")
                && !problems.invalid.contains("gradient_accumulation_steps") && !problems.invalid.contains("batch_size")
                && withinBound(b, problems, where);
        if (!checkable) {
            // The bad value is already reported; arithmetic on a guess would only add noise.
            micro = micro == null ? 1 : micro;
            accumulation = accumulation == null ? 1 : accumulation;
            perRank = null;
            given = 3;
        }
        if (given < 2) {
            problems.error(where, "at least two of micro_batch_size, gradient_accumulation_steps and batch_size must be set"
                    + " (Axolotl's rule; defaults don't count)", micro == null ? "add e.g. micro_batch_size: 1 and "
                    + "gradient_accumulation_steps: 4" : "add gradient_accumulation_steps: 1");
        }
        if (micro == null) {
            if (perRank != null && accumulation != null && perRank % accumulation != 0) {
                problems.error(where, "batch_size " + perRank + " is not a multiple of gradient_accumulation_steps "
                        + accumulation, "set batch_size to " + accumulation * Math.max(1, perRank / accumulation)
                        + " or micro_batch_size directly");
            }
            micro = perRank != null && accumulation != null ? Math.max(1, perRank / accumulation) : 1;
        }
        if (accumulation == null) {
            if (perRank != null && perRank % micro != 0) {
                problems.error(where, "batch_size " + perRank + " is not a multiple of micro_batch_size " + micro
                        + " (Axolotl would silently drop the remainder)", "set batch_size: "
                        + micro * Math.max(1, perRank / micro) + " or gradient_accumulation_steps directly");
            }
            accumulation = perRank != null ? Math.max(1, perRank / micro) : 1;
        } else if (perRank != null) {
            if (perRank != micro * accumulation) {
                problems.error(where, "batch_size " + perRank + " disagrees with micro_batch_size " + micro
                        + " x gradient_accumulation_steps " + accumulation + " = " + micro * accumulation,
                        "remove batch_size (Axolotl accepts only one of batch_size and gradient_accumulation_steps)");
            } else {
                problems.warn(where, "batch_size and gradient_accumulation_steps are both set (they agree, but Axolotl "
                        + "rejects this)", "remove batch_size");
            }
        }
        int ranks = run.worldSize();
        // each factor is bounded by withinBound and the hardware bounds, so the product is exact in a long
        long exactGlobal = (long) micro * ranks * accumulation;
        if (exactGlobal > MAX_GLOBAL_BATCH) {
            problems.error(where, "micro_batch_size " + micro + " x " + ranks + " ranks x gradient_accumulation_steps "
                    + accumulation + " = " + exactGlobal + " sequences per optimizer step, more than any real run ("
                    + MAX_GLOBAL_BATCH + " at most)", "lower micro_batch_size or gradient_accumulation_steps");
            micro = 1;
            accumulation = 1;
            exactGlobal = ranks;
        }
        int global = (int) exactGlobal;
        long tokens = (long) global * recipe.training().sequenceLen();
        SchedulePlan schedule = null;
        // ValidatedRecipe reports a val_set_size that holds out every row
        if (rows != null && heldOut(recipe.data().valSetSize(), rows) < rows) {
            long trainRows = rows - heldOut(recipe.data().valSetSize(), rows);
            schedule = SchedulePlan.of(recipe, accumulation, microBatches(recipe, trainRows, micro, ranks),
                    recipe.training().samplePacking() && recipe.training().maxSteps() == null);
            if (trainRows < global) {
                problems.warn(where, "the dataset has " + trainRows + " training rows, fewer than one global batch of "
                        + global, "lower micro_batch_size or gradient_accumulation_steps");
            }
        }
        int generation = 0;
        if (recipe.objective() instanceof Recipe.Objective.Grpo g) {
            generation = g.generationBatchSize() != null ? g.generationBatchSize() : micro * accumulation;
            if (generation % g.numGenerations() != 0) {
                int fix = g.numGenerations() / gcd(micro, g.numGenerations());
                problems.error(where, "GRPO generation batch " + generation + " (" + (g.generationBatchSize() != null
                        ? "trl.generation_batch_size" : "micro_batch_size x gradient_accumulation_steps")
                        + ") is not divisible by trl.num_generations " + g.numGenerations(),
                        g.generationBatchSize() != null ? "set trl.generation_batch_size to a multiple of " + g.numGenerations()
                                : "smallest fix: set gradient_accumulation_steps: " + fix);
            }
            int window = micro * accumulation * ranks;
            if (g.generationBatchSize() != null && generation != window && generation % g.numGenerations() == 0) {
                // TRL samples once per generation batch and, when it spans several optimizer steps, trains on
                // rollouts of an older policy; we sample every accumulation window with the current one
                problems.error(where, "trl.generation_batch_size " + generation + " differs from micro_batch_size x "
                        + "gradient_accumulation_steps" + (ranks > 1 ? " x ranks" : "") + " = " + window
                        + ": rollouts are sampled once per optimizer step and never reused across steps",
                        "remove trl.generation_batch_size (TRL's default is " + window + ") or set it to " + window);
            }
            if (ranks > 1 && generation < g.numGenerations() * ranks) {
                problems.error(where, "GRPO generation batch " + generation + " is smaller than num_generations x ranks = "
                        + g.numGenerations() * ranks, "raise trl.generation_batch_size to " + g.numGenerations() * ranks);
            }
        }
        return new BatchPlan(micro, ranks, accumulation, global, tokens, rows, generation, schedule);
    }

    /** Sequences per optimizer step beyond which a recipe is a typo rather than a plan (16,777,216). */
    static final long MAX_GLOBAL_BATCH = 1L << 24;
    /** Bound of each batch key, so that products of them stay exact. */
    static final int MAX_BATCH_KEY = 1 << 24;

    private static boolean withinBound(Recipe.Batch b, Problems problems, Object where) {
        boolean ok = true;
        for (Object[] key : new Object[][] {{"micro_batch_size", b.microBatchSize()},
                {"gradient_accumulation_steps", b.gradientAccumulationSteps()}, {"batch_size", b.batchSize()}}) {
            if (key[1] != null && (Integer) key[1] > MAX_BATCH_KEY) {
                problems.error(where, key[0] + " " + key[1] + " is beyond any real run (" + MAX_BATCH_KEY + " at most)",
                        "write the number of sequences, e.g. " + key[0] + ": 4");
                ok = false;
            }
        }
        return ok;
    }

    /** Rows {@code val_set_size} holds out of {@code rows}: a fraction (rounded up) or a whole number of rows. */
    public static long heldOut(double valSetSize, long rows) {
        return valSetSize == 0 ? 0 : valSetSize < 1 ? (long) Math.ceil(valSetSize * rows) : (long) valSetSize;
    }

    /**
     * One rank's micro batches per epoch as the trainer builds them from {@code trainRows} rows (examples, pairs or
     * prompts): GRPO fills a micro batch with whole groups of {@code num_generations} completions.
     */
    static long microBatches(Recipe recipe, long trainRows, int micro, int ranks) {
        long perMicro = recipe.objective() instanceof Recipe.Objective.Grpo g ? Math.max(1, micro / g.numGenerations())
                : micro;
        long perRank = (trainRows + ranks - 1) / ranks;
        return Math.max(1, (perRank + perMicro - 1) / perMicro);
    }

    private static int gcd(int a, int b) {
        return b == 0 ? a : gcd(b, a % b);
    }

    /** The plan as the CLI prints it, with the run's reference model. */
    public String describe(ResolvedRun run) {
        String reference = run.reference().describe();
        StringBuilder s = new StringBuilder();
        s.append("batch: micro ").append(micro).append(" x ranks ").append(dataParallelRanks).append(" x accumulation ")
                .append(accumulation).append(" = global ").append(global).append('\n');
        s.append("tokens per optimizer step: up to ").append(tokensPerStep).append('\n');
        if (generationBatch > 0) {
            s.append("GRPO generation batch: ").append(generationBatch).append('\n');
        }
        if (reference != null) {
            s.append("reference model: ").append(reference).append('\n');
        }
        s.append("dataset rows: ").append(rows == null ? "unknown (remote dataset)" : rows).append('\n');
        s.append(schedule == null ? "steps: unknown until the data is read\n" : schedule.describe());
        // which trainer on which device: a GPU recipe must never read as a CPU run
        s.append(run.describe());
        return s.toString();
    }
}
