package dev.finetune.recipes;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.Properties;

/** The version of this build, as Maven wrote it into {@code version.properties}: the one place it is read. */
public final class FinetuneVersion {
    private static final String VERSION = read();

    private FinetuneVersion() {}

    public static String get() {
        return VERSION;
    }

    private static String read() {
        try (InputStream in = FinetuneVersion.class.getResourceAsStream("version.properties")) {
            if (in == null) {
                throw new IllegalStateException("version.properties is missing from the recipes jar");
            }
            Properties p = new Properties();
            p.load(in);
            return p.getProperty("version");
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
