package dev.finetune.recipes.hub;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

/**
 * The Hugging Face settings of this process, read from the same variables and with the same precedence as
 * {@code huggingface_hub}, so that a cache, a mirror or a token set up for {@code transformers} serves finetune
 * unchanged: {@code HF_HUB_CACHE} (else {@code HUGGINGFACE_HUB_CACHE}, else {@code HF_HOME/hub}, else
 * {@code $XDG_CACHE_HOME/huggingface/hub}, else {@code ~/.cache/huggingface/hub}), {@code HF_ENDPOINT},
 * {@code HF_HUB_OFFLINE} / {@code TRANSFORMERS_OFFLINE}, and {@code HF_TOKEN} (else {@code HUGGING_FACE_HUB_TOKEN},
 * else the file {@code HF_TOKEN_PATH}, else {@code HF_HOME/token}).
 *
 * <p>The token is held here and handed only to the HTTP layer: {@link #toString()} never shows it, and no message
 * that this package builds contains it.
 */
public final class HubEnvironment {
    public static final String DEFAULT_ENDPOINT = "https://huggingface.co";
    private static final Set<String> TRUE = Set.of("1", "ON", "YES", "TRUE");

    private final Path cache;
    private final String endpoint;
    private final boolean offline;
    private final String token;
    private final String tokenSource;

    private HubEnvironment(Path cache, String endpoint, boolean offline, String token, String tokenSource) {
        this.cache = cache;
        this.endpoint = endpoint;
        this.offline = offline;
        this.token = token;
        this.tokenSource = tokenSource;
    }

    /** This process's settings. */
    public static HubEnvironment current() {
        return of(System.getenv());
    }

    public static HubEnvironment of(Map<String, String> env) {
        String home = System.getProperty("user.home");
        String xdg = nonBlank(env.get("XDG_CACHE_HOME"));
        Path hfHome = Path.of(nonBlank(env.get("HF_HOME")) != null ? expand(env.get("HF_HOME"), home)
                : (xdg != null ? expand(xdg, home) : home + "/.cache") + "/huggingface");
        String cacheVar = nonBlank(env.get("HF_HUB_CACHE")) != null ? env.get("HF_HUB_CACHE") : nonBlank(env.get("HUGGINGFACE_HUB_CACHE"));
        Path cache = cacheVar != null ? Path.of(expand(cacheVar, home)) : hfHome.resolve("hub");
        String endpoint = nonBlank(env.get("HF_ENDPOINT")) != null ? env.get("HF_ENDPOINT").strip() : DEFAULT_ENDPOINT;
        while (endpoint.endsWith("/")) {
            endpoint = endpoint.substring(0, endpoint.length() - 1);
        }
        boolean offline = isTrue(nonBlank(env.get("HF_HUB_OFFLINE")) != null ? env.get("HF_HUB_OFFLINE") : env.get("TRANSFORMERS_OFFLINE"));
        String token = clean(env.get("HF_TOKEN"));
        String source = token != null ? "HF_TOKEN" : null;
        if (token == null) {
            token = clean(env.get("HUGGING_FACE_HUB_TOKEN"));
            source = token != null ? "HUGGING_FACE_HUB_TOKEN" : null;
        }
        if (token == null) {
            Path file = nonBlank(env.get("HF_TOKEN_PATH")) != null ? Path.of(expand(env.get("HF_TOKEN_PATH"), home)) : hfHome.resolve("token");
            try {
                token = Files.isRegularFile(file) ? clean(Files.readString(file)) : null;
                source = token != null ? "the token file " + file : null;
            } catch (IOException e) {
                token = null; // an unreadable token file is as good as none: the hub then answers 401 for gated repos
            }
        }
        return new HubEnvironment(cache.toAbsolutePath().normalize(), endpoint, offline, token, source);
    }

    /** The cache root, e.g. {@code ~/.cache/huggingface/hub}. */
    public Path cacheDir() {
        return cache;
    }

    public HubCache cache() {
        return new HubCache(cache);
    }

    /** {@code HF_ENDPOINT} without a trailing slash. */
    public String endpoint() {
        return endpoint;
    }

    /** {@code HF_HUB_OFFLINE} or {@code TRANSFORMERS_OFFLINE}: the cache only, never a network call. */
    public boolean offline() {
        return offline;
    }

    public boolean hasToken() {
        return token != null;
    }

    /** Where the token came from ({@code HF_TOKEN}, the token file), never the token; {@code null} without one. */
    public String tokenSource() {
        return tokenSource;
    }

    /** The token itself, for the {@code Authorization} header only. */
    public String token() {
        return token;
    }

    /** The same settings with another endpoint/offline switch (tests and {@code finetune download}). */
    public HubEnvironment withOffline(boolean offline) {
        return new HubEnvironment(cache, endpoint, offline, token, tokenSource);
    }

    @Override
    public String toString() {
        return "HubEnvironment[cache=" + cache + ", endpoint=" + endpoint + ", offline=" + offline + ", token="
                + (token == null ? "none" : "from " + tokenSource) + "]";
    }

    private static boolean isTrue(String value) {
        return value != null && TRUE.contains(value.strip().toUpperCase(Locale.ROOT));
    }

    private static String nonBlank(String s) {
        return s == null || s.isBlank() ? null : s;
    }

    /** huggingface_hub strips whitespace and treats an empty token as none. */
    private static String clean(String token) {
        if (token == null) {
            return null;
        }
        String t = token.replace("\r", "").replace("\n", "").strip();
        return t.isEmpty() ? null : t;
    }

    /** {@code ~} and {@code $VAR} as Python's expanduser/expandvars would see them for the usual cases. */
    private static String expand(String path, String home) {
        String p = path.strip();
        return p.equals("~") ? home : p.startsWith("~/") ? home + p.substring(1) : p;
    }
}
