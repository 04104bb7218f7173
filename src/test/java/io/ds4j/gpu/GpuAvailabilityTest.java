package io.ds4j.gpu;

import io.ds4j.engine.Backend;
import io.ds4j.app.Backends;
import io.ds4j.gpu.bindings.NativeLibrary;
import org.junit.jupiter.api.Test;

import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.*;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Where no GPU can be used (CI: nvcc but no driver), {@code backend: hip} fails at start with a message that names
 * what is missing, and {@code backend: cpu} is unaffected. When the build made the library, it must load without a
 * driver (it links the CUDA runtime statically) and report the missing driver at its first runtime call.
 */
class GpuAvailabilityTest {
    static final Path MODEL = Path.of("src/test/resources/fixtures/tiny-hf-bf16");

    static boolean gpuPresent() {
        try {
            return Gpu.deviceCount() > 0;
        } catch (GpuUnavailableException e) {
            return false;
        }
    }

    @Test
    void hipFailsClearlyWithoutAGpuAndCpuStillWorks() throws Exception {
        assumeTrue(!gpuPresent(), "a GPU is present: covered by the gpu-tagged tests");
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Backends.open("hip", MODEL));
        String msg = e.getMessage();
        System.out.println("backend hip without a GPU: " + msg);
        assertTrue(msg.startsWith("backend 'hip' is not available on this machine: "), msg);
        assertTrue(msg.contains("libcuda.so.1") || msg.contains("no GPU") || msg.contains("GPU library")
                || msg.contains("libds4j_gpu.so"), "names what is missing: " + msg);
        assertTrue(msg.endsWith("use backend 'cpu'"), msg);
        try (Backend cpu = Backends.open("cpu", MODEL)) {
            float[] lg = cpu.forward(cpu.newSequence(4), new int[]{1, 2, 3}, 0, 3, new int[]{2});
            assertEquals(cpu.config().vocabSize, lg.length);
            for (float v : lg) assertTrue(Float.isFinite(v));
        }
    }

    @Test
    void builtLibraryLoadsWithoutADriverAndReportsItMissing() {
        assumeTrue(getClass().getClassLoader().getResource(NativeLibrary.resource()) != null,
                "this build has no GPU library (no nvcc/hipcc at build time)");
        assumeTrue(!gpuPresent(), "a GPU is present");
        // dlopen succeeded if we get a runtime status back rather than an UnsatisfiedLinkError
        assertEquals("cuda".equals(Gpu.platformName()) || "hip".equals(Gpu.platformName()), true);
        GpuUnavailableException e = assertThrows(GpuUnavailableException.class, () -> Gpu.open(0));
        System.out.println("library " + NativeLibrary.path() + " (" + Gpu.platformName() + ") without a driver: " + e.getMessage());
        assertFalse(e.getMessage().isBlank());
        if ("cuda".equals(Gpu.platformName()) && !java.nio.file.Files.exists(Path.of("/dev/nvidiactl")))
            assertTrue(e.getMessage().contains("libcuda.so.1") || e.getMessage().contains("no GPU"), e.getMessage());
    }
}
