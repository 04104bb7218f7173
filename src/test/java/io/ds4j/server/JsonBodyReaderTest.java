package io.ds4j.server;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;
import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;

import static org.junit.jupiter.api.Assertions.*;

/** Request bodies read by {@link Json#BODY_READER}: Jackson's tree, with numbers that keep the client's text. */
class JsonBodyReaderTest {
    static JsonNode read(String json) throws Exception {
        return Json.BODY_READER.readTree(json.getBytes(StandardCharsets.UTF_8));
    }

    @Test
    void theTreeIsJacksonsOwn() throws Exception {
        String doc = "{\"a\":[1,-0,2.5,1e-400,1E10,12345678901,123456789012345678901234567890,-0.0,true,false,null,\"s\"],"
                + "\"b\":{\"c\":{\"d\":[[],{}]}},\"e\":\"\\u00e9\"}";
        JsonNode ours = read(doc), jacksons = Json.MAPPER.readTree(doc);
        assertEquals(jacksons, ours);
        // the same node types (a number that keeps its text is one of Jackson's own kind)
        for (int i = 0; i < jacksons.get("a").size(); i++)
            assertTrue(jacksons.get("a").get(i).getClass().isInstance(ours.get("a").get(i)), "element " + i + ": " + ours.get("a").get(i).getClass());
        // written back, a body's numbers are what they were (tool schemas go into prompts so)
        assertEquals(Json.write(jacksons), Json.write(ours));
        assertTrue(read("null").isNull());
        assertTrue(read("  ").isMissingNode());
        assertEquals(5, read("5").intValue());
        String deep = "[".repeat(900) + "]".repeat(900);
        assertEquals(Json.MAPPER.readTree(deep), read(deep));
    }

    @Test
    void numbersKeepTheTextTheClientWrote() throws Exception {
        JsonNode a = read("[1e-400,1E10,2.50,-0.0,-0,0,7,12345678901]");
        String[] written = {"1e-400", "1E10", "2.50", "-0.0", "-0", null, null, null};
        for (int i = 0; i < written.length; i++) assertEquals(written[i], Json.written(a.get(i)), "element " + i);
        assertEquals(0.0, a.get(0).doubleValue());
        assertEquals(0, a.get(4).intValue());
        assertTrue(a.get(4).isInt() && a.get(1).isDouble());
        assertNull(Json.written(Json.MAPPER.readTree("1.5")), "only request bodies keep it");
    }

    @Test
    void utf16AndUtf32TextIsNotReadAsJson() throws Exception {
        // ASCII text in these encodings is well-formed UTF-8 with NUL bytes between the characters; Jackson alone
        // would detect the encoding and read it (a UTF-16LE body answered 200)
        String doc = "{\"a\":1}";
        for (var cs : new java.nio.charset.Charset[] {StandardCharsets.UTF_16LE, StandardCharsets.UTF_16BE,
                java.nio.charset.Charset.forName("UTF-32LE"), java.nio.charset.Charset.forName("UTF-32BE")}) {
            byte[] b = doc.getBytes(cs);
            int nul = 0;
            while (b[nul] != 0) nul++;
            Json.Unreadable e = assertThrows(Json.Unreadable.class, () -> Json.read(b, "a file"), cs.name());
            assertEquals(Json.Problem.UTF8, e.problem(), cs.name());
            assertEquals("not UTF-8 JSON: it holds a NUL byte at byte offset " + nul + ", as UTF-16 and UTF-32 text do (JSON"
                    + " writes U+0000 only as the escape \\u0000)", e.getMessage(), cs.name());
        }
        // the same text with its byte order mark (what iconv -t UTF-16 and -t UTF-32 write) is named by the mark, not
        // by the mark's first byte as a malformed UTF-8 sequence; UTF-8's own mark is read as before
        String[][] marks = {{"UTF-16", "UTF-16LE (FF FE)", "FFFE"}, {"UTF-16", "UTF-16BE (FE FF)", "FEFF"},
                {"UTF-32", "UTF-32LE (FF FE 00 00)", "FFFE0000"}, {"UTF-32", "UTF-32BE (00 00 FE FF)", "0000FEFF"}};
        for (String[] m : marks) {
            byte[] mark = java.util.HexFormat.of().parseHex(m[2]);
            byte[] text = doc.getBytes(java.nio.charset.Charset.forName(m[1].substring(0, 8)));
            byte[] b = new byte[mark.length + text.length];
            System.arraycopy(mark, 0, b, 0, mark.length);
            System.arraycopy(text, 0, b, mark.length, text.length);
            Json.Unreadable e = assertThrows(Json.Unreadable.class, () -> Json.read(b), m[1]);
            assertEquals("not UTF-8 JSON: it starts with the byte order mark of " + m[1], e.getMessage(), m[1]);
        }
        byte[] utf8Bom = ("\uFEFF" + doc).getBytes(StandardCharsets.UTF_8);
        assertEquals(1, Json.read(utf8Bom).get("a").intValue());
        // U+0000 escaped is a character like any other
        assertEquals("x\u0000y", Json.read("{\"a\":\"x\\u0000y\"}".getBytes(StandardCharsets.UTF_8)).get("a").asText());
    }

    @Test
    void theParsersChecksStillApply() {
        assertThrows(JsonProcessingException.class, () -> read("{\"a\":1,\"a\":2}"), "a key given twice");
        assertThrows(JsonProcessingException.class, () -> read("{\"a\":1} x"), "trailing content");
        assertThrows(JsonProcessingException.class, () -> read("{\"a\":[1,"), "the JSON ends too early");
    }
}
