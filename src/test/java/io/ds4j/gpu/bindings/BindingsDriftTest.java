package io.ds4j.gpu.bindings;

import org.junit.jupiter.api.Test;

import java.lang.foreign.MemorySegment;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The Java bindings ({@link ds4j_gpu_h}) must match the C header they are generated from
 * (src/main/native/include/ds4j/ds4j_gpu.h): every function has a binding with the same parameter and return types
 * (int32_t → int, int64_t → long, float → float, double → double, pointers → MemorySegment), there are no stale
 * bindings, and every integer constant has the header's value. Needs no GPU and no native library: the class is
 * inspected, never linked. On failure regenerate with {@code java tools/bindgen/BindGen.java}.
 */
class BindingsDriftTest {
    static final Path HEADER = Path.of("src/main/native/include/ds4j/ds4j_gpu.h");

    record CFunction(String name, Class<?> ret, List<Class<?>> params) {}

    /** An independent reading of the header (not the generator's). */
    static Map<String, CFunction> parse(String header) {
        String s = header.replaceAll("(?s)/\\*.*?\\*/", " ").replaceAll("//[^\n]*", " ");
        Matcher m = Pattern.compile("DS4J_API\\s+([\\w\\s*]+?)\\s*(\\w+)\\s*\\(([^)]*)\\)\\s*;").matcher(s);
        Map<String, CFunction> out = new LinkedHashMap<>();
        while (m.find()) {
            List<Class<?>> ps = new ArrayList<>();
            String list = m.group(3).trim();
            if (!list.isEmpty() && !list.equals("void"))
                for (String p : list.split(",")) {
                    String t = p.trim();
                    // drop the parameter name (the last identifier)
                    t = t.substring(0, t.length() - t.replaceAll(".*?(\\w+)$", "$1").length());
                    ps.add(javaType(t, m.group(2)));
                }
            out.put(m.group(2), new CFunction(m.group(2), javaType(m.group(1), m.group(2)), ps));
        }
        return out;
    }

    static Class<?> javaType(String ctype, String fn) {
        String t = ctype.replace("const", " ").replaceAll("\\s+", " ").trim();
        if (t.contains("*")) return MemorySegment.class;
        return switch (t) {
            case "int32_t" -> int.class;
            case "int64_t" -> long.class;
            case "float" -> float.class;
            case "double" -> double.class;
            case "void" -> void.class;
            default -> throw new AssertionError("unexpected C type '" + ctype + "' in " + fn + " (extend the binding generator)");
        };
    }

    @Test
    void everyFunctionHasAMatchingBinding() throws Exception {
        Map<String, CFunction> fns = parse(Files.readString(HEADER));
        assertTrue(fns.size() >= 30, "parsed only " + fns.size() + " functions from " + HEADER);
        Class<?> b = Class.forName("io.ds4j.gpu.bindings.ds4j_gpu_h", false, getClass().getClassLoader());
        Map<String, Method> bound = new LinkedHashMap<>();
        for (Method m : b.getDeclaredMethods())
            if (Modifier.isPublic(m.getModifiers()) && Modifier.isStatic(m.getModifiers()) && m.getName().startsWith("ds4j_")
                    && !m.getName().contains("$"))
                assertNull(bound.put(m.getName(), m), "overloaded binding " + m.getName());
        List<String> problems = new ArrayList<>();
        for (CFunction f : fns.values()) {
            Method m = bound.get(f.name());
            if (m == null) {
                problems.add(f.name() + ": no binding");
                continue;
            }
            if (m.getReturnType() != f.ret()) problems.add(f.name() + ": returns " + m.getReturnType() + ", header says " + f.ret());
            if (!Arrays.equals(m.getParameterTypes(), f.params().toArray()))
                problems.add(f.name() + ": parameters " + Arrays.toString(m.getParameterTypes()) + ", header says " + f.params());
            for (String acc : new String[]{"$descriptor", "$handle", "$address"})
                try {
                    b.getDeclaredMethod(f.name() + acc);
                } catch (NoSuchMethodException e) {
                    problems.add(f.name() + ": no " + acc + "()");
                }
        }
        TreeSet<String> stale = new TreeSet<>(bound.keySet());
        stale.removeAll(fns.keySet());
        for (String s : stale) problems.add(s + ": bound but not in the header");
        assertTrue(problems.isEmpty(), "bindings out of sync with " + HEADER + " (run java tools/bindgen/BindGen.java): " + problems);
    }

    @Test
    void constantsMatchTheHeader() throws Exception {
        Matcher m = Pattern.compile("(?m)^#define\\s+(DS4J_\\w+)\\s+(-?\\d+)").matcher(Files.readString(HEADER));
        int n = 0;
        while (m.find()) {
            Method c = ds4j_gpu_h.class.getDeclaredMethod(m.group(1));
            assertEquals(Integer.parseInt(m.group(2)), c.invoke(null), m.group(1));
            n++;
        }
        assertTrue(n >= 15, "parsed only " + n + " constants");
        // the weight format codes mirror WeightMatrix.Format's order
        for (var f : io.ds4j.model.WeightMatrix.Format.values()) {
            String name = "DS4J_FMT_" + f.name();
            assertEquals(f.ordinal(), ds4j_gpu_h.class.getDeclaredMethod(name).invoke(null), name);
        }
    }

    @Test
    void parserSeesTypedSignatures() {
        Map<String, CFunction> f = parse("""
                DS4J_API int32_t ds4j_a(ds4j_ctx* ctx, const float* x, int64_t n, float eps); // c
                DS4J_API const char* ds4j_b(void);
                /* DS4J_API int32_t ds4j_c(int32_t x); */
                """);
        assertEquals(List.of("ds4j_a", "ds4j_b"), List.copyOf(f.keySet()));
        assertEquals(List.of(MemorySegment.class, MemorySegment.class, long.class, float.class), f.get("ds4j_a").params());
        assertEquals(MemorySegment.class, f.get("ds4j_b").ret());
    }
}
