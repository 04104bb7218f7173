package io.ds4j.model;

import java.nio.file.Path;

/**
 * A checkpoint could not be used. The message always names the file and, where one is involved, the tensor,
 * so a user can tell what to fix without a stack trace.
 */
public class CheckpointException extends Exception {
    private final transient Path file;
    private final String tensor;

    /**
     * @param file the file involved (may be null)
     * @param tensor the tensor name involved (may be null)
     * @param problem what is wrong, in words
     */
    public CheckpointException(Path file, String tensor, String problem) {
        super((file != null ? file + ": " : "") + (tensor != null ? "tensor '" + tensor + "': " : "") + problem);
        this.file = file;
        this.tensor = tensor;
    }

    public Path file() { return file; }

    public String tensor() { return tensor; }
}
