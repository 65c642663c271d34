package dev.finetune.recipes.hub;

/** The two kinds of hub repository finetune reads; the names are those of the hub's URLs and cache folders. */
public enum RepoType {
    MODEL("models", ""),
    DATASET("datasets", "datasets/");

    private final String plural;
    private final String urlPrefix;

    RepoType(String plural, String urlPrefix) {
        this.plural = plural;
        this.urlPrefix = urlPrefix;
    }

    /** {@code models} or {@code datasets}: the cache folder prefix and the {@code /api/<plural>/} path. */
    public String plural() {
        return plural;
    }

    /** What precedes the repo id in a {@code resolve} URL: nothing for models, {@code datasets/} for datasets. */
    public String urlPrefix() {
        return urlPrefix;
    }
}
