package io.ds4j.model;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;

/**
 * A 2-D weight [rows, cols] (torch Linear layout: y = x·Wᵀ, one output per row) kept in its stored format,
 * usually a view into a memory-mapped checkpoint. Nothing is expanded in memory: kernels dequantise on the fly.
 *
 * <p>Formats (spec 2.5):
 * <ul>
 *   <li>{@code F32}, {@code F16}, {@code BF16}: little-endian, row-major.</li>
 *   <li>{@code FP8_E4M3_B128}: one e4m3 byte per element, row-major; {@code scale} is the full block grid
 *       [ceil(totalRows/128), ceil(cols/128)] (E8M0 bytes, 2^(e−127), or F32), and {@code rowBase} is the
 *       first row of this view within that grid.</li>
 *   <li>{@code FP4_E2M1_B32}: [rows, cols/2] bytes, element 2j in the low nibble and 2j+1 in the high nibble;
 *       {@code scale} is [rows, cols/32] E8M0 bytes starting at this view's first row.</li>
 * </ul>
 */
public final class WeightMatrix {
    /** Storage format of the elements. */
    public enum Format { F32, F16, BF16, FP8_E4M3_B128, FP4_E2M1_B32 }

    /** FP8 block edge (128×128 blocks). */
    public static final int FP8_BLOCK = 128;
    /** FP4 block width (1×32 blocks). */
    public static final int FP4_BLOCK = 32;

    public static final ValueLayout.OfFloat F32_LE = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    public static final ValueLayout.OfShort I16_LE = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    /** e4m3fn byte → value. */
    public static final float[] E4M3 = new float[256];
    /** e2m1 nibble → value (spec 2.5 LUT). */
    public static final float[] E2M1 = {0f, .5f, 1f, 1.5f, 2f, 3f, 4f, 6f, -0f, -.5f, -1f, -1.5f, -2f, -3f, -4f, -6f};

    static {
        for (int b = 0; b < 256; b++) {
            int s = (b >> 7) & 1, e = (b >> 3) & 0xF, m = b & 7;
            float v;
            if (e == 15 && m == 7) v = Float.NaN;
            else if (e == 0) v = m / 8f * (float) Math.pow(2, -6);
            else v = (1 + m / 8f) * (float) Math.pow(2, e - 7);
            E4M3[b] = s == 1 ? -v : v;
        }
    }

    public final Format format;
    public final int rows, cols;
    public final MemorySegment data;
    /** Scale bytes or floats (null for F32/F16/BF16). */
    public final MemorySegment scale;
    /** {@link DType#F8_E8M0} or {@link DType#F32} (FP8 only; FP4 scales are always E8M0). */
    public final DType scaleType;
    /** FP8: row offset of this view inside the scale grid. */
    public final int rowBase;
    /** FP8: number of scale-grid columns, ceil(cols/128). */
    public final int scaleCols;
    /** Canonical tensor name, for messages. */
    public final String name;

    public WeightMatrix(Format format, int rows, int cols, MemorySegment data, MemorySegment scale, DType scaleType,
                        int rowBase, String name) {
        this.format = format;
        this.rows = rows;
        this.cols = cols;
        this.data = data;
        this.scale = scale;
        this.scaleType = scaleType;
        this.rowBase = rowBase;
        this.scaleCols = (cols + FP8_BLOCK - 1) / FP8_BLOCK;
        this.name = name;
        if (format == Format.FP4_E2M1_B32 && cols % FP4_BLOCK != 0)
            throw new IllegalArgumentException(name + ": FP4 cols " + cols + " not a multiple of 32");
    }

    /** Wraps a heap float array [rows, cols] (tests and generated weights). */
    public static WeightMatrix ofFloats(float[] w, int rows, int cols, String name) {
        if (w.length != (long) rows * cols) throw new IllegalArgumentException(name + ": length " + w.length + " != " + rows + "x" + cols);
        MemorySegment seg = java.lang.foreign.Arena.ofAuto().allocate((long) w.length * 4, 64);
        MemorySegment.copy(w, 0, seg, F32_LE, 0, w.length);
        return new WeightMatrix(Format.F32, rows, cols, seg, null, null, 0, name);
    }

    /** Bytes per row of {@link #data}. */
    public long rowBytes() {
        return switch (format) {
            case F32 -> cols * 4L;
            case F16, BF16 -> cols * 2L;
            case FP8_E4M3_B128 -> cols;
            case FP4_E2M1_B32 -> cols / 2;
        };
    }

    /** Bytes a full pass over this matrix reads (data plus scales), for bandwidth accounting. */
    public long storedBytes() {
        long b = rowBytes() * rows;
        if (format == Format.FP4_E2M1_B32) b += (long) rows * (cols / FP4_BLOCK);
        if (format == Format.FP8_E4M3_B128) b += (long) ((rows + FP8_BLOCK - 1) / FP8_BLOCK) * scaleCols * scaleType.size;
        return b;
    }

    /** A view of rows [from, to). */
    public WeightMatrix rowRange(int from, int to) {
        if (from < 0 || to > rows || from > to) throw new IndexOutOfBoundsException(name + ": rows " + from + ".." + to + " of " + rows);
        MemorySegment d = data.asSlice(rowBytes() * from, rowBytes() * (to - from));
        return switch (format) {
            case FP4_E2M1_B32 -> new WeightMatrix(format, to - from, cols, d,
                    scale.asSlice((long) from * (cols / FP4_BLOCK), (long) (to - from) * (cols / FP4_BLOCK)), scaleType, 0, name);
            case FP8_E4M3_B128 -> new WeightMatrix(format, to - from, cols, d, scale, scaleType, rowBase + from, name);
            default -> new WeightMatrix(format, to - from, cols, d, null, null, 0, name);
        };
    }

    /** Decodes an E8M0 scale byte: 2^(e−127). */
    public static float e8m0(int b) {
        b &= 0xFF;
        if (b == 0xFF) return Float.NaN;
        return Float.intBitsToFloat(b == 0 ? 0x00400000 : (b << 23));
    }

    /** FP8 block scale for (row, col) of this view. */
    public float fp8Scale(int r, int c) {
        long idx = (long) ((rowBase + r) / FP8_BLOCK) * scaleCols + c / FP8_BLOCK;
        return scaleType == DType.F32 ? scale.get(F32_LE, idx * 4) : e8m0(scale.get(ValueLayout.JAVA_BYTE, idx));
    }

    /** One element, dequantised (reference path; slow). */
    public float get(int r, int c) {
        long base = rowBytes() * r;
        return switch (format) {
            case F32 -> data.get(F32_LE, base + c * 4L);
            case F16 -> Float.float16ToFloat(data.get(I16_LE, base + c * 2L));
            case BF16 -> Float.intBitsToFloat((data.get(I16_LE, base + c * 2L) & 0xFFFF) << 16);
            case FP8_E4M3_B128 -> E4M3[data.get(ValueLayout.JAVA_BYTE, base + c) & 0xFF] * fp8Scale(r, c);
            case FP4_E2M1_B32 -> {
                int b = data.get(ValueLayout.JAVA_BYTE, base + c / 2) & 0xFF;
                float v = E2M1[(c & 1) == 0 ? (b & 0xF) : (b >>> 4)];
                yield v * e8m0(scale.get(ValueLayout.JAVA_BYTE, (long) r * (cols / FP4_BLOCK) + c / FP4_BLOCK));
            }
        };
    }

    /** Dequantises row r into dst[off .. off+cols). */
    public void dequantRow(int r, float[] dst, int off) {
        for (int c = 0; c < cols; c++) dst[off + c] = get(r, c);
    }

    @Override
    public String toString() {
        return name + "[" + rows + "x" + cols + " " + format + "]";
    }
}
