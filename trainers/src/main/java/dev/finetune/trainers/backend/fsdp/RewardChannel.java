package dev.finetune.trainers.backend.fsdp;

import com.google.gson.Gson;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.trainers.backend.TrainingData;
import dev.finetune.trainers.rewards.Rewards;
import dev.finetune.trainers.text.Tokenizer;
import dev.finetune.trainers.train.grpo.GrpoBatch;
import dev.finetune.trainers.train.grpo.GrpoObjective;
import dev.finetune.trainers.train.grpo.RolloutScores;
import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.function.Function;

/**
 * GRPO on the fsdp backend: the ranks sample, this JVM scores. Rewards are the recipe's reward functions (built-in,
 * regex or commands) run by the same Java code as on the single-device trainer, and so are the advantages and the
 * reward metrics ({@link RolloutScores}); the worker never reimplements them.
 *
 * <p>The launcher listens on a loopback port named in the ranks' environment ({@value #PORT_ENV}, with a random
 * {@value #TOKEN_ENV} the first line must repeat, so no other local process can feed it). Rank 0 gathers every
 * rank's completions and sends one JSON line per round, {@code {"split", "batches": [{"index", "completions"}]}},
 * completions as token ids in the batch's order; the answer is one line, {@code {"batches": [{"advantages",
 * "truncated", "metrics"}]}} in the same order, or {@code {"error"}} when a reward function failed. That failure is
 * kept, and the run reports it rather than the ranks' reaction to it.
 */
public final class RewardChannel implements AutoCloseable {
    static final String PORT_ENV = "FINETUNE_REWARD_PORT";
    static final String TOKEN_ENV = "FINETUNE_REWARD_TOKEN";
    private static final Gson GSON = new Gson();

    private final ServerSocket server;
    private final String token;
    private final Tokenizer tokenizer;
    private final Rewards rewards;
    private final Map<String, List<GrpoBatch>> batches;
    private final GrpoObjective.Settings settings;
    private final Function<long[], String> decode;
    private final Thread thread;
    private volatile RuntimeException failure;
    private volatile Socket connection;

    private RewardChannel(ServerSocket server, Tokenizer tokenizer, Rewards rewards,
            Map<String, List<GrpoBatch>> batches, GrpoObjective.Settings settings) {
        this.server = server;
        byte[] secret = new byte[16];
        // nextBytes, not generateSeed: a seed may be read from the blocking entropy pool and stall a fresh VM's launch
        new SecureRandom().nextBytes(secret);
        this.token = HexFormat.of().formatHex(secret);
        this.tokenizer = tokenizer;
        this.rewards = rewards;
        this.batches = batches;
        this.settings = settings;
        this.decode = GrpoObjective.decoder(tokenizer);
        this.thread = new Thread(this::serve, "reward-channel");
        this.thread.setDaemon(true);
        this.thread.start();
    }

    /**
     * For a GRPO recipe: the prompts as the workers' batches file holds them (the same code makes both), the reward
     * functions started (a command only with {@code allowCommands}), and the port open; else {@code null}.
     */
    public static RewardChannel open(ValidatedRecipe validated, Path tokenizerDir, boolean allowCommands) {
        Recipe recipe = validated.recipe();
        if (!(recipe.objective() instanceof Recipe.Objective.Grpo grpo)) {
            return null;
        }
        Tokenizer tokenizer = Tokenizer.load(tokenizerDir);
        Rewards rewards = null;
        ServerSocket server = null;
        try {
            rewards = Rewards.start(grpo.rewardFuncs(), grpo.rewardWeights(), allowCommands);
            TrainingData<GrpoBatch> data = TrainingData.grpo(recipe, grpo, validated.plan().micro(), tokenizer);
            GrpoObjective.Settings settings = GrpoObjective.Settings.of(grpo, tokenizer.special().eosId(),
                    TrainingData.padId(tokenizer));
            server = new ServerSocket(0, 1, InetAddress.getLoopbackAddress());
            return new RewardChannel(server, tokenizer, rewards, Map.of("train", data.train(), "eval", data.eval()),
                    settings);
        } catch (IOException | RuntimeException e) {
            if (rewards != null) {
                rewards.close();
            }
            tokenizer.close();
            closeQuietly(server);
            if (e instanceof IOException io) {
                throw new UserError("rl", "cannot open the reward channel on the loopback interface: "
                        + io.getMessage(), "check that this machine allows local TCP connections");
            }
            throw (RuntimeException) e;
        }
    }

    /** Before anything is written: a reward command runs only with {@code --allow-commands}. */
    static void requireAllowed(Recipe recipe, boolean allowCommands) {
        if (recipe.objective() instanceof Recipe.Objective.Grpo grpo) {
            Rewards.requireAllowed(grpo.rewardFuncs(), allowCommands);
        }
    }

    /**
     * Runs the ranks with {@code environment} plus this channel's address; when they fail because a reward
     * function failed, that failure is the run's error (a failing reward command is one line, as on the JVM).
     */
    <T> T around(Map<String, String> environment, Function<Map<String, String>, T> ranks) {
        Map<String, String> env = new java.util.LinkedHashMap<>(environment);
        env.put(PORT_ENV, Integer.toString(server.getLocalPort()));
        env.put(TOKEN_ENV, token);
        try {
            return ranks.apply(env);
        } catch (RuntimeException e) {
            if (failure != null) {
                throw failure;
            }
            throw e;
        }
    }

    private void serve() {
        while (!server.isClosed()) {
            try (Socket socket = accept();
                    BufferedReader in = new BufferedReader(new InputStreamReader(socket.getInputStream(),
                            StandardCharsets.UTF_8));
                    BufferedWriter out = new BufferedWriter(new OutputStreamWriter(socket.getOutputStream(),
                            StandardCharsets.UTF_8))) {
                if (!token.equals(in.readLine())) {
                    continue;
                }
                String line;
                while ((line = in.readLine()) != null) {
                    out.write(answer(line));
                    out.write('\n');
                    out.flush();
                }
            } catch (IOException e) {
                // closed by close(), or rank 0 went away: the launcher reports the run's failure from its output
            }
        }
    }

    private Socket accept() throws IOException {
        connection = server.accept();
        return connection;
    }

    private String answer(String line) {
        JsonObject reply = new JsonObject();
        if (failure != null) {
            reply.addProperty("error", message(failure));
            return reply.toString();
        }
        try {
            JsonObject request = JsonParser.parseString(line).getAsJsonObject();
            List<GrpoBatch> split = batches.get(request.get("split").getAsString());
            JsonArray answers = new JsonArray();
            for (JsonElement element : request.getAsJsonArray("batches")) {
                JsonObject item = element.getAsJsonObject();
                GrpoBatch batch = split.get(item.get("index").getAsInt());
                List<long[]> completions = new ArrayList<>();
                for (JsonElement c : item.getAsJsonArray("completions")) {
                    completions.add(GSON.fromJson(c, long[].class));
                }
                RolloutScores scored = RolloutScores.of(batch, completions, rewards, decode, settings);
                JsonObject answer = new JsonObject();
                answer.add("advantages", GSON.toJsonTree(scored.advantages()));
                answer.add("truncated", GSON.toJsonTree(scored.truncated()));
                answer.add("metrics", GSON.toJsonTree(scored.metrics()));
                answers.add(answer);
            }
            reply.add("batches", answers);
        } catch (RuntimeException e) {
            failure = e;
            reply = new JsonObject();
            reply.addProperty("error", message(e));
        }
        return reply.toString();
    }

    private static String message(RuntimeException e) {
        return e instanceof UserError user ? user.oneLine() : e.getClass().getSimpleName() + ": " + e.getMessage();
    }

    @Override
    public void close() {
        closeQuietly(server);
        Socket open = connection;
        if (open != null) {
            try {
                open.close();
            } catch (IOException ignored) {
                // closing: nothing left to do
            }
        }
        try {
            thread.join(10_000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        // reward commands are processes: closing stops them and everything they started
        rewards.close();
        tokenizer.close();
    }

    private static void closeQuietly(ServerSocket socket) {
        if (socket != null) {
            try {
                socket.close();
            } catch (IOException ignored) {
                // closing: nothing left to do
            }
        }
    }
}
