package io.ds4j.server;

import org.slf4j.ILoggerFactory;
import org.slf4j.LoggerFactory;

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.util.Map;

/**
 * Changes the log level at run time (log.level is a live config key). slf4j-simple, the binding ds4j ships, reads
 * its level once; this sets its default level and the level of every existing logger that has no level of its own
 * (org.slf4j.simpleLogger.log.NAME), by reflection because the binding offers no API for it. With another binding it
 * does nothing and says so.
 */
public final class LogLevels {
    private LogLevels() {}

    /**
     * A level's rank as slf4j-simple numbers them: trace 0, debug 10, info 20, warn 30, error 40, off (or anything
     * else) 50; a higher rank shows fewer lines.
     */
    public static int rank(String level) {
        return switch (level) {
            case "trace" -> 0;
            case "debug" -> 10;
            case "info" -> 20;
            case "warn" -> 30;
            case "error" -> 40;
            default -> 50; // off
        };
    }

    /**
     * Applies a level (trace, debug, info, warn, error, off).
     * @return false when the logging binding does not support changing levels
     */
    public static boolean apply(String level) {
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", level);
        int v = rank(level);
        try {
            ILoggerFactory f = LoggerFactory.getILoggerFactory();
            if (!f.getClass().getName().equals("org.slf4j.simple.SimpleLoggerFactory")) return false;
            Class<?> sl = Class.forName("org.slf4j.simple.SimpleLogger");
            Field cfgF = sl.getDeclaredField("CONFIG_PARAMS");
            cfgF.setAccessible(true);
            Object cfg = cfgF.get(null);
            if (cfg != null) {
                Field dl = cfg.getClass().getDeclaredField("defaultLogLevel");
                dl.setAccessible(true);
                dl.setInt(cfg, v);
            }
            Field mapF = f.getClass().getDeclaredField("loggerMap");
            mapF.setAccessible(true);
            Field cur = sl.getDeclaredField("currentLogLevel");
            cur.setAccessible(true);
            Method own = sl.getDeclaredMethod("recursivelyComputeLevelString");
            own.setAccessible(true);
            for (Object lg : ((Map<?, ?>) mapF.get(f)).values()) {
                if (!sl.isInstance(lg)) continue;
                if (own.invoke(lg) == null) cur.setInt(lg, v);
            }
            return true;
        } catch (ReflectiveOperationException | RuntimeException e) {
            LoggerFactory.getLogger(LogLevels.class).warn("cannot change the log level at run time: {}", e.toString());
            return false;
        }
    }
}
