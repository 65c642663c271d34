package dev.finetune.trainers.hub;

import dev.finetune.recipes.UserError;
import dev.finetune.recipes.hub.HubCache;
import dev.finetune.recipes.hub.HubEnvironment;
import dev.finetune.recipes.hub.RepoType;
import java.io.IOException;
import java.io.InputStream;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.locks.ReentrantLock;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;

/**
 * Brings the files of a hub repo that a run needs into the HF cache, and names the commit it read.
 *
 * <p>A revision is resolved once per process ({@link #pinned}): the model, the data and the provenance of one run
 * then name the same commit even if the branch moves while it starts. Each file goes to
 * {@code blobs/<etag>.incomplete} under huggingface_hub's lock for that blob, resumes from there after an
 * interruption (HTTP Range), is checked against the hub's SHA-256 (LFS files) or git blob id (the others), and is
 * renamed into place only when complete; several files download at once, after one free-space check for all.
 */
public final class Fetcher {
    private static final Logger LOG = LogManager.getLogger(Fetcher.class);
    private static final int PARALLEL = 8;
    private static final int BUFFER = 1 << 20;
    /** Resolutions of this process: one commit per (hub, cache, repo, revision). */
    private static final Map<String, Snapshot> PINNED = new ConcurrentHashMap<>();
    /** FileChannel locks belong to the whole JVM: threads of this process queue here first. */
    private static final Map<Path, ReentrantLock> IN_PROCESS = new ConcurrentHashMap<>();

    private final HubEnvironment env;
    private final HubCache cache;
    private final HubClient client;

    /** Which files of a repo a use needs, given the repo's listing; may fetch small files first to decide. */
    public interface Selection {
        List<HubClient.RepoFile> choose(List<HubClient.RepoFile> tree, SmallFiles small);

        /** Whether a snapshot folder holds everything this selection reads (offline: no listing to compare). */
        boolean complete(Path folder);

        /** Whether {@link #complete} can be trusted without the repo's listing (online, to skip asking for it). */
        default boolean completeWithoutListing(Path folder) {
            return complete(folder);
        }

        /** Names looked for and absent from the listing: marked in {@code .no_exist} as huggingface_hub does. */
        default List<String> optional() {
            return List.of();
        }
    }

    /** Fetches one small file of the listing (an index) and gives its local path. */
    public interface SmallFiles {
        Path fetch(HubClient.RepoFile file);
    }

    public Fetcher(HubEnvironment env) {
        this.env = env;
        this.cache = env.cache();
        this.client = new HubClient(env);
    }

    public HubEnvironment environment() {
        return env;
    }

    /**
     * The repo at {@code revision} with the selected files in the cache, fetched if missing and the hub may be
     * asked; resolved once per process.
     *
     * @param where the recipe key or location that named the repo, for messages
     */
    public Snapshot pinned(RepoType type, String repoId, String revision, Selection selection, String where) {
        String key = env.endpoint() + "\u0000" + env.cacheDir() + "\u0000" + type + "\u0000" + repoId + "\u0000" + revision;
        Snapshot known = PINNED.get(key);
        if (known != null && selection.complete(known.folder())) {
            return known;
        }
        Snapshot snapshot = fetch(type, repoId, revision, selection, where, known == null ? null : known.commit());
        PINNED.put(key, snapshot);
        return snapshot;
    }

    private Snapshot fetch(RepoType type, String repoId, String revision, Selection selection, String where,
            String pinnedCommit) {
        if (env.offline()) {
            return fromCache(type, repoId, revision, selection, where,
                    "HF_HUB_OFFLINE is set, so the hub is not asked", "run 'finetune download " + repoId
                            + (revision.equals("main") ? "" : " --revision " + revision)
                            + (type == RepoType.DATASET ? " --dataset" : "") + "' on a machine with internet and copy "
                            + cache.root() + " here, or unset HF_HUB_OFFLINE");
        }
        String commit;
        try {
            commit = pinnedCommit != null ? pinnedCommit : client.commit(type, repoId, revision, where);
        } catch (UserError unreachable) {
            if (!unreachable.getMessage().startsWith("cannot reach")) {
                throw unreachable;
            }
            // as huggingface_hub does: without a connection, a complete cached copy of the revision still serves
            Snapshot cached = cachedIfComplete(type, repoId, revision, selection);
            if (cached == null) {
                throw unreachable;
            }
            LOG.warn("{}: the hub at {} cannot be reached; using the cached commit {}", repoId, env.endpoint(),
                    cached.commit());
            return cached;
        }
        Path folder = cache.snapshot(type, repoId, commit);
        if (!selection.completeWithoutListing(folder)) {
            List<HubClient.RepoFile> tree = client.tree(type, repoId, commit, where);
            List<HubClient.RepoFile> chosen = selection.choose(tree,
                    file -> download(type, repoId, commit, List.of(file), where).get(0));
            download(type, repoId, commit, chosen, where);
            for (String name : selection.optional()) {
                if (tree.stream().noneMatch(f -> f.path().equals(name))) {
                    try {
                        cache.markMissing(type, repoId, commit, name);
                    } catch (IOException e) {
                        LOG.debug("cannot mark {} missing: {}", name, e.getMessage()); // a marker only saves a request
                    }
                }
            }
        }
        try {
            cache.writeRef(type, repoId, revision, commit);
        } catch (IOException e) {
            throw new UserError(where, "cannot write to the HF cache " + cache.root() + ": " + e.getMessage(),
                    "check its permissions or set HF_HUB_CACHE to a writable folder");
        }
        return new Snapshot(type, repoId, revision, commit, folder);
    }

    private Snapshot fromCache(RepoType type, String repoId, String revision, Selection selection, String where,
            String why, String hint) {
        Snapshot cached = cachedIfComplete(type, repoId, revision, selection);
        if (cached == null) {
            String kind = type == RepoType.MODEL ? "model" : "dataset";
            throw new UserError(where, kind + " " + repoId + (revision.equals("main") ? "" : "@" + revision)
                    + " is not (completely) in the HF cache " + cache.root() + " and " + why, hint);
        }
        return cached;
    }

    private Snapshot cachedIfComplete(RepoType type, String repoId, String revision, Selection selection) {
        return cache.commit(type, repoId, revision)
                .map(c -> new Snapshot(type, repoId, revision, c, cache.snapshot(type, repoId, c)))
                .filter(s -> selection.complete(s.folder())).orElse(null);
    }

    /** Each file into the cache (skipping those there), with one progress display; the snapshot paths in order. */
    List<Path> download(RepoType type, String repoId, String commit, List<HubClient.RepoFile> files, String where) {
        Map<String, List<HubClient.RepoFile>> byBlob = new LinkedHashMap<>();
        long missing = 0;
        for (HubClient.RepoFile f : files) {
            if (byBlob.computeIfAbsent(f.etag(), e -> new ArrayList<>()).size() == 0
                    && !Files.isRegularFile(cache.blob(type, repoId, f.etag()))) {
                missing += f.size() - partialSize(cache.incomplete(type, repoId, f.etag()), f.size());
            }
            byBlob.get(f.etag()).add(f);
        }
        requireSpace(missing, type, repoId, where);
        // an index or a model card is no news: the display is for the files that take a while
        DownloadProgress progress = missing >= (1 << 20) ? DownloadProgress.start(repoId, missing) : DownloadProgress.NONE;
        ExecutorService pool = Executors.newFixedThreadPool(Math.max(1, Math.min(PARALLEL, byBlob.size())), r -> {
            Thread t = new Thread(r, "hub-download");
            t.setDaemon(true);
            return t;
        });
        try {
            List<Future<?>> running = new ArrayList<>();
            for (List<HubClient.RepoFile> same : byBlob.values()) {
                running.add(pool.submit(() -> {
                    fetchBlob(type, repoId, commit, same.get(0), where, progress);
                    for (HubClient.RepoFile f : same) {
                        link(type, repoId, commit, f, where);
                    }
                    return null;
                }));
            }
            for (Future<?> f : running) {
                try {
                    f.get();
                } catch (ExecutionException e) {
                    running.forEach(other -> other.cancel(true));
                    if (e.getCause() instanceof RuntimeException r) {
                        throw r;
                    }
                    throw new IllegalStateException(e.getCause());
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new UserError(where, "interrupted while downloading " + repoId, "run it again: it resumes");
                }
            }
        } finally {
            pool.shutdownNow();
            progress.close();
        }
        List<Path> paths = new ArrayList<>();
        for (HubClient.RepoFile f : files) {
            paths.add(cache.snapshot(type, repoId, commit).resolve(f.path()));
        }
        return paths;
    }

    private void link(RepoType type, String repoId, String commit, HubClient.RepoFile f, String where) {
        try {
            cache.link(type, repoId, commit, f.path(), f.etag());
        } catch (IOException e) {
            throw new UserError(where, "cannot write to the HF cache " + cache.root() + ": " + e.getMessage(),
                    "check its permissions or set HF_HUB_CACHE to a writable folder");
        }
    }

    private void requireSpace(long bytes, RepoType type, String repoId, String where) {
        if (bytes <= 0) {
            return;
        }
        try {
            Path blobs = cache.repoFolder(type, repoId).resolve("blobs");
            Files.createDirectories(blobs);
            long free = Files.getFileStore(blobs).getUsableSpace();
            if (free < bytes) {
                throw new UserError(where, String.format(java.util.Locale.ROOT, "%s needs %.2f GB more in the HF cache "
                        + "%s, whose disk has %.2f GB free", repoId, bytes / 1e9, cache.root(), free / 1e9),
                        "free space there, or set HF_HUB_CACHE (or HF_HOME) to a folder on a larger disk");
            }
        } catch (IOException e) {
            throw new UserError(where, "cannot write to the HF cache " + cache.root() + ": " + e.getMessage(),
                    "check its permissions or set HF_HUB_CACHE to a writable folder");
        }
    }

    private static long partialSize(Path incomplete, long size) {
        try {
            long have = Files.isRegularFile(incomplete) ? Files.size(incomplete) : 0;
            return have <= size ? have : 0;
        } catch (IOException e) {
            return 0;
        }
    }

    /** One blob into the cache under its lock: resumed, checked, renamed when complete. */
    private void fetchBlob(RepoType type, String repoId, String commit, HubClient.RepoFile file, String where,
            DownloadProgress progress) throws IOException {
        Path blob = cache.blob(type, repoId, file.etag());
        if (Files.isRegularFile(blob)) {
            return;
        }
        Path lockFile = cache.lock(type, repoId, file.etag());
        Files.createDirectories(lockFile.getParent());
        ReentrantLock local = IN_PROCESS.computeIfAbsent(lockFile.toAbsolutePath(), p -> new ReentrantLock());
        local.lock();
        try (FileChannel lockChannel = FileChannel.open(lockFile, StandardOpenOption.CREATE, StandardOpenOption.WRITE);
                FileLock held = lockChannel.lock()) {
            if (Files.isRegularFile(blob)) {
                return; // another process fetched it while this one waited for the lock
            }
            Path partial = cache.incomplete(type, repoId, file.etag());
            MessageDigest digest = file.sha256() != null ? digest("SHA-256") : gitBlobDigest(file.size());
            long have = partialSize(partial, file.size());
            if (have > 0) {
                have = rehash(partial, have, digest);
            }
            HttpResponse<InputStream> response = client.open(type, repoId, commit, file.path(), have, where);
            boolean resumed = have > 0 && response.statusCode() == 206;
            if (have > 0 && !resumed) {
                digest = file.sha256() != null ? digest("SHA-256") : gitBlobDigest(file.size());
                progress.add(-have);
                have = 0;
            }
            long written = have;
            try (InputStream in = response.body();
                    FileChannel outChannel = FileChannel.open(partial, StandardOpenOption.CREATE, StandardOpenOption.WRITE)) {
                outChannel.truncate(have);
                outChannel.position(have);
                byte[] buffer = new byte[BUFFER];
                ByteBuffer wrap = ByteBuffer.wrap(buffer);
                int n;
                while ((n = in.read(buffer)) > 0) {
                    digest.update(buffer, 0, n);
                    wrap.clear().limit(n);
                    while (wrap.hasRemaining()) {
                        outChannel.write(wrap);
                    }
                    written += n;
                    progress.add(n);
                }
                outChannel.force(false);
            } catch (IOException e) {
                throw new UserError(where, "the download of " + file.path() + " from " + repoId + " broke off after "
                        + written + " of " + file.size() + " bytes (" + e.getMessage() + ")",
                        "run it again: it resumes from " + partial.getFileName());
            }
            String got = HexFormat.of().formatHex(digest.digest());
            if (written != file.size() || !got.equals(file.etag())) {
                Files.deleteIfExists(partial);
                throw new UserError(where, file.path() + " of " + repoId + "@" + commit.substring(0, 7)
                        + " arrived damaged: " + written + " bytes with " + (file.sha256() != null ? "SHA-256 " : "git blob id ")
                        + got + ", the hub lists " + file.size() + " bytes with " + file.etag(),
                        "run it again (the damaged copy is deleted); if it repeats, the server at HF_ENDPOINT serves "
                                + "corrupt data");
            }
            move(partial, blob);
        } finally {
            local.unlock();
        }
    }

    /** The digest of the bytes already on disk, so a resumed download is checked whole. */
    private static long rehash(Path partial, long have, MessageDigest digest) throws IOException {
        try (InputStream in = Files.newInputStream(partial)) {
            byte[] buffer = new byte[BUFFER];
            long left = have;
            int n;
            while (left > 0 && (n = in.read(buffer, 0, (int) Math.min(buffer.length, left))) > 0) {
                digest.update(buffer, 0, n);
                left -= n;
            }
            return have - left;
        }
    }

    /** git's blob id: SHA-1 over {@code "blob <size>\0"} and the contents; the hub's ETag of a non-LFS file. */
    private static MessageDigest gitBlobDigest(long size) {
        MessageDigest sha1 = digest("SHA-1");
        sha1.update(("blob " + size + "\0").getBytes(java.nio.charset.StandardCharsets.US_ASCII));
        return sha1;
    }

    private static MessageDigest digest(String name) {
        try {
            return MessageDigest.getInstance(name);
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every JDK has " + name, e);
        }
    }

    private static void move(Path from, Path to) throws IOException {
        try {
            Files.move(from, to, StandardCopyOption.ATOMIC_MOVE);
        } catch (AtomicMoveNotSupportedException e) {
            Files.move(from, to, StandardCopyOption.REPLACE_EXISTING);
        }
    }
}
