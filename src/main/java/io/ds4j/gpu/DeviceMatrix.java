package io.ds4j.gpu;

import io.ds4j.model.WeightMatrix;

/**
 * A weight matrix [rows, cols] in device memory, in its stored format (the device twin of {@link WeightMatrix}).
 *
 * @param format    {@link WeightMatrix.Format#ordinal()}, the DS4J_FMT_* code of ds4j_gpu.h
 * @param data      device pointer to the view's first row
 * @param scale     FP8: the tensor's whole block grid; FP4: the view's first row of scales; else 0
 * @param scaleKind DS4J_SCALE_E8M0 or DS4J_SCALE_F32
 * @param rowBase   FP8: the view's first row inside the scale grid
 * @param rows      rows of the view
 * @param cols      columns
 * @param name      tensor name, for messages
 */
public record DeviceMatrix(int format, long data, long scale, int scaleKind, int rowBase, int rows, int cols, String name) {
    /** Bytes per stored row of {@link #data}. */
    public long rowBytes() {
        return switch (WeightMatrix.Format.values()[format]) {
            case F32 -> cols * 4L;
            case F16, BF16 -> cols * 2L;
            case FP8_E4M3_B128 -> cols;
            case FP4_E2M1_B32 -> cols / 2;
        };
    }

    /** A view of rows [from, to). */
    public DeviceMatrix rowRange(int from, int to) {
        if (from < 0 || to > rows || from > to) throw new IndexOutOfBoundsException(name + ": rows " + from + ".." + to + " of " + rows);
        long d = data + rowBytes() * from;
        return switch (WeightMatrix.Format.values()[format]) {
            case FP4_E2M1_B32 -> new DeviceMatrix(format, d, scale + (long) from * (cols / WeightMatrix.FP4_BLOCK), scaleKind, 0, to - from, cols, name);
            case FP8_E4M3_B128 -> new DeviceMatrix(format, d, scale, scaleKind, rowBase + from, to - from, cols, name);
            default -> new DeviceMatrix(format, d, 0, scaleKind, 0, to - from, cols, name);
        };
    }
}
