package io.ds4j.gpu;

import io.ds4j.gpu.bindings.ds4j_gpu_h;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

import static io.ds4j.gpu.bindings.ds4j_gpu_h.*;

/**
 * One GPU context (a device and its stream) of the ds4j GPU library, with checked wrappers of the runtime calls.
 * Device memory is addressed by plain {@code long} device pointers; {@link #ptr} turns one into the argument a
 * binding takes. Every failing call throws {@link GpuException}.
 */
public final class Gpu implements AutoCloseable {
    private final MemorySegment ctx;
    /** Device index. */
    public final int device;
    /** Device name as the runtime reports it. */
    public final String name;
    /** "cuda" or "hip". */
    public final String platform;
    /** Compute capability (NVIDIA; the gfx version on AMD) and multiprocessor (compute unit) count. */
    public final int ccMajor, ccMinor, multiprocessors;
    /** Total device memory, bytes. */
    public final long totalBytes;
    private boolean closed;

    private Gpu(MemorySegment ctx, int device, String name, String platform, int ccMajor, int ccMinor, int mps, long total) {
        this.ctx = ctx;
        this.device = device;
        this.name = name;
        this.platform = platform;
        this.ccMajor = ccMajor;
        this.ccMinor = ccMinor;
        this.multiprocessors = mps;
        this.totalBytes = total;
    }

    /**
     * Loads the library and opens a device.
     * @throws GpuUnavailableException naming what is missing: the library in this build, the GPU driver/runtime,
     *         or a device
     */
    public static Gpu open(int device) {
        requireDevice(device);
        try (Arena a = Arena.ofConfined()) {
            MemorySegment buf = a.allocate(256);
            check(ds4j_device_name(device, buf, 256), "device name");
            String name = buf.getString(0);
            MemorySegment i = a.allocate(ValueLayout.JAVA_INT, 3), l = a.allocate(ValueLayout.JAVA_LONG);
            check(ds4j_device_props(device, i, i.asSlice(4), i.asSlice(8), l), "device properties");
            MemorySegment out = a.allocate(ValueLayout.ADDRESS);
            check(ds4j_ctx_create(device, out), "creating a context on device " + device);
            return new Gpu(out.get(ValueLayout.ADDRESS, 0), device, name, platformName(), i.get(ValueLayout.JAVA_INT, 0),
                    i.get(ValueLayout.JAVA_INT, 4), i.get(ValueLayout.JAVA_INT, 8), l.get(ValueLayout.JAVA_LONG, 0));
        }
    }

    /**
     * Checks that the runtime sees a device, as {@link #open} does before it opens one, but opens none (no context is
     * created): what a process already running, maybe on that device, can tell of a device another start would open.
     * @throws GpuUnavailableException naming what is missing: the library in this build, the GPU driver/runtime, or the
     *         device
     */
    public static void requireDevice(int device) {
        int count = deviceCount();
        if (count == 0) throw new GpuUnavailableException("the GPU runtime (" + platformName() + ") found no GPU device");
        if (device < 0 || device >= count)
            throw new GpuUnavailableException("no GPU device " + device + ": the runtime sees " + count + " device(s)");
    }

    /**
     * Number of visible GPU devices (0 when the runtime works but has none).
     * @throws GpuUnavailableException when the library or the GPU runtime is missing
     */
    public static int deviceCount() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment n = a.allocate(ValueLayout.JAVA_INT);
            int rc;
            try {
                io.ds4j.gpu.bindings.NativeLibrary.path(); // the reason, every time, when there is no library
                rc = ds4j_device_count(n);
            } catch (UnsatisfiedLinkError | ExceptionInInitializerError | NoClassDefFoundError e) {
                throw new GpuUnavailableException(linkMessage(e), e);
            }
            if (rc != DS4J_OK()) {
                String msg = lastError();
                throw new GpuUnavailableException(msg.isEmpty() ? "GPU runtime error " + rc : msg);
            }
            return n.get(ValueLayout.JAVA_INT, 0);
        }
    }

    private static String linkMessage(Throwable e) {
        Throwable t = e;
        while (t.getCause() != null && (t.getMessage() == null || t instanceof ExceptionInInitializerError)) t = t.getCause();
        return t.getMessage() != null ? t.getMessage() : e.toString();
    }

    /** "cuda" or "hip": what the library was built for. */
    public static String platformName() {
        return ds4j_platform().reinterpret(64).getString(0);
    }

    /** The calling thread's last library error message. */
    public static String lastError() {
        return ds4j_last_error().reinterpret(4096).getString(0);
    }

    /** @throws GpuException when rc is not DS4J_OK, with "what: library message" */
    public static void check(int rc, String what) {
        if (rc != DS4J_OK()) throw new GpuException(rc, what + ": " + lastError());
    }

    /** A device pointer as a binding argument (0 → NULL). */
    public static MemorySegment ptr(long address) {
        return address == 0 ? MemorySegment.NULL : MemorySegment.ofAddress(address);
    }

    /**
     * The library's launch counts since it was loaded (process-wide, ds4j_launch_counts): {kernel launches queued by
     * its entry points (a captured kernel counts once, a replayed one never), device copies and fills (uploads
     * included), graph launches}.
     */
    public long[] launchCounts() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment k = a.allocate(ValueLayout.JAVA_LONG), c = a.allocate(ValueLayout.JAVA_LONG), g = a.allocate(ValueLayout.JAVA_LONG);
            check(ds4j_launch_counts(k, c, g), "launch counts");
            return new long[]{k.get(ValueLayout.JAVA_LONG, 0), c.get(ValueLayout.JAVA_LONG, 0), g.get(ValueLayout.JAVA_LONG, 0)};
        }
    }

    /** The context handle for bindings. */
    public MemorySegment ctx() {
        if (closed) throw new IllegalStateException("GPU context is closed");
        return ctx;
    }

    /**
     * Allocates device memory.
     * @param what for the message when it does not fit (e.g. "layer 3 experts")
     * @throws GpuException (code DS4J_ERR_OOM) naming what did not fit, its size and the free memory
     */
    public long malloc(long bytes, String what) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment out = a.allocate(ValueLayout.ADDRESS);
            int rc = ds4j_malloc(ctx(), bytes, out);
            if (rc != DS4J_OK()) throw new GpuException(rc, "allocating " + what + " (" + mib(bytes) + "): " + lastError());
            return out.get(ValueLayout.ADDRESS, 0).address();
        }
    }

    /** Frees device memory from {@link #malloc} (0 is ignored); waits for the device first. */
    public void free(long p) {
        if (p != 0) check(ds4j_free(ctx(), ptr(p)), "free");
    }

    /** Copies a native host segment (e.g. a mapped checkpoint tensor) to device memory. */
    public void upload(long dst, MemorySegment src) {
        if (!src.isNative()) {
            try (Arena a = Arena.ofConfined()) {
                MemorySegment n = a.allocate(src.byteSize(), 16);
                n.copyFrom(src);
                check(ds4j_upload(ctx(), ptr(dst), n, n.byteSize()), "upload");
            }
            return;
        }
        check(ds4j_upload(ctx(), ptr(dst), src, src.byteSize()), "upload");
    }

    /** Copies v to device memory at dst (4·v.length bytes). */
    public void upload(long dst, float[] v) {
        try (Arena a = Arena.ofConfined()) {
            upload(dst, a.allocateFrom(ValueLayout.JAVA_FLOAT, v));
        }
    }

    /** Copies v to device memory at dst (4·v.length bytes). */
    public void upload(long dst, int[] v) {
        try (Arena a = Arena.ofConfined()) {
            upload(dst, a.allocateFrom(ValueLayout.JAVA_INT, v));
        }
    }

    /** Copies v to device memory at dst (8·v.length bytes; device pointer tables). */
    public void upload(long dst, long[] v) {
        try (Arena a = Arena.ofConfined()) {
            upload(dst, a.allocateFrom(ValueLayout.JAVA_LONG, v));
        }
    }

    /** Copies v (F16 bit patterns) to device memory at dst (2·v.length bytes). */
    public void upload(long dst, short[] v) {
        try (Arena a = Arena.ofConfined()) {
            upload(dst, a.allocateFrom(ValueLayout.JAVA_SHORT, v));
        }
    }

    /** Allocates and fills a device float array; what names it in an out-of-memory message. */
    public long uploadNew(float[] v, String what) {
        long p = malloc(4L * v.length, what);
        upload(p, v);
        return p;
    }

    /** Allocates and fills a device int32 array. */
    public long uploadNew(int[] v, String what) {
        long p = malloc(4L * v.length, what);
        upload(p, v);
        return p;
    }

    /** Waits for all queued work and copies n floats from the device. */
    public float[] downloadFloats(long src, int n) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment h = a.allocate(4L * n, 16);
            check(ds4j_download(ctx(), h, ptr(src), 4L * n), "download");
            return h.toArray(ValueLayout.JAVA_FLOAT);
        }
    }

    /** Waits for all queued work and copies n ints from the device. */
    public int[] downloadInts(long src, int n) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment h = a.allocate(4L * n, 16);
            check(ds4j_download(ctx(), h, ptr(src), 4L * n), "download");
            return h.toArray(ValueLayout.JAVA_INT);
        }
    }

    /** Waits for all queued work and copies n F16 values (as raw shorts) from the device. */
    public short[] downloadShorts(long src, int n) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment h = a.allocate(2L * n, 16);
            check(ds4j_download(ctx(), h, ptr(src), 2L * n), "download");
            return h.toArray(ValueLayout.JAVA_SHORT);
        }
    }

    /** Device-to-device copy, ordered on the stream. */
    public void copy(long dst, long src, long bytes) {
        check(ds4j_copy(ctx(), ptr(dst), ptr(src), bytes), "device copy");
    }

    /** Sets bytes at dst to the byte value, ordered on the stream. */
    public void memset(long dst, int value, long bytes) {
        check(ds4j_memset(ctx(), ptr(dst), value, bytes), "memset");
    }

    /** Waits for all queued work; reports faults of earlier kernels. */
    public void sync() {
        check(ds4j_ctx_sync(ctx()), "synchronize");
    }

    /** {free, total} device memory in bytes. */
    public long[] memory() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment f = a.allocate(ValueLayout.JAVA_LONG), t = a.allocate(ValueLayout.JAVA_LONG);
            check(ds4j_device_memory(ctx(), f, t), "device memory");
            return new long[]{f.get(ValueLayout.JAVA_LONG, 0), t.get(ValueLayout.JAVA_LONG, 0)};
        }
    }

    /**
     * Whether steps of at least {@code DS4J_TC_MIN_ROWS} rows (prefill) run on tensor cores here: a CUDA build of the
     * library on a device of compute capability 8.0 or newer, and the environment variable DS4J_TC not set to 0.
     */
    public boolean tensorCores() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(ValueLayout.JAVA_INT);
            check(ds4j_tc_available(ctx(), v), "tensor-core query");
            return v.get(ValueLayout.JAVA_INT, 0) != 0;
        }
    }

    static String mib(long bytes) {
        return String.format("%.1f MiB", bytes / 1048576.0);
    }

    @Override
    public String toString() {
        return name + " (" + platform + ", cc " + ccMajor + "." + ccMinor + ", " + multiprocessors + " SMs, "
                + String.format("%.1f GiB", totalBytes / 1073741824.0) + ")";
    }

    @Override
    public void close() {
        if (closed) return;
        closed = true;
        check(ds4j_gpu_h.ds4j_ctx_destroy(ctx), "destroying the context");
    }
}
