package io.ds4j.server;

import io.vertx.config.spi.ConfigStore;
import io.vertx.config.spi.ConfigStoreFactory;
import io.vertx.core.Future;
import io.vertx.core.Vertx;
import io.vertx.core.buffer.Buffer;
import io.vertx.core.json.JsonObject;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.attribute.BasicFileAttributes;

/**
 * The vertx-config store the server's configuration file is watched through (type {@value #TYPE}, configuration
 * {@code path}): vertx-config's own file store reads whatever the path names, so a FIFO put there held a blocking
 * thread at every scan until none was left (the playground's files and the reloads hung) and a link to /dev/zero read
 * without end. This one reads only a regular file of at most {@link #MAX_BYTES} (links followed), checked before the
 * open and bounded while reading, and its reads run one after another (at most one blocking thread, should a FIFO take
 * the file's place between the check and the open); anything else fails the scan with {@link #unusable}'s reason,
 * which {@link Ds4jServer} reports once.
 */
public final class ConfigFileStore implements ConfigStore {
    /** The store type to name in {@code ConfigStoreOptions.setType}. */
    public static final String TYPE = "ds4j-config-file";
    /** Largest configuration file read, in bytes: the shipped one is ~3 KB. */
    public static final long MAX_BYTES = 1 << 20;

    private final Vertx vertx;
    private final Path path;

    ConfigFileStore(Vertx vertx, Path path) {
        this.vertx = vertx;
        this.path = path;
    }

    /**
     * What makes {@code file} unusable as the configuration file, as a clause after its name ("is missing", "is not a
     * regular file (a FIFO, a socket or a device)", "is larger than 1048576 bytes (N)"), or null for a regular file of
     * at most {@link #MAX_BYTES}. Reads the file's attributes only (never opens it): safe on a FIFO. Blocking.
     */
    public static String unusable(Path file) {
        try {
            BasicFileAttributes a = Files.readAttributes(file, BasicFileAttributes.class);
            if (a.isDirectory()) return "is not a regular file (a folder)";
            if (!a.isRegularFile()) return "is not a regular file (a FIFO, a socket or a device)";
            if (a.size() > MAX_BYTES) return "is larger than " + MAX_BYTES + " bytes (" + a.size() + ")";
            return null;
        } catch (NoSuchFileException e) {
            return "is missing";
        } catch (IOException e) {
            return "cannot be read (" + e + ")";
        }
    }

    /**
     * The file's bytes, at most {@link #MAX_BYTES}.
     * @throws IOException naming the reason when the file is unusable ({@link #unusable}) or grew past the limit while
     *                     being read
     */
    public static byte[] read(Path file) throws IOException {
        String why = unusable(file);
        if (why != null) throw new IOException("config file " + file + " " + why);
        try (InputStream in = Files.newInputStream(file)) {
            byte[] b = in.readNBytes((int) MAX_BYTES + 1);
            if (b.length > MAX_BYTES) throw new IOException("config file " + file + " is larger than " + MAX_BYTES + " bytes");
            return b;
        }
    }

    @Override
    public Future<Buffer> get() {
        return vertx.executeBlocking(() -> Buffer.buffer(read(path)), true);
    }

    @Override
    public Future<Void> close() {
        return Future.succeededFuture();
    }

    /** Registered in META-INF/services for vertx-config. */
    public static final class Factory implements ConfigStoreFactory {
        @Override
        public String name() {
            return TYPE;
        }

        @Override
        public ConfigStore create(Vertx vertx, JsonObject configuration) {
            String p = configuration.getString("path");
            if (p == null) throw new IllegalArgumentException(TYPE + ": no path");
            return new ConfigFileStore(vertx, Path.of(p));
        }
    }
}
