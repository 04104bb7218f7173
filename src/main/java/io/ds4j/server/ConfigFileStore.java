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
 * without end. This one reads only a readable regular file of at most {@link #MAX_BYTES} (links followed), checked
 * before the open and bounded while reading, each open and read waited for at most {@link #READ_WAIT_MS} (a FIFO put
 * in the file's place between the check and the open would block it for good); anything else fails the scan with
 * {@link #unusable}'s reason, which {@link Ds4jServer} reports once.
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
     * regular file (a FIFO, a socket or a device)", "is larger than 1048576 bytes (N)", "cannot be read (permission
     * denied)"), or null for a readable regular file of at most {@link #MAX_BYTES}. Reads the file's attributes only
     * (never opens it): safe on a FIFO. Blocking.
     */
    public static String unusable(Path file) {
        try {
            BasicFileAttributes a = Files.readAttributes(file, BasicFileAttributes.class);
            if (a.isDirectory()) return "is not a regular file (a folder)";
            if (!a.isRegularFile()) return "is not a regular file (a FIFO, a socket or a device)";
            if (a.size() > MAX_BYTES) return "is larger than " + MAX_BYTES + " bytes (" + a.size() + ")";
            if (!Files.isReadable(file)) return "cannot be read (permission denied)";
            return null;
        } catch (NoSuchFileException e) {
            return "is missing";
        } catch (IOException e) {
            return "cannot be read (" + e + ")";
        }
    }

    /** How long {@link #read} waits for the file's open and read, in ms: a regular file's take microseconds. */
    static final long READ_WAIT_MS = 2000;

    /**
     * The threads the opens and reads run on: kept between scans (a scan every configScanMs would otherwise start a
     * thread each time); one a blocked open holds stays behind, and the next read takes another.
     */
    private static final java.util.concurrent.ExecutorService READERS = java.util.concurrent.Executors.newCachedThreadPool(
            Thread.ofPlatform().daemon().name("ds4j-config-read").factory());

    /**
     * The file's bytes, at most {@link #MAX_BYTES}. The open and the read run on a thread of {@link #READERS}, waited for
     * at most {@link #READ_WAIT_MS}: a FIFO put in the file's place between the check and the open blocks that open for
     * good (and, renamed over, can never be opened by a writer to free it), and Java cannot open without blocking; the
     * caller goes on (the next scan reads the file again), only that thread stays behind.
     * @throws IOException naming the reason when the file is unusable ({@link #unusable}), grew past the limit while
     *                     being read, or was not read in time
     */
    public static byte[] read(Path file) throws IOException {
        String why = unusable(file);
        if (why != null) throw new IOException("config file " + file + " " + why);
        java.util.concurrent.Future<byte[]> task = READERS.submit(() -> {
            try (InputStream in = Files.newInputStream(file)) {
                return in.readNBytes((int) MAX_BYTES + 1);
            }
        });
        byte[] b;
        try {
            b = task.get(READ_WAIT_MS, java.util.concurrent.TimeUnit.MILLISECONDS);
        } catch (java.util.concurrent.TimeoutException e) {
            throw new IOException("config file " + file + " was not read within " + READ_WAIT_MS
                    + " ms (a FIFO or a device put in its place while it was opened?)");
        } catch (java.util.concurrent.ExecutionException e) {
            throw e.getCause() instanceof IOException io ? io : new IOException(e.getCause());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new java.io.InterruptedIOException("config file " + file + ": interrupted while read");
        }
        if (b.length > MAX_BYTES) throw new IOException("config file " + file + " is larger than " + MAX_BYTES + " bytes");
        return b;
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
