package dev.finetune.trainers.hub;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.hub.HubEnvironment;
import dev.finetune.recipes.hub.RepoType;
import java.io.IOException;
import java.io.InputStream;
import java.net.ConnectException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpConnectTimeoutException;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The part of the hub's HTTP API that downloads need, spoken as {@code huggingface_hub} speaks it: a revision's
 * commit ({@code GET /api/<type>s/<id>/revision/<rev>}), the file tree at a commit ({@code GET .../tree/<commit>},
 * paged by {@code Link} headers), and file contents ({@code GET /<id>/resolve/<commit>/<path>}, ranged to resume).
 *
 * <p>Redirects are followed here, not by the JDK: the token goes only to the endpoint's own host, never to the
 * storage host a large file is redirected to. No message built here contains the token.
 */
public final class HubClient {
    private static final Pattern NEXT_LINK = Pattern.compile("<([^>]+)>\\s*;\\s*rel=\"next\"");
    private static final int MAX_REDIRECTS = 10;
    /** The hub's API answers are a few KiB (a listing page: 1,000 files, some 300 KiB). */
    private static final int MAX_ANSWER_BYTES = 16 << 20;
    /** 1,000 files a page: ten million files, far beyond any repo. */
    private static final int MAX_PAGES = 10_000;

    private final HubEnvironment env;
    private final HttpClient http;

    /** One file of a repo at a commit: {@code sha256} is set for LFS files (the blob's name and checksum then). */
    public record RepoFile(String path, long size, String oid, String sha256) {
        /** The name of its blob in the cache: the hub's ETag, SHA-256 for LFS files, the git blob id otherwise. */
        public String etag() {
            return sha256 != null ? sha256 : oid;
        }
    }

    public HubClient(HubEnvironment env) {
        this.env = env;
        this.http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
                .connectTimeout(Duration.ofSeconds(10)).followRedirects(HttpClient.Redirect.NEVER).build();
    }

    public HubEnvironment environment() {
        return env;
    }

    /** The commit {@code revision} (branch, tag or commit) points at now. */
    public String commit(RepoType type, String repoId, String revision, String where) {
        String url = env.endpoint() + "/api/" + type.plural() + "/" + repoId + "/revision/" + encode(revision);
        JsonElement answer = json(url, getText(url, type, repoId, revision, where), where);
        if (!answer.isJsonObject()) {
            throw notAHub(url, "an answer that is not the hub's repo information", where);
        }
        JsonObject info = answer.getAsJsonObject();
        JsonElement sha = info.get("sha");
        if (sha == null || !sha.isJsonPrimitive()) {
            throw new UserError(where, env.endpoint() + " answered without a commit for " + repoId + "@" + revision
                    + ", so it does not look like a Hugging Face hub", "check HF_ENDPOINT");
        }
        return sha.getAsString();
    }

    /** Every file of the repo at {@code commit}, recursively. */
    public List<RepoFile> tree(RepoType type, String repoId, String commit, String where) {
        List<RepoFile> files = new ArrayList<>();
        String url = env.endpoint() + "/api/" + type.plural() + "/" + repoId + "/tree/" + encode(commit)
                + "?recursive=true&expand=false";
        for (int page = 0; url != null; page++) {
            if (page == MAX_PAGES) {
                throw notAHub(url, "more than " + MAX_PAGES + " pages of file listing", where);
            }
            HttpResponse<InputStream> response = send(url, "GET", null, HttpResponse.BodyHandlers.ofInputStream(), type,
                    repoId, commit, where);
            String listed = url;
            try {
                for (JsonElement e : json(url, bounded(url, response, where), where).getAsJsonArray()) {
                    JsonObject o = e.getAsJsonObject();
                    if (!"file".equals(o.get("type").getAsString())) {
                        continue;
                    }
                    JsonObject lfs = o.has("lfs") && o.get("lfs").isJsonObject() ? o.getAsJsonObject("lfs") : null;
                    files.add(new RepoFile(o.get("path").getAsString(), o.get("size").getAsLong(),
                            o.get("oid").getAsString(), lfs == null ? null : lfs.get("oid").getAsString()));
                }
            } catch (RuntimeException e) {
                if (e instanceof UserError u) {
                    throw u;
                }
                // a field missing or of another type: not the hub's listing
                throw notAHub(listed, "a file listing without the hub's fields", where);
            }
            url = response.headers().firstValue("Link").map(HubClient::next).map(u -> absolute(u)).orElse(null);
        }
        return files;
    }

    /**
     * Opens a file's contents from byte {@code from} on. The answer's status says whether the server honoured the
     * range (206) or sends the whole file (200).
     */
    public HttpResponse<InputStream> open(RepoType type, String repoId, String commit, String path, long from,
            String where) {
        String url = env.endpoint() + "/" + type.urlPrefix() + repoId + "/resolve/" + encode(commit) + "/"
                + encodePath(path);
        return send(url, "GET", from > 0 ? "bytes=" + from + "-" : null, HttpResponse.BodyHandlers.ofInputStream(),
                type, repoId, commit, where);
    }

    private String getText(String url, RepoType type, String repoId, String revision, String where) {
        return bounded(url, send(url, "GET", null, HttpResponse.BodyHandlers.ofInputStream(), type, repoId, revision,
                where), where);
    }

    /**
     * An API answer's text, at most {@link #MAX_ANSWER_BYTES}: a server that answers without end (a wrong
     * HF_ENDPOINT, a proxy's stream) is one line, not all memory (#26: nothing read from outside is unbounded).
     */
    private String bounded(String url, HttpResponse<InputStream> response, String where) {
        byte[] bytes;
        try (InputStream in = response.body()) {
            bytes = in.readNBytes(MAX_ANSWER_BYTES + 1);
        } catch (IOException e) {
            throw new UserError(where, "the hub at " + env.endpoint() + " broke off its answer to " + url + ": "
                    + e.getMessage(), "run it again; check the network or HF_ENDPOINT");
        }
        if (bytes.length > MAX_ANSWER_BYTES) {
            throw notAHub(url, "an answer over " + dev.finetune.recipes.BoundedFiles.size(MAX_ANSWER_BYTES), where);
        }
        return new String(bytes, StandardCharsets.UTF_8);
    }

    /** The answer as JSON; anything else (an HTML page of a proxy or captive portal) is one line. */
    private JsonElement json(String url, String text, String where) {
        try {
            JsonElement parsed = JsonParser.parseString(text);
            if (!parsed.isJsonObject() && !parsed.isJsonArray()) {
                throw new IllegalStateException("a bare value");
            }
            return parsed;
        } catch (RuntimeException e) {
            throw notAHub(url, "an answer that is not JSON", where);
        }
    }

    private UserError notAHub(String url, String what, String where) {
        return new UserError(where, env.endpoint() + " sent " + what + " for " + url + ", so it does not look like a "
                + "Hugging Face hub", "check HF_ENDPOINT (unset, it is https://huggingface.co), or a proxy between");
    }

    private <T> HttpResponse<T> send(String url, String method, String range, HttpResponse.BodyHandler<T> body,
            RepoType type, String repoId, String revision, String where) {
        URI uri = URI.create(url);
        String hubHost = URI.create(env.endpoint()).getAuthority();
        for (int hop = 0; hop <= MAX_REDIRECTS; hop++) {
            HttpRequest.Builder request = HttpRequest.newBuilder(uri).timeout(Duration.ofSeconds(60))
                    .header("User-Agent", "finetune").header("Accept-Encoding", "identity");
            // the token goes to the hub only: a redirect to a storage host is followed without it
            if (env.hasToken() && hubHost.equals(uri.getAuthority())) {
                request.header("Authorization", "Bearer " + env.token());
            }
            if (range != null) {
                request.header("Range", range);
            }
            request.method(method, HttpRequest.BodyPublishers.noBody());
            HttpResponse<T> response;
            try {
                response = http.send(request.build(), body);
            } catch (ConnectException | HttpConnectTimeoutException e) {
                throw unreachable(where, repoId, "connection refused or timed out");
            } catch (HttpTimeoutException e) {
                throw unreachable(where, repoId, "no answer within 60 s");
            } catch (IOException e) {
                throw unreachable(where, repoId, e.getClass().getSimpleName()
                        + (e.getMessage() == null ? "" : ": " + e.getMessage()));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new UserError(where, "interrupted while talking to " + env.endpoint(), "run it again");
            }
            int status = response.statusCode();
            if (status >= 300 && status < 400 && response.headers().firstValue("Location").isPresent()) {
                discard(response);
                uri = uri.resolve(response.headers().firstValue("Location").get());
                continue;
            }
            if (status >= 400) {
                String code = response.headers().firstValue("X-Error-Code").orElse("");
                discard(response);
                throw refusal(status, code, type, repoId, revision, where);
            }
            return response;
        }
        throw new UserError(where, "more than " + MAX_REDIRECTS + " redirects fetching " + repoId + " from "
                + env.endpoint(), "check HF_ENDPOINT");
    }

    private UserError unreachable(String where, String repoId, String reason) {
        return new UserError(where, "cannot reach the hub at " + env.endpoint() + " (HF_ENDPOINT) for " + repoId + ": "
                + reason, "check the network or HF_ENDPOINT; on a machine without internet, run 'finetune download "
                + repoId + "' where there is one, copy the cache (" + env.cacheDir() + ") and set HF_HUB_OFFLINE=1");
    }

    private UserError refusal(int status, String code, RepoType type, String repoId, String revision, String where) {
        String kind = type == RepoType.MODEL ? "model" : "dataset";
        String page = env.endpoint() + "/" + type.urlPrefix() + repoId;
        if (code.equals("GatedRepo") || status == 403) {
            return new UserError(where, kind + " " + repoId + " is gated and " + (env.hasToken()
                    ? "the token from " + env.tokenSource() + " has no access to it" : "no token is set"),
                    "accept its licence at " + page + " while logged in, then set HF_TOKEN to a token of that account");
        }
        if (code.equals("RevisionNotFound")) {
            return new UserError(where, "revision '" + revision + "' does not exist in " + kind + " " + repoId,
                    "check the branch, tag or commit (see " + page + "/tree/main)");
        }
        if (code.equals("EntryNotFound")) {
            return new UserError(where, "a file listed for " + repoId + "@" + revision + " is not there any more",
                    "run again: the repo changed while it was read");
        }
        if (code.equals("RepoNotFound") || status == 404 || status == 401) {
            return new UserError(where, "no " + kind + " repo '" + repoId + "' on " + env.endpoint()
                    + (env.hasToken() ? " that the token from " + env.tokenSource() + " can see" : " (or it is private)"),
                    "check the id" + (type == RepoType.MODEL ? "" : " (a local file needs a path such as ./data.jsonl)")
                            + (env.hasToken() ? "" : "; for a private repo set HF_TOKEN"));
        }
        return new UserError(where, env.endpoint() + " answered HTTP " + status + " for " + repoId,
                "try again later; with a cached copy, HF_HUB_OFFLINE=1 uses it without asking the hub");
    }

    private static void discard(HttpResponse<?> response) {
        if (response.body() instanceof InputStream in) {
            try {
                in.close();
            } catch (IOException e) {
                // nothing to keep from a body we do not read
            }
        }
    }

    private static String next(String link) {
        Matcher m = NEXT_LINK.matcher(link);
        return m.find() ? m.group(1) : null;
    }

    private String absolute(String url) {
        return url.startsWith("http://") || url.startsWith("https://") ? url : env.endpoint() + (url.startsWith("/") ? "" : "/") + url;
    }

    static String encode(String segment) {
        return URLEncoder.encode(segment, StandardCharsets.UTF_8).replace("+", "%20");
    }

    /** A repo path keeps its slashes; each segment is escaped. */
    static String encodePath(String path) {
        StringBuilder out = new StringBuilder();
        for (String part : path.split("/", -1)) {
            if (out.length() > 0) {
                out.append('/');
            }
            out.append(encode(part));
        }
        return out.toString();
    }
}
