package io.ds4j.cli;

import io.ds4j.server.config.ConfigKey;
import io.ds4j.server.config.ServerConfig;

import java.math.BigDecimal;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * Configuration keys set on the command line, each from one place: a dedicated flag ({@code --max-queue 20}) and a
 * {@code --set} of the same key ({@code --set limits.maxQueue=30}), or two {@code --set}s of one key, that give
 * different values are refused instead of one silently winning; the same value given twice is accepted.
 */
final class CommandLineOverrides {
    /** Two command-line values for one key. */
    static final class Conflict extends IllegalArgumentException {
        Conflict(String message) {
            super(message);
        }
    }

    private final Map<String, Object> values = new LinkedHashMap<>();
    /** The flag that set each key ("--port", "--set limits.maxActive=3"), for messages about its value. */
    private final Map<String, String> flags = new LinkedHashMap<>();
    /** Each key's flag with its value as written ("--max-queue 20"), for conflicts. */
    private final Map<String, String> written = new LinkedHashMap<>();

    /**
     * Sets a key, unless it is already set to another value.
     * @param flag    the flag as error messages name it ("--port", "--set server.port=8080")
     * @param asWritten the flag with its value as given ("--port 8080")
     * @throws Conflict when the key was set before to another value: the message names both
     */
    void put(String key, String flag, String asWritten, Object value) {
        // a null value is a value: --set model.name=null sets the key to null (the file's value does not stay)
        if (values.containsKey(key)) {
            if (same(key, values.get(key), value)) return;
            throw new Conflict(shown(key, asWritten) + " conflicts with " + shown(key, written.get(key)) + ": give the key once");
        }
        values.put(key, value);
        flags.put(key, flag);
        written.put(key, asWritten);
    }

    /**
     * A flag with its value as a message shows it: a secret key's values ({@link ServerConfig#secret}) as *** ("--set
     * server.apiKeys=***", "--api-key ***"), for the message reaches the terminal and logs.
     */
    static String shown(String key, String asWritten) {
        if (!ServerConfig.secret(key)) return asWritten;
        int eq = asWritten.indexOf('=');
        if (asWritten.startsWith("--set ") && eq > 0) return asWritten.substring(0, eq + 1) + "***";
        int sp = asWritten.indexOf(' ');
        return sp > 0 ? asWritten.substring(0, sp) + " ***" : asWritten;  // a flag's name alone ("--api-key") shows no key
    }

    /** Dotted key → value, in the order they were set. */
    Map<String, Object> values() {
        return Collections.unmodifiableMap(values);
    }

    /** Dotted key → the flag that set it. */
    Map<String, String> flags() {
        return Collections.unmodifiableMap(flags);
    }

    /**
     * Equal values of a key: as the key reads them where it accepts both (--spec-q auto and --set speculative.q=AUTO
     * are the width "auto"), else numbers by value (20 and 20.0 are one value) and anything else by equals.
     */
    static boolean same(String key, Object a, Object b) {
        ConfigKey k = ServerConfig.keyOf(key);
        if (k != null && k.sameValue(a, b)) return true;
        return same(a, b);
    }

    /** Equal values, numbers by value (20 and 20.0 are one value). */
    static boolean same(Object a, Object b) {
        if (a instanceof Number x && b instanceof Number y) {
            try {
                return new BigDecimal(x.toString()).compareTo(new BigDecimal(y.toString())) == 0;
            } catch (NumberFormatException e) {
                return x.doubleValue() == y.doubleValue();
            }
        }
        return Objects.equals(a, b);
    }
}
