package io.ds4j.model;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.nio.file.Path;
import java.util.Arrays;

/**
 * One tensor of a safetensors file, as stored: dtype, shape and a read-only view of its bytes
 * (little-endian, row-major; usually memory-mapped, valid until the owning file is closed).
 *
 * @param name  the name as written in the file
 * @param dtype the stored element type
 * @param shape dimensions (a copy; empty for a scalar)
 * @param data  exactly product(shape) × dtype.size bytes
 * @param file  the file it came from, for messages
 */
public record StoredTensor(String name, DType dtype, long[] shape, MemorySegment data, Path file) {
    private static final ValueLayout.OfDouble F64_LE = ValueLayout.JAVA_DOUBLE_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    private static final ValueLayout.OfLong I64_LE = ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    private static final ValueLayout.OfInt I32_LE = ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    /** Largest tensor {@link #toFloats()} / {@link #toLongs()} will copy onto the heap (elements). */
    public static final long MAX_HEAP_ELEMENTS = 1L << 26;

    /** Copies {@code shape}. */
    public StoredTensor {
        shape = shape.clone();
    }

    /** Number of elements, product(shape). */
    public long numel() {
        long n = 1;
        for (long d : shape) n *= d;
        return n;
    }

    /** Shape as "[a, b]". */
    public String shapeString() {
        return Arrays.toString(shape);
    }

    /**
     * Copies a small float tensor (F64/F32/F16/BF16) onto the heap as fp32, flattened row-major.
     * @throws CheckpointException for a non-float dtype or more than {@link #MAX_HEAP_ELEMENTS} elements
     */
    public float[] toFloats() throws CheckpointException {
        if (!dtype.isFloat()) throw new CheckpointException(file, name, "expected a float dtype (F32/BF16/F16/F64), found " + dtype.safetensorsName);
        int n = heapCount();
        float[] out = new float[n];
        switch (dtype) {
            case F32 -> MemorySegment.copy(data, WeightMatrix.F32_LE, 0, out, 0, n);
            case F64 -> { for (int i = 0; i < n; i++) out[i] = (float) data.get(F64_LE, 8L * i); }
            case F16 -> { for (int i = 0; i < n; i++) out[i] = Float.float16ToFloat(data.get(WeightMatrix.I16_LE, 2L * i)); }
            case BF16 -> { for (int i = 0; i < n; i++) out[i] = Float.intBitsToFloat((data.get(WeightMatrix.I16_LE, 2L * i) & 0xFFFF) << 16); }
            default -> throw new AssertionError(dtype);
        }
        return out;
    }

    /**
     * Copies a small integer tensor (I64/I32/I16/I8/U8) onto the heap, flattened row-major.
     * @throws CheckpointException for a non-integer dtype or more than {@link #MAX_HEAP_ELEMENTS} elements
     */
    public long[] toLongs() throws CheckpointException {
        int n = heapCount();
        long[] out = new long[n];
        switch (dtype) {
            case I64 -> MemorySegment.copy(data, I64_LE, 0, out, 0, n);
            case I32 -> { for (int i = 0; i < n; i++) out[i] = data.get(I32_LE, 4L * i); }
            case I16 -> { for (int i = 0; i < n; i++) out[i] = data.get(WeightMatrix.I16_LE, 2L * i); }
            case I8 -> { for (int i = 0; i < n; i++) out[i] = data.get(ValueLayout.JAVA_BYTE, i); }
            case U8 -> { for (int i = 0; i < n; i++) out[i] = data.get(ValueLayout.JAVA_BYTE, i) & 0xFF; }
            default -> throw new CheckpointException(file, name, "expected an integer dtype (I64/I32/I16/I8/U8), found " + dtype.safetensorsName);
        }
        return out;
    }

    private int heapCount() throws CheckpointException {
        long n = numel();
        if (n > MAX_HEAP_ELEMENTS) throw new CheckpointException(file, name, "tensor of " + n + " elements is too large to load as a vector");
        return (int) n;
    }

    /** Dimensions (a defensive copy). */
    @Override
    public long[] shape() {
        return shape.clone();
    }

    @Override
    public String toString() {
        return name + " " + dtype.safetensorsName + shapeString() + " in " + file;
    }
}
