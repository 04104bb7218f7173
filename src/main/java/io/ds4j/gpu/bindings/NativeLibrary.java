package io.ds4j.gpu.bindings;

import java.io.IOException;
import java.io.InputStream;
import java.net.URISyntaxException;
import java.net.URL;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.Locale;

/**
 * Finds the ds4j GPU library ({@code libds4j_gpu.so}, built from src/main/native) without manual steps:
 * <ol>
 *   <li>{@code -Dds4j.gpu.library=FILE} or the environment variable {@code DS4J_GPU_LIBRARY};</li>
 *   <li>the class-path resource {@code native/<os>-<arch>/libds4j_gpu.so}: used in place when it is a file
 *       (target/classes), else extracted once from the jar into {@code $DS4J_HOME/native/<sha256>/} (default
 *       {@code ~/.cache/ds4j/native}), keyed by its content so that a rebuilt library never meets a stale copy.</li>
 * </ol>
 * The Maven build puts the library into the jar only when nvcc or hipcc was available (see the README, "GPU").
 */
public final class NativeLibrary {
    private NativeLibrary() {}

    /** File name of the library on Linux. */
    public static final String FILE = "libds4j_gpu.so";

    private static Path path;
    private static String failure;

    /** Class-path resource of the library for this machine, e.g. {@code native/linux-x86_64/libds4j_gpu.so}. */
    public static String resource() {
        String os = System.getProperty("os.name", "").toLowerCase(Locale.ROOT).startsWith("linux") ? "linux"
                : System.getProperty("os.name", "unknown").toLowerCase(Locale.ROOT).replace(' ', '_');
        String arch = switch (System.getProperty("os.arch", "")) {
            case "amd64", "x86_64" -> "x86_64";
            case "aarch64", "arm64" -> "aarch64";
            default -> System.getProperty("os.arch");
        };
        return "native/" + os + "-" + arch + "/" + FILE;
    }

    /**
     * The library file, located (and extracted if needed) on first use.
     * @throws UnsatisfiedLinkError naming what is missing when there is no library for this machine
     */
    public static synchronized Path path() {
        if (path != null) return path;
        if (failure != null) throw new UnsatisfiedLinkError(failure);
        try {
            path = locate();
            return path;
        } catch (UnsatisfiedLinkError e) {
            failure = e.getMessage();
            throw e;
        }
    }

    private static Path locate() {
        String explicit = System.getProperty("ds4j.gpu.library");
        String source = "-Dds4j.gpu.library";
        if (explicit == null || explicit.isBlank()) {
            explicit = System.getenv("DS4J_GPU_LIBRARY");
            source = "DS4J_GPU_LIBRARY";
        }
        if (explicit != null && !explicit.isBlank()) {
            Path p = Path.of(explicit).toAbsolutePath();
            if (!Files.isRegularFile(p)) throw new UnsatisfiedLinkError(source + " names " + p + ", which does not exist");
            return p;
        }
        String res = resource();
        URL url = NativeLibrary.class.getClassLoader().getResource(res);
        if (url == null)
            throw new UnsatisfiedLinkError("this build of ds4j has no GPU library for this machine (class-path resource " + res
                    + " not found). The build compiles src/main/native only where nvcc or hipcc is installed "
                    + "(/usr/local/cuda/bin/nvcc, /opt/rocm/bin/hipcc, or -Dds4j.native=nvcc|hipcc with it on the PATH) "
                    + "and not with DS4J_NATIVE=none (bin/ds4j rebuilds only when sources change: remove target/ds4j.jar "
                    + "to rebuild with the GPU library); or point -Dds4j.gpu.library (DS4J_GPU_LIBRARY) at a libds4j_gpu.so");
        if ("file".equals(url.getProtocol())) {
            try {
                return Path.of(url.toURI());
            } catch (URISyntaxException e) {
                throw new UnsatisfiedLinkError("bad library location " + url + ": " + e.getMessage());
            }
        }
        try {
            return extract(url);
        } catch (IOException e) {
            throw new UnsatisfiedLinkError("cannot extract " + res + " from " + url + " into " + cacheRoot() + ": " + e);
        }
    }

    /** {@code $DS4J_HOME/native}, default {@code ~/.cache/ds4j/native}. */
    static Path cacheRoot() {
        String home = System.getenv("DS4J_HOME");
        Path base = home != null && !home.isBlank() ? Path.of(home) : Path.of(System.getProperty("user.home"), ".cache", "ds4j");
        return base.resolve("native");
    }

    private static Path extract(URL url) throws IOException {
        byte[] bytes;
        try (InputStream in = url.openStream()) {
            bytes = in.readAllBytes();
        }
        String hash;
        try {
            hash = HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(bytes)).substring(0, 16);
        } catch (NoSuchAlgorithmException e) {
            throw new IOException(e);
        }
        Path dir = cacheRoot().resolve(hash);
        Path lib = dir.resolve(FILE);
        if (Files.isRegularFile(lib) && Files.size(lib) == bytes.length) return lib;
        Files.createDirectories(dir);
        Path tmp = Files.createTempFile(dir, ".libds4j_gpu", ".tmp");
        try {
            Files.write(tmp, bytes);
            try {
                Files.move(tmp, lib, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
            } catch (AtomicMoveNotSupportedException e) {
                Files.move(tmp, lib, StandardCopyOption.REPLACE_EXISTING);
            }
        } finally {
            Files.deleteIfExists(tmp);
        }
        return lib;
    }
}
