package io.ds4j.server;

import org.slf4j.LoggerFactory;

import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.reflect.Constructor;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.util.function.Supplier;

/**
 * Escapes control characters in every log line, once, where the line is written: text a client sent (a model id, a
 * path, a field value) then cannot start a forged line of its own ({@code x\n12:34:56.789 [ERROR] forged}), move the
 * cursor or colour a terminal, or write a NUL into the log. A line feed becomes {@code \n}, a carriage return
 * {@code \r}, any other C0 or C1 control character and U+2028 / U+2029 (which some log viewers break lines at)
 * {@code \}{@code uXXXX}; tabs are kept (a stack trace indents its frames with them, and they cannot end a line).
 *
 * <p>slf4j-simple, the binding ds4j ships, writes each log line with one {@code println} and a stack trace with one
 * {@code println} per line, to the stream its {@code org.slf4j.simpleLogger.logFile} names (System.err by default,
 * looked up at every line). {@link #install} puts a stream in front of that one which escapes what each call writes and
 * keeps the line ends the calls add. The binding offers no API for it, so this is done by reflection, as
 * {@link LogLevels} changes levels; with another binding it does nothing and says so. A message written in code as
 * several lines comes out as one line with {@code \n} in it: log one line per call instead.
 */
public final class LogEscaping {
    private LogEscaping() {}

    private static boolean installed;

    /**
     * Escapes the control characters of every log line from now on (idempotent).
     * @return false when the logging binding is not slf4j-simple or its internals changed (a warning says why)
     */
    public static synchronized boolean install() {
        if (installed) return true;
        try {
            LoggerFactory.getILoggerFactory();  // the binding reads its configuration when its first logger is made
            Class<?> logger = Class.forName("org.slf4j.simple.SimpleLogger");
            if (!logger.isInstance(LoggerFactory.getLogger(LogEscaping.class))) {
                warn("the logging binding is not slf4j-simple");
                return false;
            }
            Field params = logger.getDeclaredField("CONFIG_PARAMS");
            params.setAccessible(true);
            Object config = params.get(null);
            Field choiceField = config.getClass().getDeclaredField("outputChoice");
            choiceField.setAccessible(true);
            Object choice = choiceField.get(config);
            Class<?> choiceClass = choice.getClass();
            Field typeField = choiceClass.getDeclaredField("outputChoiceType");
            typeField.setAccessible(true);
            String type = String.valueOf(typeField.get(choice));
            Supplier<PrintStream> target;
            if (type.equals("SYS_ERR")) target = () -> System.err;
            else if (type.equals("SYS_OUT")) target = () -> System.out;
            else {
                // a file or a stream cached at start-up: the same stream for every line
                Method stream = choiceClass.getDeclaredMethod("getTargetPrintStream");
                stream.setAccessible(true);
                PrintStream fixed = (PrintStream) stream.invoke(choice);
                target = () -> fixed;
            }
            Constructor<?> make = choiceClass.getDeclaredConstructor(PrintStream.class);
            make.setAccessible(true);
            choiceField.set(config, make.newInstance(new EscapingStream(target)));
            installed = true;
            return true;
        } catch (ReflectiveOperationException | RuntimeException e) {
            warn(e.toString());
            return false;
        }
    }

    private static void warn(String why) {
        LoggerFactory.getLogger(LogEscaping.class).warn("log lines are written without escaping their control characters: {}", why);
    }

    /** Whether a character is written escaped: C0 and C1 controls but the tab, DEL, and the Unicode line separators. */
    static boolean escaped(char c) {
        return c < 0x20 && c != '\t' || c >= 0x7f && c <= 0x9f || c == '\u2028' || c == '\u2029';
    }

    /** The text with its control characters escaped ({@code \n}, {@code \r}, {@code \}{@code u0000}, ...). */
    public static String escape(String s) {
        if (s == null) return null;
        int i = 0, n = s.length();
        while (i < n && !escaped(s.charAt(i))) i++;
        if (i == n) return s;
        StringBuilder b = new StringBuilder(n + 16).append(s, 0, i);
        for (; i < n; i++) {
            char c = s.charAt(i);
            if (!escaped(c)) b.append(c);
            else if (c == '\n') b.append("\\n");
            else if (c == '\r') b.append("\\r");
            else b.append(String.format("\\u%04x", (int) c));
        }
        return b.toString();
    }

    /**
     * Writes to the binding's stream with the text of each print and println call escaped; the line end a println
     * adds is written as it is. Bytes written directly pass through unchanged (the binding writes none).
     */
    static final class EscapingStream extends PrintStream {
        private final Supplier<PrintStream> target;

        EscapingStream(Supplier<PrintStream> target) {
            super(new OutputStream() {
                @Override
                public void write(int b) {
                    target.get().write(b);
                }

                @Override
                public void write(byte[] b, int off, int len) {
                    target.get().write(b, off, len);
                }

                @Override
                public void flush() {
                    target.get().flush();
                }
            }, true, target.get().charset());
            this.target = target;
        }

        @Override
        public void println(String x) {
            target.get().println(escape(x));
        }

        @Override
        public void println(Object x) {
            println(String.valueOf(x));
        }

        @Override
        public void println(char[] x) {
            println(new String(x));
        }

        @Override
        public void print(String s) {
            target.get().print(escape(s));
        }

        @Override
        public void print(Object o) {
            print(String.valueOf(o));
        }

        @Override
        public void print(char[] s) {
            print(new String(s));
        }

        @Override
        public void println() {
            target.get().println();
        }

        @Override
        public void flush() {
            target.get().flush();
        }
    }
}
