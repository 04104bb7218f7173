package io.ds4j.gpu;

import static io.ds4j.gpu.bindings.ds4j_gpu_h.DS4J_ERR_OOM;

/**
 * Device memory does not suffice, planned (the weights do not fit the budget, checked before anything is uploaded)
 * or actual (the runtime ran out while uploading the weights, growing the workspace or a sequence's cache). The
 * message names what did not fit (category, layer or tensor, bytes), the budget and the free memory, and what to
 * change ({@code gpu.expertPlacement}, {@code gpu.memoryBudgetMiB}, a smaller model, smaller steps). Code
 * DS4J_ERR_OOM.
 */
public final class DeviceMemoryException extends GpuException {
    /** A planned check that failed (nothing was allocated). */
    public DeviceMemoryException(String message) {
        super(DS4J_ERR_OOM(), message);
    }

    /** An allocation that failed; cause is the library's error. */
    public DeviceMemoryException(String message, Throwable cause) {
        super(DS4J_ERR_OOM(), message);
        initCause(cause);
    }
}
