package dev.finetune.trainers.backend.fsdp;

import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Assumptions;

/**
 * The repository's {@code .venv} (made by the test build from the pinned requirements) for tests that run the worker.
 * Under {@code CI=true} a missing interpreter fails the test; elsewhere the test is skipped with the reason.
 */
final class WorkerEnvironment {
    private WorkerEnvironment() {}

    static Path repoRoot() {
        Path dir = Path.of("").toAbsolutePath();
        for (Path p = dir; p != null; p = p.getParent()) {
            if (Files.isRegularFile(p.resolve("trainers/src/main/python/requirements.txt"))) {
                return p;
            }
        }
        throw new IllegalStateException("no repository root above " + dir);
    }

    /** {@code <repo>/.venv/bin/python}, which the test build created. */
    static String python() {
        Path python = repoRoot().resolve(".venv/bin/python");
        if (!Files.isExecutable(python)) {
            String why = python + " is missing: the test build makes it (trainers/src/main/python/setup-venv.sh)";
            if ("true".equals(System.getenv("CI"))) {
                fail(why);
            }
            Assumptions.abort(why);
        }
        return python.toString();
    }

    static Path stories260K() {
        return repoRoot().resolve("configs/models/stories260K");
    }

    static Path data(String name) {
        return repoRoot().resolve("configs/data").resolve(name);
    }
}
