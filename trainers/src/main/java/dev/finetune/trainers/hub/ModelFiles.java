package dev.finetune.trainers.hub;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.recipes.UserError;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;

/**
 * The files of a model repo that training reads (top level only): {@code config.json}, the safetensors weights
 * (the shards its index names, or {@code model.safetensors}), the tokenizer and chat-template files and
 * {@code generation_config.json}. Never pickled {@code .bin} weights, and nothing else (no {@code original/}
 * checkpoints, no ONNX or GGUF copies).
 */
public enum ModelFiles implements Fetcher.Selection {
    /** {@code base_model}: config, weights, tokenizer. */
    TRAINING(true, true),
    /** {@code tokenizer_config}: the tokenizer files and config.json. */
    TOKENIZER(false, true),
    /** {@code base_model_config}: config.json only. */
    CONFIG(false, false);

    static final String INDEX = "model.safetensors.index.json";
    static final String SINGLE = "model.safetensors";
    static final List<String> TOKENIZER_FILES = List.of("tokenizer.json", "tokenizer_config.json",
            "special_tokens_map.json", "tokenizer.model", "added_tokens.json", "vocab.json", "merges.txt",
            "chat_template.jinja", "chat_template.json");

    private final boolean weights;
    private final boolean tokenizer;

    ModelFiles(boolean weights, boolean tokenizer) {
        this.weights = weights;
        this.tokenizer = tokenizer;
    }

    @Override
    public List<String> optional() {
        List<String> names = new ArrayList<>(List.of("config.json", "generation_config.json"));
        if (tokenizer) {
            names.addAll(TOKENIZER_FILES);
        }
        return names;
    }

    @Override
    public boolean complete(Path folder) {
        if (!Files.isRegularFile(folder.resolve("config.json"))) {
            return false;
        }
        if (tokenizer && !Files.isRegularFile(folder.resolve("tokenizer.json"))
                && !Files.isRegularFile(folder.resolve("tokenizer_config.json"))) {
            return false;
        }
        if (!weights) {
            return true;
        }
        if (Files.isRegularFile(folder.resolve(INDEX))) {
            try {
                return shards(folder.resolve(INDEX)).stream().allMatch(s -> Files.isRegularFile(folder.resolve(s)));
            } catch (UserError e) {
                return false;
            }
        }
        return Files.isRegularFile(folder.resolve(SINGLE));
    }

    @Override
    public List<HubClient.RepoFile> choose(List<HubClient.RepoFile> tree, Fetcher.SmallFiles small) {
        Set<String> wanted = new LinkedHashSet<>(optional());
        List<HubClient.RepoFile> chosen = new ArrayList<>();
        HubClient.RepoFile index = find(tree, INDEX);
        if (weights) {
            if (index != null) {
                Set<String> shards = shards(small.fetch(index));
                wanted.add(INDEX);
                wanted.addAll(shards);
                for (String shard : shards) {
                    if (find(tree, shard) == null) {
                        throw new UserError("base_model", INDEX + " names the shard " + shard + ", which the repo does not hold",
                                "the repo is broken at this revision: pin another one with revision_of_model");
                    }
                }
            } else if (find(tree, SINGLE) != null) {
                wanted.add(SINGLE);
            } else {
                boolean pickled = tree.stream().anyMatch(f -> !f.path().contains("/") && (f.path().endsWith(".bin")
                        || f.path().endsWith(".pt") || f.path().endsWith(".pth")));
                throw new UserError("base_model", pickled
                        ? "the repo's weights are pickled PyTorch files (.bin/.pt), which finetune never loads: "
                                + "unpickling can run code"
                        : "the repo holds no model.safetensors or " + INDEX + " at its top level",
                        pickled ? "use a revision with safetensors (the hub's conversion bot opens a refs/pr/N "
                                + "branch: revision_of_model: refs/pr/N), or convert once with transformers "
                                + "(from_pretrained(ID).save_pretrained(DIR)) and set base_model: DIR"
                                : "check that base_model names a transformers model repo");
            }
        }
        for (HubClient.RepoFile f : tree) {
            if (wanted.contains(f.path())) {
                chosen.add(f);
            }
        }
        if (find(tree, "config.json") == null) {
            throw new UserError("base_model", "the repo has no config.json, so it is not a transformers model",
                    "check the id (a dataset needs datasets: [{path: ...}])");
        }
        return chosen;
    }

    private static HubClient.RepoFile find(List<HubClient.RepoFile> tree, String path) {
        return tree.stream().filter(f -> f.path().equals(path)).findFirst().orElse(null);
    }

    /** The shard files a safetensors index names ({@code weight_map} values). */
    static Set<String> shards(Path index) {
        try {
            JsonObject map = JsonParser.parseString(Files.readString(index)).getAsJsonObject().getAsJsonObject("weight_map");
            Set<String> shards = new LinkedHashSet<>();
            map.entrySet().forEach(e -> shards.add(e.getValue().getAsString()));
            return shards;
        } catch (IOException | RuntimeException e) {
            throw new UserError(index.toString(), "not a safetensors index (" + e.getMessage() + ")",
                    "delete it from the HF cache and run again");
        }
    }
}
