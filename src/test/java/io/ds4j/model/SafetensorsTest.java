package io.ds4j.model;

import com.fasterxml.jackson.databind.JsonNode;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/** Safetensors writer/reader round trips and header validation. */
class SafetensorsTest {
    @TempDir
    Path tmp;

    private static final float[] SPECIAL = {0f, -0f, 1f, -1.5f, 3.14159265f, 1e-40f, -2.5e-42f, 65504f, 70000f, 1e-8f,
            Float.MAX_VALUE, Float.MIN_NORMAL, Float.POSITIVE_INFINITY, Float.NEGATIVE_INFINITY, Float.NaN, 1.00390625f};

    @Test
    void floatDtypesRoundTrip() throws Exception {
        Path f = tmp.resolve("a.safetensors");
        new SafetensorsWriter()
                .add("f32", DType.F32, new long[]{4, 4}, SPECIAL)
                .add("bf16", DType.BF16, new long[]{16}, SPECIAL)
                .add("f16", DType.F16, new long[]{2, 8}, SPECIAL)
                .write(f);
        try (SafetensorsFile sf = SafetensorsFile.open(f)) {
            float[] a = sf.tensor("f32").toFloats(), b = sf.tensor("bf16").toFloats(), h = sf.tensor("f16").toFloats();
            for (int i = 0; i < SPECIAL.length; i++) {
                assertEquals(Float.floatToIntBits(SPECIAL[i]), Float.floatToIntBits(a[i]), "f32 " + i);
                assertEquals(Float.floatToIntBits(torchBf16(SPECIAL[i])), Float.floatToIntBits(b[i]), "bf16 " + i);
                assertEquals(Float.floatToIntBits(Float.float16ToFloat(Float.floatToFloat16(SPECIAL[i]))),
                        Float.floatToIntBits(h[i]), "f16 " + i);
            }
            // as matrices too
            WeightMatrix m = new WeightMatrix(WeightMatrix.Format.BF16, 4, 4, sf.tensor("bf16").data(), null, null, 0, "bf16");
            assertEquals(b[6], m.get(1, 2));
            assertEquals(DType.F16, sf.tensor("f16").dtype());
            assertArrayEquals(new long[]{2, 8}, sf.tensor("f16").shape());
        }
    }

    /** Reference rounding: nearest, ties to even on the upper 16 bits (torch's c10 rule), written independently. */
    private static float torchBf16(float f) {
        if (Float.isNaN(f)) return Float.intBitsToFloat(0x7FC00000);
        long bits = Integer.toUnsignedLong(Float.floatToRawIntBits(f));
        long lower = bits & 0xFFFF, upper = bits >>> 16;
        if (lower > 0x8000 || (lower == 0x8000 && (upper & 1) == 1)) upper++;
        return Float.intBitsToFloat((int) (upper << 16));
    }

    @Test
    void bf16RoundsToNearestEven() {
        assertEquals((short) 0x3F80, SafetensorsWriter.bf16(Float.intBitsToFloat(0x3F808000))); // tie, even stays
        assertEquals((short) 0x3F82, SafetensorsWriter.bf16(Float.intBitsToFloat(0x3F818000))); // tie, odd goes up
        assertEquals((short) 0x3F81, SafetensorsWriter.bf16(Float.intBitsToFloat(0x3F808001)));
        assertEquals((short) 0x3F80, SafetensorsWriter.bf16(Float.intBitsToFloat(0x3F807FFF)));
        assertEquals((short) 0xBF80, SafetensorsWriter.bf16(-1f));
        assertEquals((short) 0x7F80, SafetensorsWriter.bf16(Float.MAX_VALUE)); // overflows to +inf like torch
        assertEquals((short) 0x7FC0, SafetensorsWriter.bf16(Float.NaN));
        assertEquals((short) 0x8000, SafetensorsWriter.bf16(-0f));
    }

    @Test
    void headerLayoutIntsMetadataAndFillers() throws Exception {
        Path f = tmp.resolve("b.safetensors");
        new SafetensorsWriter()
                .metadata(Map.of("format", "pt", "note", "x"))
                .addInts("zz.ids", DType.I64, new long[]{2, 3}, new long[]{0, 1, -2, 3, Long.MAX_VALUE, 5})
                .addInts("aa.i32", DType.I32, new long[]{3}, new long[]{7, -8, 9})
                .addBytes("mm.bytes", DType.U8, new long[]{3}, new byte[]{1, (byte) 200, 3})
                .add("empty", DType.F32, new long[]{0, 5}, new float[0])
                .add("scalar", DType.F32, new long[]{}, new float[]{2.5f})
                .add("filled", DType.F32, new long[]{5}, seg -> {
                    for (int i = 0; i < 5; i++) seg.set(WeightMatrix.F32_LE, 4L * i, i * 0.5f);
                })
                .write(f);
        byte[] all = Files.readAllBytes(f);
        long n = ByteBuffer.wrap(all, 0, 8).order(ByteOrder.LITTLE_ENDIAN).getLong();
        assertEquals(0, n % 8, "header length is 8-aligned");
        String header = new String(all, 8, (int) n, StandardCharsets.UTF_8);
        assertTrue(header.startsWith("{\"__metadata__\""), header);
        assertTrue(header.substring(header.lastIndexOf('}') + 1).chars().allMatch(ch -> ch == ' '), "space padding");
        JsonNode h = LoaderFixtures.JSON.readTree(header);
        List<String> names = new java.util.ArrayList<>();
        h.fieldNames().forEachRemaining(names::add);
        assertEquals(List.of("__metadata__", "aa.i32", "empty", "filled", "mm.bytes", "scalar", "zz.ids"), names);
        // contiguous offsets in name order
        long expect = 0;
        for (String name : names.subList(1, names.size())) {
            JsonNode off = h.get(name).get("data_offsets");
            assertEquals(expect, off.get(0).asLong(), name);
            expect = off.get(1).asLong();
        }
        assertEquals(8 + n + expect, all.length);

        try (SafetensorsFile sf = SafetensorsFile.open(f)) {
            assertEquals(Map.of("format", "pt", "note", "x"), sf.metadata());
            assertEquals(6, sf.names().size());
            assertArrayEquals(new long[]{0, 1, -2, 3, Long.MAX_VALUE, 5}, sf.tensor("zz.ids").toLongs());
            assertArrayEquals(new long[]{7, -8, 9}, sf.tensor("aa.i32").toLongs());
            assertArrayEquals(new long[]{1, 200, 3}, sf.tensor("mm.bytes").toLongs());
            assertEquals(0, sf.tensor("empty").data().byteSize());
            assertArrayEquals(new float[]{2.5f}, sf.tensor("scalar").toFloats());
            assertArrayEquals(new float[]{0, .5f, 1, 1.5f, 2}, sf.tensor("filled").toFloats());
            assertTrue(sf.tensor("filled").data().isReadOnly());
            CheckpointException e = assertThrows(CheckpointException.class, () -> sf.tensor("nope"));
            assertTrue(e.getMessage().contains("nope") && e.getMessage().contains(f.toString()), e.getMessage());
        }
    }

    @Test
    void writerRejectsBadInput() {
        SafetensorsWriter w = new SafetensorsWriter().add("a", DType.F32, new long[]{1}, new float[]{1});
        assertThrows(IllegalArgumentException.class, () -> w.add("a", DType.F32, new long[]{1}, new float[]{1}));
        assertThrows(IllegalArgumentException.class, () -> w.add("b", DType.F32, new long[]{2}, new float[]{1}));
        assertThrows(IllegalArgumentException.class, () -> w.add("c", DType.I8, new long[]{1}, new float[]{1}));
        assertThrows(IllegalArgumentException.class, () -> w.add("d", DType.BF16, new long[]{3}, MemorySegment.ofArray(new byte[4])));
        assertThrows(IllegalArgumentException.class, () -> w.add("__metadata__", DType.F32, new long[]{1}, new float[]{1}));
    }

    /** A file larger than 2 GiB (sparse: only a few bytes are touched), with tensors past the 2 GiB mark. */
    @Test
    void filesLargerThan2GiB() throws Exception {
        Path f = tmp.resolve("big.safetensors");
        long big = (1L << 31) + 64;
        new SafetensorsWriter()
                .add("a.big", DType.U8, new long[]{big}, seg -> {
                    seg.set(ValueLayout.JAVA_BYTE, 0, (byte) 11);
                    seg.set(ValueLayout.JAVA_BYTE, big - 1, (byte) 22);
                })
                .add("b.after", DType.F32, new long[]{3}, new float[]{1, 2, 3})
                .write(f);
        try (SafetensorsFile sf = SafetensorsFile.open(f)) {
            StoredTensor t = sf.tensor("a.big");
            assertEquals(big, t.data().byteSize());
            assertEquals(11, t.data().get(ValueLayout.JAVA_BYTE, 0));
            assertEquals(22, t.data().get(ValueLayout.JAVA_BYTE, big - 1));
            assertArrayEquals(new float[]{1, 2, 3}, sf.tensor("b.after").toFloats());
            assertThrows(CheckpointException.class, t::toLongs, "too large for the heap");
        }
        Files.delete(f);
    }

    // ------------------------------------------------------------------ corrupt files

    private Path small() throws Exception {
        Path f = tmp.resolve("s.safetensors");
        new SafetensorsWriter().add("x.weight", DType.F32, new long[]{2, 2}, new float[]{1, 2, 3, 4})
                .add("y.weight", DType.BF16, new long[]{2}, new float[]{1, 2}).write(f);
        return f;
    }

    private static CheckpointException fails(Path f, String... fragments) {
        CheckpointException e = assertThrows(CheckpointException.class, () -> SafetensorsFile.open(f).close());
        assertTrue(e.getMessage().contains(f.toString()), e.getMessage());
        for (String s : fragments) assertTrue(e.getMessage().contains(s), "'" + s + "' missing in: " + e.getMessage());
        return e;
    }

    @Test
    void truncatedFile() throws Exception {
        Path f = small();
        byte[] b = Files.readAllBytes(f);
        Files.write(f, java.util.Arrays.copyOf(b, b.length - 3));
        assertEquals("y.weight", fails(f, "truncated", "y.weight").tensor());
        Files.write(f, java.util.Arrays.copyOf(b, 5));
        fails(f, "truncated");
    }

    @Test
    void corruptHeaders() throws Exception {
        Path f = small();
        byte[] b = Files.readAllBytes(f);
        // garbage JSON of the same length
        byte[] g = b.clone();
        for (int i = 8; i < 30; i++) g[i] = (byte) '#';
        Files.write(f, g);
        fails(f, "corrupt header", "JSON");
        // header length larger than the file
        byte[] h = b.clone();
        ByteBuffer.wrap(h).order(ByteOrder.LITTLE_ENDIAN).putLong(0, 1L << 40);
        Files.write(f, h);
        fails(f, "header length 1099511627776 + 8 is larger than the file");
        ByteBuffer.wrap(h).order(ByteOrder.LITTLE_ENDIAN).putLong(0, -5);
        Files.write(f, h);
        fails(f, "larger than the file");
        // JSON that is not an object
        Path a = tmp.resolve("arr.safetensors");
        byte[] arr = "[1, 2, 3]       ".getBytes(StandardCharsets.US_ASCII);
        Files.write(a, ByteBuffer.allocate(8 + arr.length).order(ByteOrder.LITTLE_ENDIAN).putLong(arr.length).put(arr).array());
        fails(a, "not a JSON object");
        // missing file
        fails(tmp.resolve("absent.safetensors"), "not found");
    }

    @Test
    void unsupportedDtypeAndBadOffsets() throws Exception {
        Path f = small();
        LoaderFixtures.rewriteHeader(f, h -> {
            ((com.fasterxml.jackson.databind.node.ObjectNode) h.get("x.weight")).put("dtype", "F8_E5M2");
            return h;
        });
        assertEquals("x.weight", fails(f, "unsupported dtype F8_E5M2", "x.weight").tensor());

        f = small();
        LoaderFixtures.rewriteHeader(f, h -> {
            ((com.fasterxml.jackson.databind.node.ObjectNode) h.get("x.weight")).putArray("shape").add(3).add(2);
            return h;
        });
        fails(f, "x.weight", "needs 24");

        f = small();
        LoaderFixtures.rewriteHeader(f, h -> {
            ((com.fasterxml.jackson.databind.node.ObjectNode) h.get("y.weight")).putArray("data_offsets").add(1000).add(1004);
            return h;
        });
        fails(f, "y.weight", "truncated");

        f = small();
        LoaderFixtures.rewriteHeader(f, h -> {
            ((com.fasterxml.jackson.databind.node.ObjectNode) h.get("y.weight")).putArray("shape").add(-1);
            return h;
        });
        fails(f, "y.weight", "invalid dimension");
    }
}
