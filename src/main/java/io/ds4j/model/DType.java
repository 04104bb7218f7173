package io.ds4j.model;

/**
 * Element types that can appear in a checkpoint (safetensors dtype strings).
 * Spec 2.5: dense projections are FP8 e4m3 with E8M0 block scales; routed experts FP4 e2m1 packed two per
 * byte (stored as I8/U8 or F4 "F4_E2M1" pairs); everything else BF16/F32.
 */
public enum DType {
    F64("F64", 8), F32("F32", 4), F16("F16", 2), BF16("BF16", 2),
    F8_E4M3("F8_E4M3", 1), F8_E8M0("F8_E8M0", 1),
    I64("I64", 8), I32("I32", 4), I16("I16", 2), I8("I8", 1), U8("U8", 1), BOOL("BOOL", 1);

    /** Name as written in a safetensors header. */
    public final String safetensorsName;
    /** Bytes per element. */
    public final int size;

    DType(String name, int size) {
        this.safetensorsName = name;
        this.size = size;
    }

    /**
     * Parses a safetensors dtype string.
     * @return the dtype, or {@code null} when the string names a dtype ds4j does not support
     */
    public static DType fromSafetensors(String s) {
        for (DType d : values()) if (d.safetensorsName.equals(s)) return d;
        return null;
    }

    /** True for the element types that hold real numbers directly (not packed or scale bytes). */
    public boolean isFloat() {
        return this == F64 || this == F32 || this == F16 || this == BF16;
    }
}
