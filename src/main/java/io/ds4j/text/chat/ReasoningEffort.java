package io.ds4j.text.chat;

import java.util.Locale;

/**
 * An OpenAI-style reasoning effort read as one of DeepSeek-V4's three modes: {@code none} is no thinking;
 * {@code minimal}, {@code low}, {@code medium} and {@code high} are Think High (the model's ordinary thinking);
 * {@code xhigh} ({@code x-high}) and {@code max} are Think Max. The one table the API's {@code reasoning_effort} and
 * {@code generate --reasoning-effort} both read, so that the two cannot disagree.
 *
 * @param thinking  whether the effort asks for thinking mode (an explicit thinking switch still wins over it)
 * @param v4Effort  the chat format's effort in thinking mode ({@code high} or {@code max}), or null for none
 */
public record ReasoningEffort(boolean thinking, String v4Effort) {
    /** The accepted values as a sentence names them ({@code x-high} is read too, as a spelling of {@code xhigh}). */
    public static final String ACCEPTED = "none, minimal, low, medium, high, xhigh or max";

    /**
     * The mode of an effort as written, in any case and with spaces around it, as the API reads it.
     * @return the mode, or null for a value that is none of {@link #ACCEPTED}
     */
    public static ReasoningEffort parse(String value) {
        if (value == null) return null;
        return switch (value.trim().toLowerCase(Locale.ROOT)) {
            case "none" -> new ReasoningEffort(false, null);
            // V4 has no lighter thinking than its ordinary one: the lighter OpenAI efforts get that, not none
            case "minimal", "low", "medium", "high" -> new ReasoningEffort(true, "high");
            case "max", "xhigh", "x-high" -> new ReasoningEffort(true, "max");
            default -> null;
        };
    }
}
