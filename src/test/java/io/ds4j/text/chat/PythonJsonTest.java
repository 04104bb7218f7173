package io.ds4j.text.chat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import org.junit.jupiter.api.Test;

/** Expected values are what CPython's {@code json.dumps(..., ensure_ascii=False)} prints. */
class PythonJsonTest {
    private static String dumps(String json) {
        return PythonJson.dumps(PythonJson.parseOrNull(json));
    }

    @Test
    void floatsAsPythonRepr() {
        assertEquals("1.0", PythonJson.floatRepr(1.0));
        assertEquals("100.0", PythonJson.floatRepr(100.0));
        assertEquals("1250.5", PythonJson.floatRepr(1250.5));
        assertEquals("1e+16", PythonJson.floatRepr(1e16));
        assertEquals("1000000000000000.0", PythonJson.floatRepr(1e15));
        assertEquals("0.0001", PythonJson.floatRepr(0.0001));
        assertEquals("1e-05", PythonJson.floatRepr(0.00001));
        assertEquals("1.5e-07", PythonJson.floatRepr(1.5e-7));
        assertEquals("-0.0", PythonJson.floatRepr(-0.0));
        assertEquals("3.14", PythonJson.floatRepr(3.14));
        assertEquals("2.5e+20", PythonJson.floatRepr(2.5e20));
        assertEquals("123456789.12345679", PythonJson.floatRepr(123456789.123456789));
        assertEquals("1e-320", PythonJson.floatRepr(1e-320));
        assertEquals("0.30000000000000004", PythonJson.floatRepr(0.1 + 0.2));
        assertEquals("1e+22", PythonJson.floatRepr(1e22));
        assertEquals("-2.5", PythonJson.floatRepr(-2.5));
    }

    @Test
    void structuresAndStrings() {
        assertEquals("{\"a\": [1, {\"b\": null}], \"c\": {}, \"d\": [], \"e\": 2.0, \"f\": 12345678901234567890}",
                dumps("{\"a\":[1,{\"b\":null}],\"c\":{},\"d\":[],\"e\":2.0,\"f\":12345678901234567890}"));
        assertEquals("\"a\\\"b\\\\c\\n\\u0001\\u001f\u007fé\u2028\\t\\b\\f\\r\"",
                PythonJson.quote("a\"b\\c\n\u0001\u001f\u007fé\u2028\t\b\f\r"));
        assertEquals("[true, false, \"x\"]", dumps("[true,false,\"x\"]"));
    }

    @Test
    void strictParse() {
        assertNull(PythonJson.parseOrNull("1 2"));
        assertNull(PythonJson.parseOrNull(""));
        assertNull(PythonJson.parseOrNull("abc"));
        assertNull(PythonJson.parseOrNull("NaN"));
        assertEquals("3", dumps(" 3\n"));
    }
}
