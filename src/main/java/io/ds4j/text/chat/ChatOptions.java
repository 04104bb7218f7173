package io.ds4j.text.chat;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.List;

/**
 * How {@link ChatEncoder} renders a conversation. Immutable; start from {@link #defaults()} and use the
 * {@code with...} methods.
 *
 * @param thinking thinking mode ({@code thinking_mode="thinking"}: the assistant turn opens with {@code <think>})
 *     instead of chat mode (it opens with {@code </think>})
 * @param reasoningEffort null or one of {@link EncodingRevision#efforts()}; only thinking mode renders it
 * @param tools the OpenAI {@code tools} array, or null; an empty array counts as none
 * @param responseFormat the OpenAI {@code response_format} object, or null; {@code {"type": "text"}} counts as none
 * @param addGenerationPrompt whether a prompt that ends with a user (or developer or tool) turn gets the opening of
 *     the assistant turn ({@code <｜Assistant｜>} and the think token) appended; the V4 encoder always appends it
 * @param dropEarlierReasoning the V4 encoder's {@code drop_thinking}: in thinking mode, reasoning of assistant
 *     turns before the last user turn is left out (and developer messages before it are dropped). The V4 encoder
 *     turns this off by itself whenever tools are given
 * @param revision which published version of the encoding to follow
 * @param continueFinal the last message is the start of the assistant's answer, to be continued rather than rendered as
 *     a finished turn (DeepSeek's chat prefix completion, Anthropic's prefill): {@link ChatEncoder} leaves its end of
 *     sentence out, and in thinking mode its closing {@code </think>} too when it has reasoning but no content yet
 */
public record ChatOptions(boolean thinking, String reasoningEffort, JsonNode tools, JsonNode responseFormat,
                          boolean addGenerationPrompt, boolean dropEarlierReasoning, EncodingRevision revision,
                          boolean continueFinal) {

    /** Published versions of {@code encoding_dsv4.py}; they differ only in the reasoning-effort preambles. */
    public enum EncodingRevision {
        /**
         * The encoding of the first DeepSeek-V4 release (V4-Flash, V4-Pro): efforts null, "high" (renders nothing)
         * and "max" ("Absolute maximum" preamble).
         */
        V4(List.of("high", "max")),
        /**
         * The encoding of DeepSeek-V4-Flash-0731: efforts null or "low" (nothing), "high" ("Absolute maximum"
         * preamble) and "max" ("Beyond maximum" preamble).
         */
        V4_0731(List.of("low", "high", "max"));

        private final List<String> efforts;

        EncodingRevision(List<String> efforts) {
            this.efforts = efforts;
        }

        /** The reasoning-effort values this revision accepts besides null. */
        public List<String> efforts() {
            return efforts;
        }

        /** The preamble for an effort (already validated), placed before the first message in thinking mode. */
        String effortPreamble(String effort) {
            if (effort == null) return "";
            return switch (this) {
                case V4 -> effort.equals("max") ? V4Format.EFFORT_ABSOLUTE_MAXIMUM : "";
                case V4_0731 -> switch (effort) {
                    case "max" -> V4Format.EFFORT_BEYOND_MAXIMUM;
                    case "high" -> V4Format.EFFORT_ABSOLUTE_MAXIMUM;
                    default -> "";
                };
            };
        }
    }

    /** Validates the effort against the revision and the JSON shapes of tools and response format. */
    public ChatOptions {
        if (revision == null) revision = EncodingRevision.V4;
        if (reasoningEffort != null && !revision.efforts().contains(reasoningEffort)) {
            throw new ChatFormatException("reasoning_effort", "unsupported value '" + reasoningEffort
                    + "' (the " + (revision == EncodingRevision.V4 ? "DeepSeek-V4" : "DeepSeek-V4 " + revision) + " chat format accepts "
                    + String.join(", ", revision.efforts()) + " or null)");
        }
        if (tools != null && tools.isNull()) tools = null;
        if (tools != null) {
            if (!tools.isArray()) throw new ChatFormatException("tools", "must be an array");
            // a name is what a tool call and tool_choice name a tool by: two tools of one name would leave the one
            // called, and the schema its arguments are held to, to chance
            java.util.Map<String, Integer> named = new java.util.HashMap<>();
            for (int i = 0; i < tools.size(); i++) {
                JsonNode t = tools.get(i);
                if (!t.isObject()) throw new ChatFormatException("tools[" + i + "]", "must be an object");
                JsonNode type = t.get("type");
                if (type != null && !type.isNull() && !(type.isTextual() && type.textValue().equals("function"))) {
                    throw new ChatFormatException("tools[" + i + "].type", "unsupported tool type " + type);
                }
                JsonNode fn = t.get("function");
                if (fn == null || !fn.isObject()) {
                    throw new ChatFormatException("tools[" + i + "].function", "missing or not an object");
                }
                JsonNode name = fn.get("name");
                if (name == null || !name.isTextual() || name.textValue().isEmpty()) {
                    throw new ChatFormatException("tools[" + i + "].function.name", "must be a non-empty string");
                }
                checkFunctionName(name.textValue(), "tools[" + i + "].function.name");
                Integer first = named.putIfAbsent(name.textValue(), i);
                if (first != null) {
                    throw new ChatFormatException("tools[" + i + "].function.name",
                            "'" + name.textValue() + "' is also the name of tools[" + first + "]; each tool needs its own name");
                }
                JsonNode desc = fn.get("description");
                if (desc != null && !desc.isNull() && !desc.isTextual()) {
                    throw new ChatFormatException("tools[" + i + "].function.description", "must be a string");
                }
                JsonNode strict = fn.get("strict");
                if (strict != null && !strict.isNull() && !strict.isBoolean()) {
                    throw new ChatFormatException("tools[" + i + "].function.strict", "must be true or false, got " + strict);
                }
                JsonNode params = fn.get("parameters");
                if (params != null && !params.isNull()) {
                    // a JSON Schema object; its "type" (when given) is a type name or a list of them
                    if (!params.isObject()) {
                        throw new ChatFormatException("tools[" + i + "].function.parameters", "must be a JSON Schema object");
                    }
                    JsonNode pt = params.get("type");
                    if (pt != null && !pt.isTextual() && !(pt.isArray() && pt.size() > 0 && allTextual(pt))) {
                        throw new ChatFormatException("tools[" + i + "].function.parameters.type",
                                "must be a JSON Schema type name such as \"object\", got " + pt);
                    }
                    // OpenAI's rule: a function takes named arguments, so its parameters are an object schema; checked
                    // here for every tool so that auto mode refuses what a forced call (which compiles the schema) would
                    if (pt != null && !typeAllowsObject(pt)) {
                        throw new ChatFormatException("tools[" + i + "].function.parameters.type",
                                "the parameters of function '" + name.textValue() + "' must be an object schema (type \"object\"), got " + pt);
                    }
                    JsonNode props = params.get("properties");
                    if (props != null && !props.isNull() && !props.isObject()) {
                        throw new ChatFormatException("tools[" + i + "].function.parameters.properties", "must be an object");
                    }
                    JsonNode req = params.get("required");
                    if (req != null && !req.isNull() && !(req.isArray() && allTextual(req))) {
                        throw new ChatFormatException("tools[" + i + "].function.parameters.required",
                                "must be an array of property names, got " + req);
                    }
                }
            }
        }
        if (responseFormat != null && responseFormat.isNull()) responseFormat = null;
        checkResponseFormat(responseFormat);
    }

    /**
     * Checks an OpenAI {@code response_format} object's shape: {@code type} {@code text}, {@code json_object} or
     * {@code json_schema}, the last with a {@code json_schema} object whose {@code name} OpenAI's rule allows and whose
     * {@code schema}, when given, is an object or a boolean. The same check holds where a response format is not
     * rendered into a prompt (a completion's output held to it).
     * @param responseFormat the object, or null for none
     * @throws ChatFormatException naming the field at fault
     */
    public static void checkResponseFormat(JsonNode responseFormat) {
        if (responseFormat != null && !responseFormat.isNull()) {
            if (!responseFormat.isObject()) throw new ChatFormatException("response_format", "must be an object");
            JsonNode type = responseFormat.get("type");
            if (type == null || type.isNull())
                throw new ChatFormatException("response_format.type", "missing (text, json_object or json_schema)");
            if (!type.isTextual())
                throw new ChatFormatException("response_format.type", "must be a string (text, json_object or json_schema), got "
                        + type.getNodeType().name().toLowerCase(java.util.Locale.ROOT));
            switch (type.textValue()) {
                case "text", "json_object" -> { }
                case "json_schema" -> {
                    JsonNode js = responseFormat.get("json_schema");
                    if (js == null || !js.isObject()) {
                        throw new ChatFormatException("response_format.json_schema", "missing or not an object");
                    }
                    // as OpenAI's API: a name is required, and a schema is a JSON Schema object or a boolean schema
                    JsonNode name = js.get("name");
                    if (name == null || name.isNull()) {
                        throw new ChatFormatException("response_format.json_schema.name",
                                "is required: 1 to 64 letters, digits, underscores or hyphens");
                    }
                    if (!name.isTextual() || !isFunctionName(name.textValue())) {
                        throw new ChatFormatException("response_format.json_schema.name", FUNCTION_NAME_RULE + ", got " + name);
                    }
                    JsonNode schema = js.get("schema");
                    if (schema != null && !schema.isNull() && !schema.isObject() && !schema.isBoolean()) {
                        throw new ChatFormatException("response_format.json_schema.schema",
                                "must be a JSON Schema: an object, or true (any value) or false (none)");
                    }
                }
                default -> throw new ChatFormatException("response_format.type",
                        "unsupported type '" + type.textValue() + "' (text, json_object or json_schema)");
            }
        }
    }

    /**
     * Chat mode, no effort, no tools, no response format, generation prompt on, earlier reasoning dropped, the last
     * message not continued.
     */
    public static ChatOptions defaults() {
        return new ChatOptions(false, null, null, null, true, true, EncodingRevision.V4, false);
    }

    /** Thinking mode on or off. */
    public ChatOptions withThinking(boolean on) {
        return new ChatOptions(on, reasoningEffort, tools, responseFormat, addGenerationPrompt, dropEarlierReasoning, revision, continueFinal);
    }

    /** Sets the reasoning effort (null for none); select the revision first when it needs another one's values. */
    public ChatOptions withReasoningEffort(String effort) {
        return new ChatOptions(thinking, effort, tools, responseFormat, addGenerationPrompt, dropEarlierReasoning, revision, continueFinal);
    }

    /** Sets the OpenAI tools array (null for none). */
    public ChatOptions withTools(JsonNode toolsArray) {
        return new ChatOptions(thinking, reasoningEffort, toolsArray, responseFormat, addGenerationPrompt, dropEarlierReasoning, revision, continueFinal);
    }

    /** Sets the OpenAI response_format object (null for none). */
    public ChatOptions withResponseFormat(JsonNode format) {
        return new ChatOptions(thinking, reasoningEffort, tools, format, addGenerationPrompt, dropEarlierReasoning, revision, continueFinal);
    }

    /** Whether to append the opening of the assistant turn after a final user turn. */
    public ChatOptions withAddGenerationPrompt(boolean on) {
        return new ChatOptions(thinking, reasoningEffort, tools, responseFormat, on, dropEarlierReasoning, revision, continueFinal);
    }

    /** Whether the last message, an assistant's, is continued rather than rendered as a finished turn. */
    public ChatOptions withContinueFinal(boolean on) {
        return new ChatOptions(thinking, reasoningEffort, tools, responseFormat, addGenerationPrompt, dropEarlierReasoning, revision, on);
    }

    /** Whether earlier turns' reasoning is dropped in thinking mode (the V4 default). */
    public ChatOptions withDropEarlierReasoning(boolean on) {
        return new ChatOptions(thinking, reasoningEffort, tools, responseFormat, addGenerationPrompt, on, revision, continueFinal);
    }

    /** Selects the encoding revision; the effort must be valid for it. */
    public ChatOptions withRevision(EncodingRevision r) {
        return new ChatOptions(thinking, reasoningEffort, tools, responseFormat, addGenerationPrompt, dropEarlierReasoning, r, continueFinal);
    }

    /** True when tools are present (a non-empty array). */
    boolean hasTools() {
        return tools != null && !tools.isEmpty();
    }

    /** True when a response format other than plain text is asked for. */
    boolean hasResponseFormat() {
        return responseFormat != null && !"text".equals(responseFormat.path("type").asText());
    }

    /** Function names OpenAI accepts. */
    private static final java.util.regex.Pattern TOOL_NAME = java.util.regex.Pattern.compile("[a-zA-Z0-9_-]{1,64}");

    /** What {@link #isFunctionName} requires, as error messages state it. */
    static final String FUNCTION_NAME_RULE = "must be 1 to 64 letters, digits, underscores or hyphens";

    /**
     * Whether a function name follows OpenAI's rule (1 to 64 letters, digits, underscores or hyphens). One rule for a
     * tool's definition and for a call to it in the history: both names are written into the prompt's DSML markup
     * ({@code <｜DSML｜invoke name="...">}), where a quote or a newline would let a name end the markup and forge more.
     */
    static boolean isFunctionName(String name) {
        return name != null && TOOL_NAME.matcher(name).matches();
    }

    /**
     * Refuses a function name that breaks {@link #isFunctionName}'s rule.
     * @param field the request field the name came from, named in the error
     * @throws ChatFormatException naming the field and the name
     */
    static void checkFunctionName(String name, String field) {
        if (!isFunctionName(name)) throw new ChatFormatException(field, FUNCTION_NAME_RULE + ", got '" + name + "'");
    }

    /** Whether a schema's "type" (a name or a list of names) admits an object. */
    private static boolean typeAllowsObject(JsonNode type) {
        if (type.isTextual()) return type.textValue().equals("object");
        for (JsonNode t : type) if (t.textValue().equals("object")) return true;
        return false;
    }

    private static boolean allTextual(JsonNode a) {
        for (JsonNode x : a) if (!x.isTextual()) return false;
        return true;
    }
}
