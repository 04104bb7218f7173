import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Generates the FFM bindings of the ds4j GPU library from its C header, in the shape jextract generates (jextract
 * cannot be installed on our machines): one class named after the header with a static method per C function
 * (backed by a {@code MethodHandle} from {@code Linker.downcallHandle}, with {@code $descriptor}, {@code $handle} and
 * {@code $address} accessors), a static method per integer {@code #define}, and {@code C_*} layout constants.
 * Unlike jextract, the library is looked up lazily (on the first function call), so constants can be used and the
 * class inspected without a GPU library present.
 *
 * <p>Supported C: {@code DS4J_API <type> name(<params>);} declarations whose types are {@code void} (return only),
 * {@code int32_t}, {@code int64_t}, {@code float}, {@code double} or any pointer; integer {@code #define}s.
 *
 * <pre>
 *   java tools/bindgen/BindGen.java [HEADER] [OUTPUT.java]
 * </pre>
 * defaults: src/main/native/include/ds4j/ds4j_gpu.h → src/main/java/io/ds4j/gpu/bindings/ds4j_gpu_h.java.
 * io.ds4j.gpu.bindings.BindingsDriftTest fails when the header and the bindings disagree.
 */
public class BindGen {
    record Param(String ctype, String name) {}
    record Fn(String ret, String name, List<Param> params) {}
    record Const(String name, long value) {}

    public static void main(String[] args) throws IOException {
        Path header = Path.of(args.length > 0 ? args[0] : "src/main/native/include/ds4j/ds4j_gpu.h");
        Path out = Path.of(args.length > 1 ? args[1] : "src/main/java/io/ds4j/gpu/bindings/ds4j_gpu_h.java");
        String src = Files.readString(header);
        List<Fn> fns = functions(src);
        List<Const> consts = constants(src);
        String cls = out.getFileName().toString().replace(".java", "");
        Files.writeString(out, generate(cls, header.toString().replace('\\', '/'), fns, consts));
        System.out.println("wrote " + out + ": " + fns.size() + " functions, " + consts.size() + " constants");
    }

    static String stripComments(String s) {
        return s.replaceAll("(?s)/\\*.*?\\*/", " ").replaceAll("//[^\n]*", " ");
    }

    static List<Fn> functions(String src) {
        String s = stripComments(src);
        Matcher m = Pattern.compile("DS4J_API\\s+([^;(]+?)\\s*\\b(\\w+)\\s*\\(([^)]*)\\)\\s*;").matcher(s);
        List<Fn> out = new ArrayList<>();
        while (m.find()) {
            String ret = norm(m.group(1));
            List<Param> ps = new ArrayList<>();
            String plist = m.group(3).trim();
            if (!plist.isEmpty() && !plist.equals("void")) {
                for (String p : plist.split(",")) {
                    Matcher pm = Pattern.compile("^(.*?)\\s*\\b(\\w+)$").matcher(norm(p));
                    if (!pm.matches()) throw new IllegalArgumentException("cannot parse parameter '" + p + "' of " + m.group(2));
                    ps.add(new Param(norm(pm.group(1)), pm.group(2)));
                }
            }
            out.add(new Fn(ret, m.group(2), ps));
        }
        return out;
    }

    static List<Const> constants(String src) {
        Matcher m = Pattern.compile("(?m)^#define\\s+(DS4J_\\w+)\\s+(-?\\d+)\\s*(?:/\\*.*)?$").matcher(src);
        List<Const> out = new ArrayList<>();
        while (m.find()) out.add(new Const(m.group(1), Long.parseLong(m.group(2))));
        return out;
    }

    /** Whitespace collapsed, none before a '*': "void* const*", "const float*". */
    static String norm(String t) {
        return t.trim().replaceAll("\\s+", " ").replaceAll("\\s*\\*", "*");
    }

    /** As C prints it: "void *const *", "const float *". */
    static String display(String ctype) {
        return ctype.replaceAll("\\*", " *").replaceAll("\\* ", "*");
    }

    /** C type → {java type, layout constant}. */
    static String[] map(String ctype, String where) {
        if (ctype.contains("*")) return new String[]{"MemorySegment", "C_POINTER"};
        return switch (ctype.replace("const ", "")) {
            case "int32_t", "int" -> new String[]{"int", "C_INT"};
            case "int64_t", "long long" -> new String[]{"long", "C_LONG"};
            case "float" -> new String[]{"float", "C_FLOAT"};
            case "double" -> new String[]{"double", "C_DOUBLE"};
            case "void" -> new String[]{"void", null};
            default -> throw new IllegalArgumentException("unsupported C type '" + ctype + "' in " + where);
        };
    }

    /** A javadoc comment holding a C snippet, as jextract writes it. */
    static String snippet(String lead, String code) {
        return "    /**\n" + (lead.isEmpty() ? "" : "     * " + lead + "\n") + "     * {@snippet lang=c :\n     * " + code
                + "\n     * }\n     */\n";
    }

    static String generate(String cls, String header, List<Fn> fns, List<Const> consts) {
        StringBuilder b = new StringBuilder();
        b.append("// Generated by tools/bindgen/BindGen.java from ").append(header).append(". Do not edit: change the header and\n");
        b.append("// run `java tools/bindgen/BindGen.java` (BindingsDriftTest checks that the two agree).\n");
        b.append("package io.ds4j.gpu.bindings;\n\n");
        b.append("import java.lang.foreign.AddressLayout;\n");
        b.append("import java.lang.foreign.Arena;\n");
        b.append("import java.lang.foreign.FunctionDescriptor;\n");
        b.append("import java.lang.foreign.Linker;\n");
        b.append("import java.lang.foreign.MemoryLayout;\n");
        b.append("import java.lang.foreign.MemorySegment;\n");
        b.append("import java.lang.foreign.SymbolLookup;\n");
        b.append("import java.lang.foreign.ValueLayout;\n");
        b.append("import java.lang.invoke.MethodHandle;\n\n");
        b.append("/** FFM bindings of {@code ").append(header.substring(header.lastIndexOf('/') + 1))
                .append("} (jextract's shape; the library is found by {@link NativeLibrary}). */\n");
        b.append("@SuppressWarnings({\"unused\", \"checkstyle:all\"})\n");
        b.append("public class ").append(cls).append(" {\n\n");
        b.append("    ").append(cls).append("() {\n        // Should not be called directly\n    }\n\n");
        b.append("    public static final ValueLayout.OfInt C_INT = ValueLayout.JAVA_INT;\n");
        b.append("    public static final ValueLayout.OfLong C_LONG = ValueLayout.JAVA_LONG;\n");
        b.append("    public static final ValueLayout.OfFloat C_FLOAT = ValueLayout.JAVA_FLOAT;\n");
        b.append("    public static final ValueLayout.OfDouble C_DOUBLE = ValueLayout.JAVA_DOUBLE;\n");
        b.append("    public static final AddressLayout C_POINTER = ValueLayout.ADDRESS\n");
        b.append("            .withTargetLayout(MemoryLayout.sequenceLayout(java.lang.Long.MAX_VALUE, ValueLayout.JAVA_BYTE));\n\n");
        b.append("    /** The library, looked up on the first function call. */\n");
        b.append("    static final class Lib {\n");
        b.append("        static final Arena LIBRARY_ARENA = Arena.ofAuto();\n");
        b.append("        static final SymbolLookup SYMBOL_LOOKUP = SymbolLookup.libraryLookup(NativeLibrary.path(), LIBRARY_ARENA);\n");
        b.append("    }\n\n");
        b.append("    static MemorySegment findOrThrow(String symbol) {\n");
        b.append("        return Lib.SYMBOL_LOOKUP.find(symbol).orElseThrow(() -> new UnsatisfiedLinkError(\"unresolved symbol: \" + symbol));\n");
        b.append("    }\n\n");
        for (Const c : consts) {
            b.append("    private static final int ").append(c.name()).append(" = (int)").append(c.value()).append("L;\n\n");
            b.append(snippet("", "#define " + c.name() + " " + c.value()));
            b.append("    public static int ").append(c.name()).append("() {\n        return ").append(c.name()).append(";\n    }\n\n");
        }
        for (Fn f : fns) {
            String[] r = map(f.ret(), f.name());
            StringBuilder desc = new StringBuilder();
            desc.append(r[1] == null ? "FunctionDescriptor.ofVoid(" : "FunctionDescriptor.of(\n                " + cls + "." + r[1]);
            for (int i = 0; i < f.params().size(); i++) {
                String[] p = map(f.params().get(i).ctype(), f.name());
                desc.append(i == 0 && r[1] == null ? "\n                " : ",\n                ").append(cls).append('.').append(p[1]);
            }
            desc.append("\n            )");
            StringBuilder sig = new StringBuilder(), call = new StringBuilder(), csig = new StringBuilder();
            for (int i = 0; i < f.params().size(); i++) {
                Param p = f.params().get(i);
                if (i > 0) {
                    sig.append(", ");
                    call.append(", ");
                    csig.append(", ");
                }
                sig.append(map(p.ctype(), f.name())[0]).append(' ').append(p.name());
                call.append(p.name());
                csig.append(display(p.ctype())).append(p.ctype().endsWith("*") ? "" : " ").append(p.name());
            }
            String n = f.name();
            b.append("    private static class ").append(n).append(" {\n");
            b.append("        public static final FunctionDescriptor DESC = ").append(desc).append(";\n\n");
            b.append("        public static final MemorySegment ADDR = ").append(cls).append(".findOrThrow(\"").append(n).append("\");\n\n");
            b.append("        public static final MethodHandle HANDLE = Linker.nativeLinker().downcallHandle(ADDR, DESC);\n");
            b.append("    }\n\n");
            String cdecl = display(f.ret()) + (f.ret().endsWith("*") ? "" : " ") + n + "(" + csig + ")";
            b.append(snippet("Function descriptor for:", cdecl));
            b.append("    public static FunctionDescriptor ").append(n).append("$descriptor() {\n        return ").append(n).append(".DESC;\n    }\n\n");
            b.append(snippet("Downcall method handle for:", cdecl));
            b.append("    public static MethodHandle ").append(n).append("$handle() {\n        return ").append(n).append(".HANDLE;\n    }\n\n");
            b.append(snippet("Address for:", cdecl));
            b.append("    public static MemorySegment ").append(n).append("$address() {\n        return ").append(n).append(".ADDR;\n    }\n\n");
            b.append(snippet("", cdecl));
            b.append("    public static ").append(r[0]).append(' ').append(n).append('(').append(sig).append(") {\n");
            b.append("        var mh$ = ").append(n).append(".HANDLE;\n");
            b.append("        try {\n");
            b.append("            ").append(r[1] == null ? "" : "return (" + r[0] + ") ").append("mh$.invokeExact(").append(call).append(");\n");
            b.append("        } catch (Throwable ex$) {\n");
            b.append("            throw new AssertionError(\"should not reach here\", ex$);\n");
            b.append("        }\n");
            b.append("    }\n\n");
        }
        b.setLength(b.length() - 1);
        b.append("}\n");
        return b.toString();
    }
}
