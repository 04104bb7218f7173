package io.ds4j.gpu;

/** No GPU can be used on this machine: the message names what is missing (library, driver/runtime or device). */
public class GpuUnavailableException extends RuntimeException {
    public GpuUnavailableException(String message) {
        super(message);
    }

    public GpuUnavailableException(String message, Throwable cause) {
        super(message, cause);
    }
}
