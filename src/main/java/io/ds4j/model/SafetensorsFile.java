package io.ds4j.model;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Collections;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;

/**
 * One {@code .safetensors} file, memory-mapped read-only through the FFM API (no tensor is copied onto the heap).
 *
 * <p>Layout: 8-byte little-endian header length N, N bytes of UTF-8 JSON (an object mapping tensor names to
 * {@code {"dtype", "shape", "data_offsets": [begin, end]}} plus an optional {@code "__metadata__"} string map),
 * then the data region; offsets are relative to the start of the data region (byte 8 + N).
 *
 * <p>Everything is validated on {@link #open}: sane header length, a JSON object, known dtypes
 * ({@link DType#fromSafetensors}), non-negative shapes, offsets inside the data region and
 * {@code end − begin == product(shape) × dtype.size} (FP4 is stored as I8/U8 bytes, so no sub-byte packing).
 * Problems are reported as {@link CheckpointException}s naming the file and, where relevant, the tensor.
 * Instances are thread-safe for reading; {@link #close()} unmaps the file, after which views must not be used.
 */
public final class SafetensorsFile implements AutoCloseable {
    /** The reference implementation refuses headers above 100 MB; so do we. */
    public static final long MAX_HEADER = 100_000_000L;

    private static final ObjectMapper JSON = new ObjectMapper().enable(JsonParser.Feature.STRICT_DUPLICATE_DETECTION);

    private final Path file;
    private final Arena arena;
    private final MemorySegment mapped;
    private final Map<String, StoredTensor> tensors;
    private final Map<String, String> metadata;

    private SafetensorsFile(Path file, Arena arena, MemorySegment mapped, Map<String, StoredTensor> tensors,
                            Map<String, String> metadata) {
        this.file = file;
        this.arena = arena;
        this.mapped = mapped;
        this.tensors = tensors;
        this.metadata = metadata;
    }

    /**
     * Maps and validates a file.
     * @throws CheckpointException when the file is missing, unreadable, truncated or has a corrupt header,
     *         an unsupported dtype, or offsets/sizes that do not match the shape
     */
    /**
     * Refuses a file too short to be safetensors (its first 8 bytes give the header's length): the one check that
     * {@link #open} and {@link Checkpoint#inspect} (before a server binds its port) share.
     * @throws CheckpointException naming the file and its size
     */
    static void checkLength(Path file, long size) throws CheckpointException {
        if (size < 8) throw new CheckpointException(file, null, "truncated: file has " + size + " bytes, less than the 8-byte header length");
    }

    public static SafetensorsFile open(Path file) throws CheckpointException {
        if (!Files.isRegularFile(file)) throw new CheckpointException(file, null, "file not found");
        Arena arena = Arena.ofShared();
        try {
            MemorySegment seg;
            try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
                long size = ch.size();
                checkLength(file, size);
                seg = ch.map(FileChannel.MapMode.READ_ONLY, 0, size, arena);
            } catch (IOException e) {
                throw new CheckpointException(file, null, "cannot read file: " + e.getMessage());
            }
            SafetensorsFile f = parse(file, arena, seg.asReadOnly());
            arena = null; // owned by f now
            return f;
        } finally {
            if (arena != null) arena.close();
        }
    }

    private static SafetensorsFile parse(Path file, Arena arena, MemorySegment seg) throws CheckpointException {
        long size = seg.byteSize();
        long n = seg.get(ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN), 0);
        if (n < 0 || n > size - 8)
            throw new CheckpointException(file, null, "corrupt header or truncated file: header length "
                    + Long.toUnsignedString(n) + " + 8 is larger than the file (" + size + " bytes)");
        if (n == 0 || n > MAX_HEADER)
            throw new CheckpointException(file, null, "corrupt header: header length " + n + " is not plausible");
        byte[] headerBytes = seg.asSlice(8, n).toArray(ValueLayout.JAVA_BYTE);
        JsonNode root;
        try {
            root = JSON.readTree(headerBytes);
        } catch (IOException e) {
            throw new CheckpointException(file, null, "corrupt header: not valid JSON (" + firstLine(e.getMessage()) + ")");
        }
        if (root == null || !root.isObject()) throw new CheckpointException(file, null, "corrupt header: not a JSON object");

        long dataStart = 8 + n;
        long dataLen = size - dataStart;
        Map<String, String> meta = new LinkedHashMap<>();
        Map<String, StoredTensor> tensors = new LinkedHashMap<>();
        long maxEnd = 0;
        String maxEndName = null;
        record Pending(String name, DType dtype, long[] shape, long begin, long end) {}
        java.util.List<Pending> pending = new java.util.ArrayList<>();
        for (Iterator<Map.Entry<String, JsonNode>> it = root.properties().iterator(); it.hasNext(); ) {
            Map.Entry<String, JsonNode> e = it.next();
            String name = e.getKey();
            JsonNode v = e.getValue();
            if (name.equals("__metadata__")) {
                if (!v.isObject()) throw new CheckpointException(file, null, "corrupt header: __metadata__ is not an object");
                for (Map.Entry<String, JsonNode> m : v.properties())
                    meta.put(m.getKey(), m.getValue().isTextual() ? m.getValue().asText() : m.getValue().toString());
                continue;
            }
            if (!v.isObject()) throw new CheckpointException(file, name, "corrupt header: entry is not an object");
            JsonNode dt = v.get("dtype"), sh = v.get("shape"), off = v.get("data_offsets");
            if (dt == null || !dt.isTextual()) throw new CheckpointException(file, name, "corrupt header: missing or non-string 'dtype'");
            DType dtype = DType.fromSafetensors(dt.asText());
            if (dtype == null) throw new CheckpointException(file, name, "unsupported dtype " + dt.asText());
            if (sh == null || !sh.isArray()) throw new CheckpointException(file, name, "corrupt header: missing or non-list 'shape'");
            long[] shape = new long[sh.size()];
            long numel = 1;
            for (int i = 0; i < shape.length; i++) {
                JsonNode d = sh.get(i);
                if (!d.isIntegralNumber() || !d.canConvertToLong() || d.asLong() < 0)
                    throw new CheckpointException(file, name, "corrupt header: shape " + sh + " has an invalid dimension");
                shape[i] = d.asLong();
                try {
                    numel = Math.multiplyExact(numel, shape[i]);
                } catch (ArithmeticException ex) {
                    throw new CheckpointException(file, name, "corrupt header: shape " + sh + " overflows");
                }
            }
            if (off == null || !off.isArray() || off.size() != 2 || !off.get(0).isIntegralNumber() || !off.get(1).isIntegralNumber()
                    || !off.get(0).canConvertToLong() || !off.get(1).canConvertToLong())
                throw new CheckpointException(file, name, "corrupt header: 'data_offsets' must be [begin, end]");
            long begin = off.get(0).asLong(), end = off.get(1).asLong();
            if (begin < 0 || end < begin)
                throw new CheckpointException(file, name, "corrupt header: invalid data_offsets [" + begin + ", " + end + "]");
            long expected;
            try {
                expected = Math.multiplyExact(numel, (long) dtype.size);
            } catch (ArithmeticException ex) {
                throw new CheckpointException(file, name, "corrupt header: shape " + sh + " overflows");
            }
            if (end - begin != expected)
                throw new CheckpointException(file, name, "data_offsets [" + begin + ", " + end + "] span " + (end - begin)
                        + " bytes but dtype " + dtype.safetensorsName + " shape " + sh + " needs " + expected);
            if (end > maxEnd) {
                maxEnd = end;
                maxEndName = name;
            }
            pending.add(new Pending(name, dtype, shape, begin, end));
        }
        if (maxEnd > dataLen)
            throw new CheckpointException(file, maxEndName, "truncated: data ends at byte " + (dataStart + maxEnd)
                    + " but the file has only " + size + " bytes");
        for (Pending p : pending)
            tensors.put(p.name, new StoredTensor(p.name, p.dtype, p.shape, seg.asSlice(dataStart + p.begin, p.end - p.begin), file));
        return new SafetensorsFile(file, arena, seg, Collections.unmodifiableMap(tensors), Collections.unmodifiableMap(meta));
    }

    private static String firstLine(String s) {
        if (s == null) return "parse error";
        int i = s.indexOf('\n');
        return i < 0 ? s : s.substring(0, i);
    }

    /** The file path. */
    public Path path() {
        return file;
    }

    /** Tensor names in header order. */
    public Set<String> names() {
        return tensors.keySet();
    }

    /** True when the file holds a tensor of that name. */
    public boolean contains(String name) {
        return tensors.containsKey(name);
    }

    /**
     * A tensor by exact name.
     * @throws CheckpointException naming the file and tensor when it is absent
     */
    public StoredTensor tensor(String name) throws CheckpointException {
        StoredTensor t = tensors.get(name);
        if (t == null) throw new CheckpointException(file, name, "tensor not found in this file");
        return t;
    }

    /** The {@code __metadata__} map (empty when absent). */
    public Map<String, String> metadata() {
        return metadata;
    }

    /** Size of the mapped file in bytes. */
    public long byteSize() {
        return mapped.byteSize();
    }

    /** Unmaps the file; tensor views become invalid. Idempotent. */
    @Override
    public synchronized void close() {
        if (arena.scope().isAlive()) arena.close();
    }

    @Override
    public String toString() {
        return "SafetensorsFile[" + file + ", " + tensors.size() + " tensors]";
    }
}
