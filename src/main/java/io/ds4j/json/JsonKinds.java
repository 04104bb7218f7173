package io.ds4j.json;

import com.fasterxml.jackson.databind.JsonNode;

/** What a JSON value is, without the value, for messages that name a wrong type: one wording for every reader. */
public final class JsonKinds {
    private JsonKinds() {}

    /** "a string", "a number", "a boolean", "null", "an array" or "an object". */
    public static String kind(JsonNode v) {
        return v.isTextual() ? "a string" : v.isNumber() ? "a number" : v.isBoolean() ? "a boolean" : v.isNull() ? "null"
                : v.isArray() ? "an array" : "an object";
    }
}
