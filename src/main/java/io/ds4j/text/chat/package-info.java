/**
 * The DeepSeek-V4 chat format: OpenAI-style messages in ({@link io.ds4j.text.chat.ChatMessage},
 * {@link io.ds4j.text.chat.ChatOptions}), prompt text out ({@link io.ds4j.text.chat.ChatEncoder}), and the
 * generated text split back into reasoning, content and tool calls ({@link io.ds4j.text.chat.OutputParser}).
 *
 * <h2>Source followed</h2>
 * DeepSeek's {@code encoding/encoding_dsv4.py} as published with the DeepSeek-V4 models (V4-Flash / V4-Pro; the
 * version whose reasoning efforts are {@code None}, {@code "high"}, {@code "max"} and which has a single
 * {@code REASONING_EFFORT_MAX} text). Read in two copies that agree line for line in their logic:
 * {@code sgl-project/sglang python/sglang/srt/entrypoints/openai/encoding_dsv4.py} (commit 00370f27, "Adapted from
 * the DeepSeek-V4 release reference implementation") and {@code supermy/ds4rs encoding/encoding_dsv4.py} (commit
 * 2ecc534c, the same code with added comments). The encoding of the later DeepSeek-V4-Flash-0731 checkpoint (read in
 * {@code sfxnz/DeepSeek-V4-Flash-Vision-Exp-vLLM-2x-DGX-Spark encoding/encoding_dsv4.py}) changes only the effort
 * preambles ({@code low}/{@code high}/{@code max}); it is selectable as
 * {@link io.ds4j.text.chat.ChatOptions.EncodingRevision#V4_0731}. Its two preamble texts match the SHA-256 values
 * published for that checkpoint's file. The code here is written from the format, not translated; it was checked
 * against a transcription of the reference functions on random conversations and outputs (not part of the build).
 *
 * <h2>Encoding rules (as in {@code encode_messages})</h2>
 * <ul>
 *   <li>Prompt = BOS + each message rendered in turn. System text goes in bare; a user turn is
 *       {@code <｜User｜>text}; a developer turn is {@code <｜User｜>text} too (non-empty text required); an assistant
 *       turn is {@code [reasoning</think>]content[\n\n<｜DSML｜tool_calls>...</｜DSML｜tool_calls>]<｜end▁of▁sentence｜>}.</li>
 *   <li>A user or developer turn followed by an assistant turn (or ending the conversation) gets
 *       {@code <｜Assistant｜>} and then {@code <think>} (thinking mode) or {@code </think>} (chat mode, and in
 *       thinking mode for turns before the last user turn when earlier reasoning is dropped).</li>
 *   <li>Tool messages have no role of their own: each becomes {@code <tool_result>text</tool_result>} inside a user
 *       turn; consecutive tool results and user messages merge into one user turn, joined by a blank line, and tool
 *       results are put in the order of the preceding assistant turn's calls (by {@code tool_call_id}).</li>
 *   <li>Thinking mode drops earlier reasoning: before the last user turn, assistant turns lose their reasoning (and
 *       their {@code </think>}), and developer messages are removed. Defining tools turns this off.</li>
 *   <li>Tools and response format are attached to the first message when it is a system message, else to an empty
 *       system message inserted first (SGLang's V4 serving path does this; the file itself attaches them to whatever
 *       message carries them). They render after the system text: {@code \n\n} + tools preamble with one
 *       {@code json.dumps} line per {@code function} object, then {@code \n\n## Response Format:...} with
 *       {@code json.dumps} of the response_format object.</li>
 *   <li>Assistant tool calls in history: one {@code <｜DSML｜parameter name=".." string="true|false">} per top-level
 *       argument; strings as they are, other values as {@code json.dumps}. Arguments that are not a JSON object become
 *       one string parameter {@code arguments} with the raw text.</li>
 *   <li>Reasoning effort: in thinking mode only, its preamble goes before the first message. In the V4 release only
 *       "max" has a preamble; "high" renders nothing.</li>
 * </ul>
 * JSON inside the prompt is written as Python's {@code json.dumps(..., ensure_ascii=False)} writes it.
 *
 * <h2>Choices where the file says nothing or cannot apply</h2>
 * <ul>
 *   <li>response_format: the file renders whatever object a message carries; the OpenAI {@code response_format}
 *       object is passed as it is ({@code json_object} and {@code json_schema} alike); {@code {"type":"text"}} means
 *       none.</li>
 *   <li>OpenAI content-part lists: text parts are joined with a blank line (as the V4-0731/vision file joins content
 *       blocks); other part types are rejected.</li>
 *   <li>{@code addGenerationPrompt=false} leaves out the {@code <｜Assistant｜>} + think token after a final user
 *       turn; the file always writes it.</li>
 *   <li>Null user or tool content renders as empty text (the file would fail or print "None").</li>
 *   <li>What the messages, tools and response format supply is plain text to the tokenizer
 *       ({@link io.ds4j.text.chat.ChatEncoder#render}): the file returns one string, which tokenised whole turns a
 *       message's {@code <｜User｜>} or {@code <｜end▁of▁sentence｜>} into the control token. Prompts without such
 *       strings in supplied text get the same tokens either way.</li>
 *   <li>Not supported: the file's internal {@code task} tokens and the {@code latest_reminder} role, and
 *       continuing a final assistant message without EOS ({@code wo_eos}).</li>
 *   <li>The parser is lenient where {@code parse_message_from_completion_text} raises: see {@link
 *       io.ds4j.text.chat.OutputParser} (missing {@code </think>} means all reasoning; malformed markup becomes
 *       content with a warning).</li>
 * </ul>
 */
package io.ds4j.text.chat;
