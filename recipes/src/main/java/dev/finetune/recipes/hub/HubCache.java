package dev.finetune.recipes.hub;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Optional;
import java.util.UUID;
import java.util.regex.Pattern;

/**
 * The Hugging Face cache folder, laid out exactly as {@code huggingface_hub} lays it out, so that files either tool
 * fetched serve the other:
 * <pre>
 * &lt;cache&gt;/models--org--name/
 *     blobs/&lt;etag&gt;                          file contents, named by the hub's ETag (git SHA-1, or SHA-256 for LFS)
 *     blobs/&lt;etag&gt;.incomplete               a download under way (ours resumes from it)
 *     refs/&lt;revision&gt;                       the commit a branch or tag pointed at when last resolved
 *     snapshots/&lt;commit&gt;/&lt;path&gt;            relative symlinks into blobs/
 *     .no_exist/&lt;commit&gt;/&lt;path&gt;            empty: the hub said this file does not exist at that commit
 * &lt;cache&gt;/.locks/models--org--name/&lt;etag&gt;.lock   held while a blob is fetched
 * </pre>
 * Datasets live in {@code datasets--org--name}. Everything here is file-system only; fetching is the trainers' job.
 */
public final class HubCache {
    private static final Pattern COMMIT = Pattern.compile("[0-9a-f]{40}");

    private final Path root;

    public HubCache(Path root) {
        this.root = root;
    }

    public Path root() {
        return root;
    }

    /** Whether {@code revision} is a full commit hash (no ref to follow). */
    public static boolean isCommit(String revision) {
        return revision != null && COMMIT.matcher(revision).matches();
    }

    /** {@code models--org--name}: the repo id with every {@code /} made {@code --}, as huggingface_hub names it. */
    public static String folderName(RepoType type, String repoId) {
        return type.plural() + "--" + repoId.replace("/", "--");
    }

    public Path repoFolder(RepoType type, String repoId) {
        return root.resolve(folderName(type, repoId));
    }

    /**
     * The commit {@code revision} names in the cache: itself when it is a commit hash, else what
     * {@code refs/<revision>} holds; empty when the cache has never resolved it.
     */
    public Optional<String> commit(RepoType type, String repoId, String revision) {
        if (isCommit(revision)) {
            return Optional.of(revision);
        }
        Path ref = repoFolder(type, repoId).resolve("refs").resolve(revision);
        try {
            if (Files.isRegularFile(ref)) {
                String commit = Files.readString(ref, StandardCharsets.UTF_8).strip();
                return isCommit(commit) ? Optional.of(commit) : Optional.empty();
            }
        } catch (IOException e) {
            return Optional.empty();
        }
        return Optional.empty();
    }

    /** {@code snapshots/<commit>}, whether or not it exists. */
    public Path snapshot(RepoType type, String repoId, String commit) {
        return repoFolder(type, repoId).resolve("snapshots").resolve(commit);
    }

    /** The cached snapshot folder for {@code revision}, when the cache resolved it and the folder exists. */
    public Optional<Path> snapshotFor(RepoType type, String repoId, String revision) {
        return commit(type, repoId, revision).map(c -> snapshot(type, repoId, c)).filter(Files::isDirectory);
    }

    /** The hub said {@code path} is absent at {@code commit} (huggingface_hub's {@code .no_exist} marker). */
    public boolean knownMissing(RepoType type, String repoId, String commit, String path) {
        return Files.isRegularFile(repoFolder(type, repoId).resolve(".no_exist").resolve(commit).resolve(path));
    }

    public void markMissing(RepoType type, String repoId, String commit, String path) throws IOException {
        Path marker = repoFolder(type, repoId).resolve(".no_exist").resolve(commit).resolve(path);
        Files.createDirectories(marker.getParent());
        if (!Files.exists(marker)) {
            Files.createFile(marker);
        }
    }

    /**
     * Records that {@code revision} resolved to {@code commit} ({@code refs/<revision>}, written through a
     * temporary file and a rename so a concurrent reader never sees half a hash); nothing for a commit hash.
     */
    public void writeRef(RepoType type, String repoId, String revision, String commit) throws IOException {
        if (revision.equals(commit)) {
            return;
        }
        Path ref = repoFolder(type, repoId).resolve("refs").resolve(revision);
        Files.createDirectories(ref.getParent());
        if (Files.isRegularFile(ref) && Files.readString(ref, StandardCharsets.UTF_8).equals(commit)) {
            return;
        }
        Path tmp = ref.resolveSibling(ref.getFileName() + "." + UUID.randomUUID().toString().substring(0, 8) + ".tmp");
        Files.writeString(tmp, commit, StandardCharsets.UTF_8);
        move(tmp, ref);
    }

    public Path blob(RepoType type, String repoId, String etag) {
        return repoFolder(type, repoId).resolve("blobs").resolve(etag);
    }

    public Path incomplete(RepoType type, String repoId, String etag) {
        return repoFolder(type, repoId).resolve("blobs").resolve(etag + ".incomplete");
    }

    /** The lock file huggingface_hub takes around the same blob, so two fetches of one file wait for each other. */
    public Path lock(RepoType type, String repoId, String etag) {
        return root.resolve(".locks").resolve(folderName(type, repoId)).resolve(etag + ".lock");
    }

    /**
     * Points {@code snapshots/<commit>/<path>} at the blob with a relative symlink (what huggingface_hub makes, and
     * what survives the cache folder being moved); where symlinks are impossible, a copy.
     */
    public Path link(RepoType type, String repoId, String commit, String path, String etag) throws IOException {
        Path pointer = snapshot(type, repoId, commit).resolve(path);
        Path blob = blob(type, repoId, etag);
        Files.createDirectories(pointer.getParent());
        Path target = pointer.getParent().relativize(blob);
        if (Files.isSymbolicLink(pointer) && Files.readSymbolicLink(pointer).equals(target) && Files.exists(pointer)) {
            return pointer;
        }
        Path tmp = pointer.resolveSibling("." + pointer.getFileName() + "." + UUID.randomUUID().toString().substring(0, 8) + ".tmp");
        try {
            Files.createSymbolicLink(tmp, target);
        } catch (UnsupportedOperationException | IOException e) {
            Files.copy(blob, tmp, StandardCopyOption.REPLACE_EXISTING);
        }
        move(tmp, pointer);
        return pointer;
    }

    private static void move(Path from, Path to) throws IOException {
        try {
            Files.move(from, to, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
        } catch (AtomicMoveNotSupportedException e) {
            Files.move(from, to, StandardCopyOption.REPLACE_EXISTING);
        }
    }
}
