package io.ds4j.gpu;

/**
 * A failed call into the ds4j GPU library: {@link #code} is the library's status (ds4j_gpu.h DS4J_ERR_*), the
 * message names the operation and carries the library's own message (ds4j_last_error).
 */
public class GpuException extends RuntimeException {
    /** DS4J_ERR_RUNTIME, _NO_RUNTIME, _NO_DEVICE, _ARG or _OOM. */
    public final int code;

    /** A failed library call with its status code. */
    public GpuException(int code, String message) {
        super(message);
        this.code = code;
    }

    /** A failure outside the library (code -1). */
    public GpuException(String message, Throwable cause) {
        super(message, cause);
        this.code = -1;
    }
}
