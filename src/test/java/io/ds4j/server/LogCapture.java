package io.ds4j.server;

import java.io.ByteArrayOutputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * What the server logs while a test runs: slf4j-simple writes each line to the System.err of the moment, so this
 * puts a stream there that keeps a copy and passes everything on to the console. Close it to put the old one back.
 */
public final class LogCapture implements AutoCloseable {
    private final PrintStream old = System.err;
    private final ByteArrayOutputStream copy = new ByteArrayOutputStream();

    public LogCapture() {
        OutputStream tee = new OutputStream() {
            @Override
            public void write(int b) {
                copy.write(b);
                old.write(b);
            }

            @Override
            public void write(byte[] b, int off, int len) {
                copy.write(b, off, len);
                old.write(b, off, len);
            }

            @Override
            public void flush() {
                old.flush();
            }
        };
        System.setErr(new PrintStream(tee, true, StandardCharsets.UTF_8));
    }

    /** The lines written so far. */
    public List<String> lines() {
        return copy.toString(StandardCharsets.UTF_8).lines().toList();
    }

    /** The lines written so far that contain a text. */
    public List<String> linesWith(String text) {
        return lines().stream().filter(l -> l.contains(text)).toList();
    }

    @Override
    public void close() {
        System.setErr(old);
    }
}
