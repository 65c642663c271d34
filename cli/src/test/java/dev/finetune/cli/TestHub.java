package dev.finetune.cli;

import com.google.gson.Gson;
import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import dev.finetune.recipes.hub.RepoType;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.Executors;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * A stand-in Hugging Face hub on 127.0.0.1 for tests: the part of the hub's HTTP API that {@code huggingface_hub},
 * {@code datasets} and finetune use to download (revision info, tree, paths-info, resolve with ETag /
 * X-Repo-Commit / X-Linked-Etag / X-Linked-Size and Range, LFS files redirected to a second "storage" server,
 * 401 GatedRepo, 404 RepoNotFound / RevisionNotFound / EntryNotFound with X-Error-Code). Repos are published from
 * folders; each publish is a commit on a branch. It stops when closed, and by itself after its lifetime.
 */
final class TestHub implements AutoCloseable {
    private static final Pattern API = Pattern.compile("/api/(models|datasets)/(.+?)/(revision|tree|paths-info)/([^/]+)(/.*)?");
    private static final Pattern RESOLVE = Pattern.compile("/(datasets/)?(.+?)/resolve/([^/]+)/(.+)");
    /** Files from this size, and weights and data files, are LFS files, as on the hub. */
    private static final long LFS_FROM = 10 * 1024 * 1024;

    /** One file of a commit: its contents on disk, git blob id, and for LFS files the SHA-256 and pointer size. */
    record Entry(Path file, long size, String oid, String sha256, int pointerSize) {}

    record Commit(String sha, Map<String, Entry> files) {}

    private static final class Repo {
        final Map<String, Commit> branches = new ConcurrentHashMap<>();
        final Map<String, Commit> commits = new ConcurrentHashMap<>();
        volatile String gatedToken;
    }

    private final HttpServer server;
    private final HttpServer storage;
    private final Map<String, Repo> repos = new ConcurrentHashMap<>();
    private final Map<String, Entry> blobs = new ConcurrentHashMap<>();
    /** Method, path and range of every request, for assertions; headers (tokens) are never recorded. */
    final List<String> requests = new CopyOnWriteArrayList<>();
    /** For each request to the storage server, whether it carried an Authorization header. */
    final List<Boolean> storageAuthorized = new CopyOnWriteArrayList<>();
    private volatile long bytesPerSecond;
    private volatile String flipByteIn;
    private volatile int treePage = 1000;
    private final Thread reaper;

    private TestHub(Duration lifetime) throws IOException {
        InetAddress loopback = InetAddress.getByName("127.0.0.1");
        server = HttpServer.create(new InetSocketAddress(loopback, 0), 64);
        storage = HttpServer.create(new InetSocketAddress(loopback, 0), 64);
        server.createContext("/", this::handle);
        storage.createContext("/", this::handleStorage);
        server.setExecutor(Executors.newCachedThreadPool(daemon()));
        storage.setExecutor(Executors.newCachedThreadPool(daemon()));
        server.start();
        storage.start();
        reaper = new Thread(() -> {
            try {
                Thread.sleep(lifetime.toMillis());
            } catch (InterruptedException e) {
                return;
            }
            stop();
        }, "test-hub-reaper");
        reaper.setDaemon(true);
        reaper.start();
    }

    static TestHub start() throws IOException {
        return new TestHub(Duration.ofMinutes(20));
    }

    private static java.util.concurrent.ThreadFactory daemon() {
        return r -> {
            Thread t = new Thread(r, "test-hub");
            t.setDaemon(true);
            return t;
        };
    }

    String endpoint() {
        return "http://127.0.0.1:" + server.getAddress().getPort();
    }

    /** Publishes every file under {@code folder} as the next commit of {@code branch}; returns the commit. */
    String publish(RepoType type, String id, String branch, Path folder) throws IOException {
        Map<String, Entry> files = new TreeMap<>();
        List<Path> paths;
        try (Stream<Path> walk = Files.walk(folder)) {
            paths = walk.filter(Files::isRegularFile).sorted().toList();
        }
        for (Path p : paths) {
            files.put(folder.relativize(p).toString().replace('\\', '/'), entry(p));
        }
        return publish(type, id, branch, files);
    }

    String publish(RepoType type, String id, String branch, Map<String, Entry> files) {
        MessageDigest sha1 = digest("SHA-1");
        files.forEach((path, e) -> sha1.update((path + "\0" + e.oid() + "\n").getBytes(StandardCharsets.UTF_8)));
        sha1.update(branch.getBytes(StandardCharsets.UTF_8));
        String sha = HexFormat.of().formatHex(sha1.digest());
        Repo repo = repos.computeIfAbsent(key(type, id), k -> new Repo());
        Commit commit = new Commit(sha, Map.copyOf(files));
        repo.commits.put(sha, commit);
        repo.branches.put(branch, commit);
        files.values().stream().filter(e -> e.sha256() != null).forEach(e -> blobs.put(e.sha256(), e));
        return sha;
    }

    /** The files of {@code branch}'s head, to republish some of them elsewhere. */
    Map<String, Entry> files(RepoType type, String id, String branch) {
        return repos.get(key(type, id)).branches.get(branch).files();
    }

    static Entry entry(Path file) throws IOException {
        long size = Files.size(file);
        String name = file.getFileName().toString();
        boolean lfs = size >= LFS_FROM || name.endsWith(".safetensors") || name.endsWith(".parquet")
                || name.endsWith(".arrow");
        MessageDigest git = digest("SHA-1");
        MessageDigest sha256 = digest("SHA-256");
        try (InputStream in = Files.newInputStream(file)) {
            byte[] buffer = new byte[1 << 20];
            git.update(("blob " + size + "\0").getBytes(StandardCharsets.US_ASCII));
            int n;
            while ((n = in.read(buffer)) > 0) {
                git.update(buffer, 0, n);
                sha256.update(buffer, 0, n);
            }
        }
        if (!lfs) {
            return new Entry(file, size, HexFormat.of().formatHex(git.digest()), null, 0);
        }
        String sha = HexFormat.of().formatHex(sha256.digest());
        byte[] pointer = ("version https://git-lfs.github.com/spec/v1\noid sha256:" + sha + "\nsize " + size + "\n")
                .getBytes(StandardCharsets.US_ASCII);
        MessageDigest pointerId = digest("SHA-1");
        pointerId.update(("blob " + pointer.length + "\0").getBytes(StandardCharsets.US_ASCII));
        return new Entry(file, size, HexFormat.of().formatHex(pointerId.digest(pointer)), sha, pointer.length);
    }

    /** Only requests bearing {@code token} may read the repo (a gated repo whose licence that account accepted). */
    void gate(RepoType type, String id, String token) {
        repos.get(key(type, id)).gatedToken = token;
    }

    /** Slows file contents down to about this rate (0: full speed), to interrupt a download midway. */
    void throttle(long bytesPerSecond) {
        this.bytesPerSecond = bytesPerSecond;
    }

    /** Serves the file at this repo path with its middle byte flipped (null: none), as a broken mirror would. */
    void flipByteIn(String path) {
        this.flipByteIn = path;
    }

    /** Entries per page of a tree listing, to make clients follow the Link header. */
    void treePage(int entries) {
        this.treePage = entries;
    }

    private static String key(RepoType type, String id) {
        return type.plural() + "/" + id;
    }

    private void handle(HttpExchange ex) throws IOException {
        try (ex) {
            String path = ex.getRequestURI().getRawPath();
            requests.add(ex.getRequestMethod() + " " + path + (ex.getRequestURI().getRawQuery() == null ? ""
                    : "?" + ex.getRequestURI().getRawQuery()) + range(ex));
            Matcher api = API.matcher(path);
            Matcher resolve = RESOLVE.matcher(path);
            if (api.matches()) {
                RepoType type = api.group(1).equals("models") ? RepoType.MODEL : RepoType.DATASET;
                Commit commit = lookup(ex, type, decode(api.group(2)), decode(api.group(4)));
                if (commit == null) {
                    return;
                }
                String sub = api.group(5) == null ? "" : decode(api.group(5).substring(1));
                switch (api.group(3)) {
                    case "revision" -> json(ex, revisionInfo(type, decode(api.group(2)), commit));
                    case "tree" -> tree(ex, commit, sub);
                    default -> pathsInfo(ex, commit);
                }
            } else if (resolve.matches()) {
                RepoType type = resolve.group(1) != null ? RepoType.DATASET : RepoType.MODEL;
                Commit commit = lookup(ex, type, decode(resolve.group(2)), decode(resolve.group(3)));
                if (commit == null) {
                    return;
                }
                resolveFile(ex, commit, decode(resolve.group(4)));
            } else {
                error(ex, 404, "RepoNotFound", "no such endpoint", null);
            }
        } catch (RuntimeException e) {
            // a client that hung up mid-body: nothing to answer
        }
    }

    private Commit lookup(HttpExchange ex, RepoType type, String id, String revision) throws IOException {
        Repo repo = repos.get(key(type, id));
        if (repo == null) {
            error(ex, 401, "RepoNotFound", "Repository not found", null);
            return null;
        }
        if (repo.gatedToken != null && !("Bearer " + repo.gatedToken).equals(ex.getRequestHeaders().getFirst("Authorization"))) {
            error(ex, 401, "GatedRepo", "Access to model " + id + " is restricted. You must have access to it and be "
                    + "authenticated to access it. Please log in.", null);
            return null;
        }
        Commit commit = repo.commits.containsKey(revision) ? repo.commits.get(revision) : repo.branches.get(revision);
        if (commit == null) {
            error(ex, 404, "RevisionNotFound", "Invalid rev id: " + revision, null);
        }
        return commit;
    }

    private JsonObject revisionInfo(RepoType type, String id, Commit commit) {
        JsonObject o = new JsonObject();
        o.addProperty("_id", commit.sha().substring(0, 24));
        o.addProperty("id", id);
        o.addProperty("author", id.contains("/") ? id.substring(0, id.indexOf('/')) : id);
        o.addProperty("sha", commit.sha());
        o.addProperty("lastModified", "2026-01-01T00:00:00.000Z");
        o.addProperty("createdAt", "2026-01-01T00:00:00.000Z");
        o.addProperty("private", false);
        o.addProperty("gated", repos.get(key(type, id)).gatedToken != null ? "auto" : "false");
        o.addProperty("disabled", false);
        o.addProperty("downloads", 0);
        o.addProperty("likes", 0);
        o.add("tags", new JsonArray());
        JsonArray siblings = new JsonArray();
        for (String path : commit.files().keySet()) {
            JsonObject s = new JsonObject();
            s.addProperty("rfilename", path);
            siblings.add(s);
        }
        o.add("siblings", siblings);
        if (o.get("gated").getAsString().equals("false")) {
            o.addProperty("gated", false);
        }
        return o;
    }

    private void tree(HttpExchange ex, Commit commit, String under) throws IOException {
        Map<String, String> query = query(ex.getRequestURI().getRawQuery());
        boolean recursive = "true".equalsIgnoreCase(query.getOrDefault("recursive", "false"));
        String prefix = under.isEmpty() ? "" : under + "/";
        List<JsonObject> entries = new ArrayList<>();
        java.util.Set<String> dirs = new java.util.TreeSet<>();
        for (Map.Entry<String, Entry> f : commit.files().entrySet()) {
            String path = f.getKey();
            if (!path.startsWith(prefix)) {
                continue;
            }
            String rest = path.substring(prefix.length());
            String[] parts = rest.split("/");
            for (int i = 1; i < parts.length && (recursive || i == 1); i++) {
                dirs.add(prefix + String.join("/", java.util.Arrays.copyOfRange(parts, 0, i)));
            }
            if (recursive || parts.length == 1) {
                entries.add(fileJson(path, f.getValue()));
            }
        }
        if (!under.isEmpty() && entries.isEmpty() && dirs.isEmpty()) {
            error(ex, 404, "EntryNotFound", under + " does not exist on \"" + commit.sha() + "\"", commit.sha());
            return;
        }
        for (String d : dirs) {
            entries.add(dirJson(d));
        }
        entries.sort((a, b) -> a.get("path").getAsString().compareTo(b.get("path").getAsString()));
        int from = Integer.parseInt(query.getOrDefault("cursor", "0"));
        int to = Math.min(entries.size(), from + treePage);
        JsonArray page = new JsonArray();
        entries.subList(from, to).forEach(page::add);
        if (to < entries.size()) {
            String q = ex.getRequestURI().getRawQuery() == null ? "" : ex.getRequestURI().getRawQuery().replaceAll("&?cursor=\\d+", "");
            ex.getResponseHeaders().add("Link", "<" + endpoint() + ex.getRequestURI().getRawPath() + "?" + q
                    + (q.isEmpty() ? "" : "&") + "cursor=" + to + ">; rel=\"next\"");
        }
        json(ex, page);
    }

    private void pathsInfo(HttpExchange ex, Commit commit) throws IOException {
        String body = new String(ex.getRequestBody().readAllBytes(), StandardCharsets.UTF_8);
        JsonArray out = new JsonArray();
        for (String pair : body.split("&")) {
            int eq = pair.indexOf('=');
            if (eq < 0 || !decode(pair.substring(0, eq)).equals("paths")) {
                continue;
            }
            String p = decode(pair.substring(eq + 1));
            Entry e = commit.files().get(p);
            if (e != null) {
                out.add(fileJson(p, e));
            } else if (commit.files().keySet().stream().anyMatch(k -> k.startsWith(p + "/"))) {
                out.add(dirJson(p));
            }
        }
        json(ex, out);
    }

    private static JsonObject fileJson(String path, Entry e) {
        JsonObject o = new JsonObject();
        o.addProperty("type", "file");
        o.addProperty("oid", e.oid());
        o.addProperty("size", e.size());
        o.addProperty("path", path);
        if (e.sha256() != null) {
            JsonObject lfs = new JsonObject();
            lfs.addProperty("oid", e.sha256());
            lfs.addProperty("size", e.size());
            lfs.addProperty("pointerSize", e.pointerSize());
            o.add("lfs", lfs);
        }
        return o;
    }

    private static JsonObject dirJson(String path) {
        JsonObject o = new JsonObject();
        o.addProperty("type", "directory");
        o.addProperty("oid", HexFormat.of().formatHex(digest("SHA-1").digest(path.getBytes(StandardCharsets.UTF_8))));
        o.addProperty("size", 0);
        o.addProperty("path", path);
        return o;
    }

    /** As the hub: small files answered directly, LFS files by a redirect to the storage host with the LFS headers. */
    private void resolveFile(HttpExchange ex, Commit commit, String path) throws IOException {
        Entry e = commit.files().get(path);
        if (e == null) {
            error(ex, 404, "EntryNotFound", path + " does not exist on \"" + commit.sha() + "\"", commit.sha());
            return;
        }
        var h = ex.getResponseHeaders();
        h.add("X-Repo-Commit", commit.sha());
        if (e.sha256() != null) {
            h.add("ETag", "\"" + e.oid() + "\"");
            h.add("X-Linked-Etag", "\"" + e.sha256() + "\"");
            h.add("X-Linked-Size", Long.toString(e.size()));
            // another host name for the same loopback address: clients must treat it as a storage host (no token)
            h.add("Location", "http://localhost:" + storage.getAddress().getPort() + "/lfs/" + e.sha256()
                    + "?path=" + java.net.URLEncoder.encode(path, StandardCharsets.UTF_8));
            ex.sendResponseHeaders(302, -1);
            return;
        }
        h.add("ETag", "\"" + e.oid() + "\"");
        body(ex, e, path);
    }

    private void handleStorage(HttpExchange ex) throws IOException {
        try (ex) {
            storageAuthorized.add(ex.getRequestHeaders().containsKey("Authorization"));
            requests.add("storage " + ex.getRequestMethod() + " " + ex.getRequestURI().getRawPath() + range(ex));
            String path = ex.getRequestURI().getRawPath();
            Entry e = path.startsWith("/lfs/") ? blobs.get(path.substring(5)) : null;
            if (e == null) {
                ex.sendResponseHeaders(404, -1);
                return;
            }
            ex.getResponseHeaders().add("ETag", "\"" + e.sha256() + "\"");
            body(ex, e, query(ex.getRequestURI().getRawQuery()).getOrDefault("path", ""));
        } catch (RuntimeException e) {
            // a client that hung up mid-body
        }
    }

    /** The contents, whole (200) or a {@code Range: bytes=A-[B]} of them (206), throttled and damaged as asked. */
    private void body(HttpExchange ex, Entry e, String repoPath) throws IOException {
        long from = 0;
        long last = e.size() - 1;
        String range = ex.getRequestHeaders().getFirst("Range");
        Matcher m = range == null ? null : Pattern.compile("bytes=(\\d+)-(\\d*)").matcher(range);
        var h = ex.getResponseHeaders();
        h.add("Accept-Ranges", "bytes");
        h.add("Content-Type", "application/octet-stream");
        boolean ranged = m != null && m.matches();
        if (ranged) {
            from = Long.parseLong(m.group(1));
            if (!m.group(2).isEmpty()) {
                last = Math.min(last, Long.parseLong(m.group(2)));
            }
            if (from >= e.size() || from > last) {
                h.add("Content-Range", "bytes */" + e.size());
                ex.sendResponseHeaders(416, -1);
                return;
            }
            h.add("Content-Range", "bytes " + from + "-" + last + "/" + e.size());
        }
        long length = last - from + 1;
        if (ex.getRequestMethod().equals("HEAD")) {
            h.add("Content-Length", Long.toString(length));
            ex.sendResponseHeaders(ranged ? 206 : 200, -1);
            return;
        }
        ex.sendResponseHeaders(ranged ? 206 : 200, length == 0 ? -1 : length);
        long flip = repoPath.equals(flipByteIn) ? e.size() / 2 : -1;
        long rate = bytesPerSecond;
        try (InputStream in = Files.newInputStream(e.file()); OutputStream out = ex.getResponseBody()) {
            in.skipNBytes(from);
            byte[] buffer = new byte[rate > 0 ? (int) Math.max(1024, Math.min(1 << 16, rate / 20)) : 1 << 20];
            long position = from;
            long left = length;
            int n;
            while (left > 0 && (n = in.read(buffer, 0, (int) Math.min(buffer.length, left))) > 0) {
                if (flip >= position && flip < position + n) {
                    buffer[(int) (flip - position)] ^= 0x01;
                }
                out.write(buffer, 0, n);
                position += n;
                left -= n;
                if (rate > 0) {
                    out.flush();
                    try {
                        Thread.sleep(Math.max(1, n * 1000L / rate));
                    } catch (InterruptedException interrupted) {
                        return;
                    }
                }
            }
        }
    }

    private static void json(HttpExchange ex, Object body) throws IOException {
        byte[] bytes = new Gson().toJson(body instanceof JsonObject o ? o : (JsonArray) body).getBytes(StandardCharsets.UTF_8);
        ex.getResponseHeaders().add("Content-Type", "application/json; charset=utf-8");
        if (ex.getRequestMethod().equals("HEAD")) {
            ex.sendResponseHeaders(200, -1);
            return;
        }
        ex.sendResponseHeaders(200, bytes.length);
        ex.getResponseBody().write(bytes);
    }

    private static void error(HttpExchange ex, int status, String code, String message, String commit) throws IOException {
        ex.getResponseHeaders().add("X-Error-Code", code);
        ex.getResponseHeaders().add("X-Error-Message", message);
        if (commit != null) {
            ex.getResponseHeaders().add("X-Repo-Commit", commit);
        }
        byte[] bytes = ("{\"error\":\"" + message.replace("\"", "'") + "\"}").getBytes(StandardCharsets.UTF_8);
        ex.getResponseHeaders().add("Content-Type", "application/json");
        if (ex.getRequestMethod().equals("HEAD")) {
            ex.sendResponseHeaders(status, -1);
            return;
        }
        ex.sendResponseHeaders(status, bytes.length);
        ex.getResponseBody().write(bytes);
    }

    private static String range(HttpExchange ex) {
        String range = ex.getRequestHeaders().getFirst("Range");
        return range == null ? "" : " [" + range + "]";
    }

    private static Map<String, String> query(String raw) {
        Map<String, String> out = new LinkedHashMap<>();
        if (raw != null) {
            for (String pair : raw.split("&")) {
                int eq = pair.indexOf('=');
                if (eq > 0) {
                    out.put(decode(pair.substring(0, eq)), decode(pair.substring(eq + 1)));
                }
            }
        }
        return out;
    }

    private static String decode(String s) {
        return URLDecoder.decode(s.replace("+", "%2B"), StandardCharsets.UTF_8);
    }

    private static MessageDigest digest(String name) {
        try {
            return MessageDigest.getInstance(name);
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /** The requests so far, one per line (for failure messages). */
    String log() {
        return String.join("\n", Collections.unmodifiableList(requests));
    }

    private void stop() {
        server.stop(0);
        storage.stop(0);
    }

    @Override
    public void close() {
        reaper.interrupt();
        stop();
    }

}
