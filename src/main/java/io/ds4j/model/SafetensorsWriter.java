package io.ds4j.model;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeMap;

/**
 * Writes one {@code .safetensors} file: an 8-byte little-endian header length N, a JSON header of N bytes
 * (padded with spaces so that N is a multiple of 8, as the reference library does), then the raw tensor bytes.
 * Tensors are laid out back to back in name order; {@code __metadata__} comes first in the header.
 *
 * <p>Usage:
 * <pre>{@code
 * new SafetensorsWriter()
 *     .metadata(Map.of("format", "pt"))
 *     .add("embed.weight", DType.BF16, new long[]{V, D}, floats)          // converted, round-to-nearest-even
 *     .addBytes("layers.0.attn.wq_a.weight", DType.F8_E4M3, new long[]{q, D}, e4m3Bytes)
 *     .add("head.weight", DType.F32, new long[]{V, D}, seg -> fillRandom(seg)) // produced straight into the file
 *     .write(path);
 * }</pre>
 *
 * <p>Data is streamed: in-memory tensors are written in chunks, and {@link Filler} tensors are produced directly
 * into a memory-mapped window of the output file, so files larger than 2 GiB (and tensors larger than the heap)
 * are fine. All multi-byte values are little-endian. The writer may be reused; {@link #write} does not clear it.
 */
public final class SafetensorsWriter {
    /** Produces a tensor's bytes into {@code dst} (exactly the tensor's byte size, little-endian, row-major). */
    @FunctionalInterface
    public interface Filler {
        void fill(MemorySegment dst) throws IOException;
    }

    private record Entry(DType dtype, long[] shape, long bytes, MemorySegment data, Filler filler) {}

    private static final ObjectMapper JSON = new ObjectMapper();
    private static final long CHUNK = 8L << 20;

    private final TreeMap<String, Entry> tensors = new TreeMap<>();
    private final Map<String, String> metadata = new LinkedHashMap<>();

    /** Sets (adds to) the {@code __metadata__} string map. */
    public SafetensorsWriter metadata(Map<String, String> m) {
        metadata.putAll(m);
        return this;
    }

    /**
     * Adds a tensor from raw bytes already in {@code dtype} format.
     * @param data exactly product(shape) × dtype.size bytes (heap or native; not copied, read at {@link #write})
     * @throws IllegalArgumentException on a duplicate/invalid name, a negative dim or a size mismatch
     */
    public SafetensorsWriter add(String name, DType dtype, long[] shape, MemorySegment data) {
        long bytes = byteSize(name, dtype, shape);
        if (data.byteSize() != bytes)
            throw new IllegalArgumentException(name + ": data has " + data.byteSize() + " bytes, shape needs " + bytes);
        put(name, new Entry(dtype, shape.clone(), bytes, data, null));
        return this;
    }

    /**
     * Adds a tensor whose bytes are produced by {@code filler} during {@link #write}, directly into the file.
     * @throws IllegalArgumentException on a duplicate/invalid name or a negative dim
     */
    public SafetensorsWriter add(String name, DType dtype, long[] shape, Filler filler) {
        put(name, new Entry(dtype, shape.clone(), byteSize(name, dtype, shape), null, filler));
        return this;
    }

    /**
     * Adds a float tensor, converting to {@code dtype} ∈ {F32, BF16, F16}. BF16 rounds to nearest even like torch
     * (NaN → 0x7FC0); F16 uses IEEE round-to-nearest-even.
     * @throws IllegalArgumentException for another dtype or when values.length != product(shape)
     */
    public SafetensorsWriter add(String name, DType dtype, long[] shape, float[] values) {
        checkCount(name, shape, values.length);
        MemorySegment seg;
        switch (dtype) {
            case F32 -> {
                seg = MemorySegment.ofArray(new byte[values.length * 4]);
                MemorySegment.copy(values, 0, seg, WeightMatrix.F32_LE, 0, values.length);
            }
            case BF16, F16 -> {
                seg = MemorySegment.ofArray(new byte[values.length * 2]);
                for (int i = 0; i < values.length; i++)
                    seg.set(WeightMatrix.I16_LE, 2L * i, dtype == DType.BF16 ? bf16(values[i]) : f16(values[i]));
            }
            default -> throw new IllegalArgumentException(name + ": float data can be written as F32, BF16 or F16, not " + dtype);
        }
        return add(name, dtype, shape, seg);
    }

    /** Adds raw bytes (e.g. F8_E4M3, F8_E8M0, packed FP4 as I8/U8, BOOL); one byte per element for 1-byte dtypes. */
    public SafetensorsWriter addBytes(String name, DType dtype, long[] shape, byte[] bytes) {
        return add(name, dtype, shape, MemorySegment.ofArray(bytes));
    }

    /**
     * Adds an integer tensor, converting to {@code dtype} ∈ {I64, I32, I16, I8, U8} (values are truncated to the width).
     * @throws IllegalArgumentException for another dtype or when values.length != product(shape)
     */
    public SafetensorsWriter addInts(String name, DType dtype, long[] shape, long[] values) {
        checkCount(name, shape, values.length);
        MemorySegment seg = MemorySegment.ofArray(new byte[values.length * dtype.size]);
        for (int i = 0; i < values.length; i++) {
            long v = values[i];
            switch (dtype) {
                case I64 -> seg.set(ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN), 8L * i, v);
                case I32 -> seg.set(ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN), 4L * i, (int) v);
                case I16 -> seg.set(WeightMatrix.I16_LE, 2L * i, (short) v);
                case I8, U8 -> seg.set(ValueLayout.JAVA_BYTE, i, (byte) v);
                default -> throw new IllegalArgumentException(name + ": integer data can be written as I64/I32/I16/I8/U8, not " + dtype);
            }
        }
        return add(name, dtype, shape, seg);
    }

    /** Number of tensors added so far. */
    public int size() {
        return tensors.size();
    }

    /**
     * Writes the file (replacing any existing one atomically: the data goes to a temporary sibling first).
     * @throws IOException on an I/O error or when a {@link Filler} fails
     */
    public void write(Path file) throws IOException {
        ObjectNode header = JSON.createObjectNode();
        if (!metadata.isEmpty()) {
            ObjectNode m = header.putObject("__metadata__");
            metadata.forEach(m::put);
        }
        long offset = 0;
        Map<String, long[]> offsets = new LinkedHashMap<>();
        for (Map.Entry<String, Entry> e : tensors.entrySet()) {
            Entry t = e.getValue();
            ObjectNode o = header.putObject(e.getKey());
            o.put("dtype", t.dtype.safetensorsName);
            ArrayNode s = o.putArray("shape");
            for (long d : t.shape) s.add(d);
            ArrayNode off = o.putArray("data_offsets");
            off.add(offset).add(offset + t.bytes);
            offsets.put(e.getKey(), new long[]{offset, offset + t.bytes});
            offset += t.bytes;
        }
        byte[] json = JSON.writeValueAsBytes(header);
        int n = (json.length + 7) & ~7;
        ByteBuffer head = ByteBuffer.allocate(8 + n).order(ByteOrder.LITTLE_ENDIAN);
        head.putLong(n).put(json);
        while (head.hasRemaining()) head.put((byte) ' ');
        head.flip();
        long dataStart = 8L + n;

        // write next to the target and move into place, so a reader that has the old file mapped never sees it shrink
        Path tmp = file.resolveSibling(file.getFileName() + ".tmp-" + ProcessHandle.current().pid());
        boolean done = false;
        try {
            try (FileChannel ch = FileChannel.open(tmp, StandardOpenOption.CREATE, StandardOpenOption.TRUNCATE_EXISTING,
                    StandardOpenOption.READ, StandardOpenOption.WRITE)) {
                writeFully(ch, head, 0);
                for (Map.Entry<String, Entry> e : tensors.entrySet()) {
                    Entry t = e.getValue();
                    long pos = dataStart + offsets.get(e.getKey())[0];
                    if (t.bytes == 0) continue;
                    if (t.data != null) {
                        for (long o = 0; o < t.bytes; o += CHUNK) {
                            long len = Math.min(CHUNK, t.bytes - o);
                            writeFully(ch, t.data.asSlice(o, len).asByteBuffer(), pos + o);
                        }
                    } else {
                        try (Arena arena = Arena.ofConfined()) {
                            MemorySegment dst = ch.map(FileChannel.MapMode.READ_WRITE, pos, t.bytes, arena);
                            t.filler.fill(dst);
                        }
                    }
                }
                if (ch.size() < dataStart + offset) ch.write(ByteBuffer.allocate(1), dataStart + offset - 1);
            }
            try {
                Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
            } catch (AtomicMoveNotSupportedException e) {
                Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING);
            }
            done = true;
        } finally {
            if (!done) Files.deleteIfExists(tmp);
        }
    }

    /** float → bfloat16 bits, round to nearest even (torch's rule; NaN → 0x7FC0). */
    public static short bf16(float f) {
        if (Float.isNaN(f)) return (short) 0x7FC0;
        int bits = Float.floatToRawIntBits(f);
        int bias = 0x7FFF + ((bits >>> 16) & 1);
        return (short) ((bits + bias) >>> 16);
    }

    /** float → IEEE half bits, round to nearest even. */
    public static short f16(float f) {
        return Float.floatToFloat16(f);
    }

    private static void writeFully(FileChannel ch, ByteBuffer buf, long pos) throws IOException {
        while (buf.hasRemaining()) pos += ch.write(buf, pos);
    }

    private void put(String name, Entry e) {
        if (name == null || name.isEmpty() || name.equals("__metadata__"))
            throw new IllegalArgumentException("invalid tensor name '" + name + "'");
        if (tensors.putIfAbsent(name, e) != null) throw new IllegalArgumentException("duplicate tensor name '" + name + "'");
    }

    private static long byteSize(String name, DType dtype, long[] shape) {
        return Math.multiplyExact(numel(name, shape), (long) dtype.size);
    }

    private static long numel(String name, long[] shape) {
        long n = 1;
        for (long d : shape) {
            if (d < 0) throw new IllegalArgumentException(name + ": negative dimension " + d);
            n = Math.multiplyExact(n, d);
        }
        return n;
    }

    private static void checkCount(String name, long[] shape, int count) {
        if (numel(name, shape) != count)
            throw new IllegalArgumentException(name + ": " + count + " values for shape " + java.util.Arrays.toString(shape));
    }
}
