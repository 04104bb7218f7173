package io.ds4j.grammar;

import java.util.List;

/**
 * A compiled JSON Schema node of the supported subset ({@link SchemaCompiler}). Nodes compare by identity, so a
 * schema with {@code $ref} cycles is a graph of nodes and states that point at it stay cheap to compare.
 */
public abstract sealed class Schema {
    /** The fewest bytes of any JSON text valid for this node ({@link GState#FAR} for none); set by the compiler. */
    int minLen = GState.FAR;

    /** Any JSON value (json_object mode and schemas without constraints). */
    public static final class Any extends Schema {}

    /** An object whose keys and values are free (type object without properties). */
    public static final class AnyObject extends Schema {}

    /** A string without further constraints. */
    public static final class Str extends Schema {}

    /**
     * A string held to {@code minLength}/{@code maxLength} (counted in characters, Unicode code points, as JSON Schema
     * counts them) and, where given, to a pattern its characters must match as a whole ({@code pattern}, or the
     * pattern of a {@code format}).
     */
    public static final class StrOf extends Schema {
        /** The pattern, or {@link #ANY_TEXT} where only the length is held. */
        final Regex re;
        final int minLength;
        /** −1: none. */
        final int maxLength;
        /**
         * {@link Regex#charCounts} of the pattern up to {@link #cap}, where a length range and a pattern are both
         * held (null where either is not: the count alone or the pattern alone then decides).
         */
        final java.util.BitSet[] counts;
        /**
         * The longest remaining length the counts tell apart: maxLength, or without one minLength plus the pattern's
         * size (a pattern that can end after at least L characters can also end within its size of L).
         */
        final int cap;

        StrOf(Regex re, int minLength, int maxLength, java.util.BitSet[] counts, int cap) {
            this.re = re;
            this.minLength = minLength;
            this.maxLength = maxLength;
            this.counts = counts;
            this.cap = cap;
        }

        /** The pattern of any text, which a string held to a length alone steps (every character keeps its one state). */
        static final Regex ANY_TEXT = Regex.compile("[\\s\\S]*");
    }

    /** A JSON value written as text a pattern matches whole (an integer between bounds, {@link Formats#integers}). */
    public static final class Text extends Schema {
        final Regex re;

        Text(Regex re) {
            this.re = re;
        }
    }

    /** A number, or an integer (no fraction, no exponent). */
    public static final class Num extends Schema {
        final boolean integer;
        /** minimum: 0 — no minus sign. */
        boolean nonNegative;
        /** Range bounds given: at most this many integer digits and no exponent (−1: unbounded). */
        int maxIntDigits = -1;
        /**
         * Where the maximum is below 10^15: the fraction digits a positive number whose integer part is 15 nines may
         * reach at most, compared digit by digit (missing digits are 0); null where no such number can exceed it.
         */
        String posCap;
        /** The same for a negative number's magnitude against a minimum above −10^15. */
        String negCap;

        Num(boolean integer) {
            this.integer = integer;
        }
    }

    /** One of a fixed set of JSON texts (enum, const, boolean, null), held as their canonical serialisations. */
    public static final class Literals extends Schema {
        final LitSet set;

        Literals(List<String> texts) {
            this.set = new LitSet(texts);
        }
    }

    /** An array of one item schema with a length range (maxItems −1: none). */
    public static final class Arr extends Schema {
        Schema items;
        final int minItems, maxItems;

        Arr(int minItems, int maxItems) {
            this.minItems = minItems;
            this.maxItems = maxItems;
        }
    }

    /**
     * An object with known properties, emitted in the schema's order; required ones always, optional ones may be
     * left out; no other keys.
     */
    public static final class Obj extends Schema {
        final List<String> names;
        final Schema[] props;
        final boolean[] required;
        /** Key sets for each starting index, built on first use (index i: keys of props i..first required). */
        private final LitSet[] keySets;
        private final int[] keyLen;
        private final LitSet[] dsmlSets;
        private final LitSet[] dsmlSetsFirst;

        Obj(List<String> names, Schema[] props, boolean[] required) {
            this.names = names;
            this.props = props;
            this.required = required;
            this.keySets = new LitSet[names.size() + 1];
            this.keyLen = new int[names.size()];
            for (int j = 0; j < keyLen.length; j++) keyLen[j] = Json.quote(names.get(j)).getBytes(java.nio.charset.StandardCharsets.UTF_8).length;
            this.dsmlSets = new LitSet[names.size() + 1];
            this.dsmlSetsFirst = new LitSet[names.size() + 1];
        }

        /** The fewest bytes from property i (before its comma, or right after '{' when first) up to and including '}'. */
        int tail(int i, boolean first) {
            long sum = 0;
            int count = 0;
            for (int j = i; j < props.length; j++) {
                if (!required[j]) continue;
                sum += keyLen[j] + 1L + props[j].minLen;
                count++;
            }
            sum += (first ? Math.max(0, count - 1) : count) + 1;
            return (int) Math.min(GState.FAR, sum);
        }

        /** Bytes of parameter j's value and closing tag at the least (raw strings may be empty). */
        int dsmlValue(int j) {
            int close = Dsml.PARAMETER_CLOSE.getBytes(java.nio.charset.StandardCharsets.UTF_8).length;
            return (int) Math.min(GState.FAR, (Dsml.raw(props[j]) ? 0L : props[j].minLen) + close);
        }

        private volatile int[][] dsmlTails;

        /** The fewest bytes of DSML parameters from i on, up to and including the invoke close. */
        int dsmlTail(int i, boolean first) {
            int[][] t = dsmlTails;
            if (t == null) {
                t = new int[2][props.length + 1];
                for (int f = 0; f < 2; f++) for (int j = 0; j <= props.length; j++) t[f][j] = computeDsmlTail(j, f == 1);
                dsmlTails = t;
            }
            return t[first ? 1 : 0][i];
        }

        private int computeDsmlTail(int i, boolean first) {
            long sum = ("\n" + Dsml.INVOKE_CLOSE).getBytes(java.nio.charset.StandardCharsets.UTF_8).length;
            boolean firstLine = first;
            for (int j = i; j < props.length; j++) {
                if (!required[j]) continue;
                String open = (firstLine ? "" : "\n") + Dsml.PARAMETER_OPEN + " name=\"" + names.get(j) + "\" string=\""
                        + (Dsml.raw(props[j]) ? "true" : "false") + "\">";
                sum += open.getBytes(java.nio.charset.StandardCharsets.UTF_8).length + (long) dsmlValue(j);
                firstLine = false;
            }
            return (int) Math.min(GState.FAR, sum);
        }

        /** Index of the first required property at or after i, or size when none. */
        int firstRequired(int i) {
            while (i < props.length && !required[i]) i++;
            return i;
        }

        /** The keys that may come next when properties before i are done: {@code "name"} texts; values are indices. */
        synchronized LitSet keys(int i) {
            if (keySets[i] == null) {
                int end = Math.min(firstRequired(i), props.length - 1);
                List<String> k = new java.util.ArrayList<>();
                int[] idx = new int[end - i + 1];
                for (int j = i; j <= end; j++) {
                    k.add(Json.quote(names.get(j)));
                    idx[j - i] = j;
                }
                keySets[i] = new LitSet(k, idx);
            }
            return keySets[i];
        }

        /** A DSML parameter opening for each candidate of {@link #keys}, plus the invoke close when allowed (value −1). */
        synchronized LitSet dsml(int i, boolean first) {
            LitSet[] cache = first ? dsmlSetsFirst : dsmlSets;
            if (cache[i] == null) {
                int fr = firstRequired(i);
                int end = Math.min(fr, props.length - 1);
                List<String> k = new java.util.ArrayList<>();
                List<Integer> idx = new java.util.ArrayList<>();
                for (int j = i; j <= end && j < props.length; j++) {
                    k.add((first ? "" : "\n") + Dsml.PARAMETER_OPEN + " name=\"" + names.get(j) + "\" string=\""
                            + (Dsml.raw(props[j]) ? "true" : "false") + "\">");
                    idx.add(j);
                }
                if (fr == props.length) {
                    k.add("\n" + Dsml.INVOKE_CLOSE);
                    idx.add(-1);
                }
                cache[i] = new LitSet(k, idx.stream().mapToInt(Integer::intValue).toArray());
            }
            return cache[i];
        }
    }

    /** Any of several schemas. */
    public static final class AnyOf extends Schema {
        Schema[] options;
        /**
         * The distinct schemas a value of this node can start as, nested anyOf and {@code $ref} expanded (neither
         * consumes input), none of them an AnyOf or a Ref; set by the compiler.
         */
        Schema[] alternatives;
    }

    /** Placeholder for a {@code $ref} until the compiler resolves it. */
    static final class Ref extends Schema {
        Schema target;
    }
}
