package dev.finetune.cli;

import dev.finetune.recipes.UserError;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.recipes.hub.HubEnvironment;
import dev.finetune.recipes.hub.RepoType;
import dev.finetune.trainers.hub.DatasetFiles;
import dev.finetune.trainers.hub.Fetcher;
import dev.finetune.trainers.hub.HubModels;
import dev.finetune.trainers.hub.ModelFiles;
import dev.finetune.trainers.hub.Snapshot;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;
import picocli.CommandLine.Model.CommandSpec;

@Command(name = "download", mixinStandardHelpOptions = true,
        description = "Fetch a hub model or dataset into the Hugging Face cache (HF_HUB_CACHE / HF_HOME), ahead of a "
                + "run: for compute nodes without internet, run it where there is, then train with HF_HUB_OFFLINE=1. "
                + "Given a recipe file, fetches its model and every hub dataset it names.",
        footerHeading = "%nExamples:%n",
        footer = {
            "  finetune download Qwen/Qwen2.5-0.5B                 config, safetensors, tokenizer (what training reads)",
            "  finetune download tatsu-lab/alpaca --dataset        every file of a dataset repo",
            "  finetune download my.yaml                           the recipe's model and hub datasets",
        })
final class DownloadCommand implements Callable<Integer> {

    @Spec
    CommandSpec spec;

    @Parameters(index = "0", paramLabel = "ID|RECIPE", description = "a hub repo id (org/name) or a recipe file")
    String target;

    @Option(names = "--revision", paramLabel = "R", description = "branch, tag or commit (default: main)")
    String revision;

    @Option(names = "--dataset", description = "ID names a dataset repo (default: a model repo)")
    boolean dataset;

    @Override
    public Integer call() {
        PrintWriter out = spec.commandLine().getOut();
        HubEnvironment env = HubEnvironment.current();
        if (env.offline()) {
            throw new UserError("HF_HUB_OFFLINE", "download asks the hub, and HF_HUB_OFFLINE is set",
                    "unset HF_HUB_OFFLINE (and TRANSFORMERS_OFFLINE) for this command");
        }
        List<Snapshot> fetched = new ArrayList<>();
        Path file = Path.of(target);
        if (target.endsWith(".yaml") || target.endsWith(".yml") || Files.isRegularFile(file)) {
            if (revision != null || dataset) {
                throw new UserError("--revision", "--revision and --dataset apply to a repo id, not to a recipe",
                        "a recipe pins revisions itself: revision_of_model, datasets[].revision");
            }
            ValidatedRecipe validated = ValidatedRecipe.load(file, List.of());
            fetched.add(HubModels.resolve(validated.recipe().model()));
            fetched.addAll(DatasetFiles.fetch(validated.recipe(), env));
        } else if (dataset) {
            fetched.add(new Fetcher(env).pinned(RepoType.DATASET, target, revision == null ? "main" : revision,
                    DatasetFiles.WHOLE_REPO, target));
        } else {
            fetched.add(HubModels.resolve(target, revision, ModelFiles.TRAINING, target, env));
        }
        for (Snapshot s : fetched) {
            if (s.commit() != null) {
                out.printf("%s %s (%s) -> %s%n", s.type() == RepoType.MODEL ? "model" : "dataset", s.repoId(),
                        s.revision().equals(s.commit()) ? s.commit() : s.revision() + " = " + s.commit(), s.folder());
            }
        }
        return ExitCode.OK;
    }
}
