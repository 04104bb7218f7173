package io.ds4j.gpu.bindings;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Every kernel of the GPU library ({@code __global__} function in src/main/native/src) must begin with
 * {@code DS4J_AWAIT_PREVIOUS();} or {@code DS4J_AWAIT_PREVIOUS_PREFETCHING(range);} (an L2 prefetch of its weights,
 * then the same wait): step graphs link consecutive kernels by programmatic edges (graph.cpp, programmatic_edges),
 * which let a kernel start while the one before it still runs; only that first line (common.h) makes it wait for the
 * previous kernel's results. A kernel without it would read inputs that are not written yet. The prefetching form's
 * range must come from the kernel's parameters and indices alone (it runs before the wait); this test checks only that
 * the line is first, a reviewer the argument. Needs no GPU: the sources are read as text.
 */
class KernelEntryTest {
    static final Path SOURCES = Path.of("src/main/native/src");

    /**
     * The source with its comments blanked (each replaced by a space; newlines kept), read left to right so that a
     * comment marker inside a string or character literal, or one kind of comment inside the other, is taken as C++
     * takes it.
     */
    static String withoutComments(String src) {
        StringBuilder out = new StringBuilder(src.length());
        int i = 0, n = src.length();
        while (i < n) {
            char c = src.charAt(i);
            if (c == '/' && i + 1 < n && src.charAt(i + 1) == '/') {
                // a backslash at the end of the line splices the next line into the comment
                while (i < n && src.charAt(i) != '\n') i += src.charAt(i) == '\\' && i + 1 < n && src.charAt(i + 1) == '\n' ? 2 : 1;
                out.append(' ');
            } else if (c == '/' && i + 1 < n && src.charAt(i + 1) == '*') {
                int end = src.indexOf("*/", i + 2);
                i = end < 0 ? n : end + 2;
                out.append(' ');
            } else if (c == '"' && rawStringAt(src, i)) {
                // R"delim( ... )delim": no escapes, may span lines and hold quotes and comment markers
                int paren = src.indexOf('(', i + 1);
                String close = paren < 0 ? null : ")" + src.substring(i + 1, paren) + "\"";
                int end = close == null ? -1 : src.indexOf(close, paren + 1);
                int j = end < 0 ? n : end + close.length();
                out.append(src, i, j);
                i = j;
            } else if (c == '"' || c == '\'') {
                int j = i + 1;
                while (j < n && src.charAt(j) != c && src.charAt(j) != '\n') j += src.charAt(j) == '\\' ? 2 : 1;
                j = Math.min(j + 1, n);
                out.append(src, i, j);
                i = j;
            } else {
                out.append(c);
                i++;
            }
        }
        return out.toString();
    }

    /** Whether the quote at q opens a raw string literal: R right before it, alone or after u8, u, U or L. */
    static boolean rawStringAt(String src, int q) {
        if (q == 0 || src.charAt(q - 1) != 'R') return false;
        int start = q - 1;
        while (start > 0 && (Character.isLetterOrDigit(src.charAt(start - 1)) || src.charAt(start - 1) == '_')) start--;
        String prefix = src.substring(start, q - 1);
        return prefix.isEmpty() || prefix.equals("u8") || prefix.equals("u") || prefix.equals("U") || prefix.equals("L");
    }

    /**
     * The kernels of one source whose body does not start with the wait: the name of each {@code __global__}
     * definition (prototypes, ending in ';' before any '{', are skipped).
     */
    static List<String> kernelsWithoutWait(String src) {
        String s = withoutComments(src);
        List<String> bad = new ArrayList<>();
        int at = 0;
        while ((at = s.indexOf("__global__", at)) >= 0) {
            int j = at + "__global__".length(), depth = 0, open = -1;
            for (; j < s.length(); j++) {
                char c = s.charAt(j);
                if (c == '(') depth++;
                else if (c == ')') depth--;
                else if (c == ';' && depth == 0) break;
                else if (c == '{' && depth == 0) {
                    open = j;
                    break;
                }
            }
            if (open >= 0) {
                // the name: the identifier before the last top-level '(' (the parameter list, after __launch_bounds__)
                int params = -1, d = 0;
                for (int i = at; i < open; i++) {
                    char c = s.charAt(i);
                    if (c == '(' && d++ == 0) params = i;
                    else if (c == ')') d--;
                }
                String name = params < 0 ? "(a kernel without a parameter list near offset " + at + ")"
                        : s.substring(at, params).trim().replaceAll("(?s).*?(\\w+)$", "$1");
                String body = s.substring(open + 1).stripLeading();
                if (!body.startsWith("DS4J_AWAIT_PREVIOUS();") && !body.startsWith("DS4J_AWAIT_PREVIOUS_PREFETCHING(")) bad.add(name);
            }
            at = j;
        }
        return bad;
    }

    /** Kernels in the source listing. */
    static int kernelCount(String src) {
        String s = withoutComments(src);
        int n = 0, at = 0;
        while ((at = s.indexOf("__global__", at)) >= 0) {
            n++;
            at += 10;
        }
        return n;
    }

    @Test
    void everyKernelWaitsForThePreviousOne() throws IOException {
        List<String> bad = new ArrayList<>();
        int kernels = 0;
        try (Stream<Path> files = Files.walk(SOURCES)) {
            for (Path f : files.filter(p -> p.toString().endsWith(".cpp") || p.toString().endsWith(".h")).sorted().toList()) {
                String src = Files.readString(f);
                kernels += kernelCount(src);
                for (String k : kernelsWithoutWait(src)) bad.add(f.getFileName() + ": " + k);
            }
        }
        assertTrue(kernels >= 40, "expected the library's kernels under " + SOURCES + ", found " + kernels);
        assertEquals(List.of(), bad, "kernels that do not begin with DS4J_AWAIT_PREVIOUS(); (common.h says why)");
    }

    @Test
    void theCheckFindsAKernelWithoutTheWait() {
        String src = """
                template <int N>
                __global__ void __launch_bounds__(N >= 4 ? 256 : 512) good(const float* x) {
                    DS4J_AWAIT_PREVIOUS();
                    x++;
                }
                __global__ void declared(int n);  // a prototype: no body
                __global__ void bad(float* y, int n) {
                    y[0] = n;
                }
                __global__ void prefetching(const uint8_t* w, float* y) {
                    DS4J_AWAIT_PREVIOUS_PREFETCHING(L2Range{w, 4096});
                    y[0] = w[0];
                }
                __global__ void prefetchAfter(const uint8_t* w, float* y) {
                    y[0] = w[0];
                    DS4J_AWAIT_PREVIOUS_PREFETCHING(L2Range{w, 4096});
                }
                """;
        assertEquals(List.of("bad", "prefetchAfter"), kernelsWithoutWait(src));
    }

    @Test
    void commentsAndStringsAreReadAsTheCompilerReadsThem() {
        String src = """
                // a line comment holding /* does not open a block comment
                __global__ void hidden(float* y) {
                    y[0] = 1.f;
                }
                /* a block comment: __global__ void inComment(float* y) { y[0] = 2.f; } */
                __global__ void quoted(const char* s) {
                    DS4J_AWAIT_PREVIOUS();
                    s = "// not a comment"; s = "/* nor this";
                }
                __global__ void afterTheString(float* y) {
                    y[0] = 3.f;
                }
                """;
        assertEquals(List.of("hidden", "afterTheString"), kernelsWithoutWait(src));
        assertEquals(3, kernelCount(src));
    }

    @Test
    void rawStringsQuotesInCharactersAndSplicedLineComments() {
        String src = """
                const char* raw = R"x(a " quote, /* no comment )" and
                a second line // nor this)x";
                __global__ void afterRaw(float* y) {
                    y[0] = 1.f;
                }
                const char q = '"'; const char* s = "\\\\"; // a quote as a character; an escaped backslash, then the string ends
                __global__ void afterQuote(float* y) {
                    y[0] = 2.f;
                }
                // a comment continued on the next line by a backslash \\
                __global__ void spliced(float* y) { y[0] = 3.f; }
                const char* far = FAR"(";  // an identifier ending in R is no raw-string prefix
                __global__ void afterFar(float* y) {
                    y[0] = 4.f;
                }
                """;
        assertEquals(List.of("afterRaw", "afterQuote", "afterFar"), kernelsWithoutWait(src));
        assertEquals(3, kernelCount(src));
    }
}
