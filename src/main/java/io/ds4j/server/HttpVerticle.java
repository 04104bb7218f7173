package io.ds4j.server;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.ds4j.engine.EngineStatus;
import io.ds4j.json.Json;
import io.ds4j.server.config.ServerConfig;
import io.ds4j.text.Tokenizer;
import io.ds4j.text.chat.ChatEncoder;
import io.ds4j.text.chat.ChatFormatException;
import io.ds4j.text.chat.ChatMessage;
import io.ds4j.text.chat.ChatOptions;
import io.ds4j.text.chat.V4Format;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import io.vertx.core.Future;
import io.vertx.core.Handler;
import io.vertx.core.VerticleBase;
import io.vertx.core.WorkerExecutor;
import io.vertx.core.buffer.Buffer;
import io.vertx.core.eventbus.DeliveryOptions;
import io.vertx.core.http.HttpHeaders;
import io.vertx.core.http.HttpMethod;
import io.vertx.core.http.HttpServer;
import io.vertx.core.http.HttpServerRequest;
import io.vertx.core.http.HttpServerResponse;
import io.vertx.core.http.HttpVersion;
import io.vertx.ext.web.Router;
import io.vertx.ext.web.RoutingContext;
import io.vertx.ext.web.handler.FileSystemAccess;
import io.vertx.ext.web.handler.StaticHandler;
import io.vertx.micrometer.PrometheusScrapingHandler;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ThreadLocalRandom;
import java.util.function.Consumer;

/**
 * The OpenAI-compatible HTTP API on the event loop (several instances share the port). It parses and checks
 * requests (a body of {@link #LARGE_BODY_BYTES} or more on Vert.x's worker pool), tokenises on Vert.x's worker pool
 * (never on the event loop), submits to the {@link EngineVerticle} over the
 * event bus and writes what comes back — as Server-Sent Events or one JSON body. It never touches model state.
 *
 * <p>Routes: {@code POST /v1/chat/completions}, {@code POST /v1/completions}, {@code GET /v1/models},
 * {@code GET /v1/models/{id}}, {@code GET /health}, {@code GET /props}, {@code POST /tokenize},
 * {@code POST /detokenize}, {@code GET /metrics}, and the playground's static files at {@code /}; every GET route
 * answers HEAD too. {@code POST /v1/messages} and {@code POST /v1/messages/count_tokens} answer the Anthropic Messages
 * API, translated into chat requests ({@link AnthropicApi}) and answered in its shapes ({@link AnthropicResponse}),
 * their errors too. {@code POST /v1/responses} answers OpenAI's Responses API, translated alike ({@link ResponsesApi},
 * {@link ResponsesResponse}), and {@code POST /v1/responses/input_tokens} counts its prompt; a stored response's routes ({@code GET} and {@code DELETE /v1/responses/{id}}, its
 * {@code cancel} and {@code input_items}) are a 404, as this server stores none.
 */
public final class HttpVerticle extends VerticleBase {
    private static final Logger LOG = LoggerFactory.getLogger(HttpVerticle.class);
    private static final DeliveryOptions LOCAL = new DeliveryOptions().setCodecName(LocalCodec.NAME).setLocalOnly(true);
    /** The engine answers a submission between two steps; a step can be long on a big model. */
    private static final DeliveryOptions SUBMIT = new DeliveryOptions().setCodecName(LocalCodec.NAME).setLocalOnly(true).setSendTimeout(600_000);
    private static final Set<String> API_PATHS = Set.of("/props", "/tokenize", "/detokenize", "/metrics", "/models",
            "/completions", "/chat/completions");
    static final String FINGERPRINT = "ds4j-0.1.0";
    /** The header that carries a request's id, from the client and on every answer of the API routes ({@link #requestIds}). */
    public static final String REQUEST_ID = "X-Request-Id";
    /** The response header that tells a client what its request's log lines' notes say ({@link Requests#notesHeader}). */
    public static final String NOTES_HEADER = "x-ds4j-notes";
    /** The longest client X-Request-Id that is taken as the request's id; a longer one gets the server's own. */
    static final int MAX_REQUEST_ID = 128;
    /** Routing context keys: the request's id as its answer names it, and the client's own id (absent where none). */
    private static final String ID_KEY = "ds4j.requestId", CLIENT_ID_KEY = "ds4j.clientRequestId";
    /** Preflight answer when the browser names no headers. */
    private static final String DEFAULT_ALLOW_HEADERS = "Authorization, Content-Type, X-Requested-With";
    /** A comma-separated list of header names (RFC 9110 tokens), as Access-Control-Request-Headers carries. */
    private static final java.util.regex.Pattern SAFE_HEADER_LIST =
            java.util.regex.Pattern.compile("[\\s,]*[!#$%&'*+.^_`|~0-9A-Za-z-]+(?:[\\s,]+[!#$%&'*+.^_`|~0-9A-Za-z-]+)*[\\s,]*");
    /** The methods each API path answers (for 405 and its Allow header). */
    private static final java.util.Map<String, String> ALLOW = java.util.Map.ofEntries(
            java.util.Map.entry("/v1/chat/completions", "POST"), java.util.Map.entry("/chat/completions", "POST"),
            java.util.Map.entry("/v1/completions", "POST"), java.util.Map.entry("/completions", "POST"),
            java.util.Map.entry("/v1/models", "GET, HEAD"), java.util.Map.entry("/models", "GET, HEAD"),
            java.util.Map.entry("/props", "GET, HEAD"), java.util.Map.entry("/metrics", "GET, HEAD"),
            java.util.Map.entry("/health", "GET, HEAD"), java.util.Map.entry("/v1/health", "GET, HEAD"),
            java.util.Map.entry("/tokenize", "POST"), java.util.Map.entry("/detokenize", "POST"),
            java.util.Map.entry(AnthropicApi.MESSAGES, "POST"), java.util.Map.entry(AnthropicApi.COUNT_TOKENS, "POST"),
            java.util.Map.entry(ResponsesApi.RESPONSES, "POST"), java.util.Map.entry(ResponsesApi.INPUT_TOKENS, "POST"));

    /**
     * Request bodies of at least this many bytes tokenise on the long-text lane ({@link #LONG_TEXT_THREADS} threads of
     * their own): the tokenizer's time grows faster than linearly with a word's length (a 4 MB prompt without spaces
     * took ~20 s on the 2-core VM, 30 bodies of 256 KB held a small request up for 1.5 s), so without a lane of their
     * own a few such prompts held every worker thread and stalled the tokenisation of all other requests.
     */
    static final int LONG_TEXT_BYTES = 32 * 1024;
    /**
     * Request bodies of at least this many bytes are parsed and checked on Vert.x's worker pool, off the event loop:
     * reading JSON is linear but not cheap (a 1.5 MB body of 128,000 logit_bias keys took 0.2 to 1.6 s on the 2-core
     * VM), and on the event loop a few such bodies stalled every stream it serves for seconds. A smaller body is read
     * on the event loop (well under a millisecond), which keeps its latency and its order.
     */
    static final int LARGE_BODY_BYTES = LONG_TEXT_BYTES;
    /** Threads of the long-text lane, shared by the HTTP verticles: a quarter of the cores, at least two. */
    static final int LONG_TEXT_THREADS = Math.max(2, Runtime.getRuntime().availableProcessors() / 4);

    private final ServerState state;
    private final PrometheusMeterRegistry registry;
    private final String webroot;
    private HttpServer server;
    private WorkerExecutor longText;
    private HeadDeadline heads;

    /**
     * @param registry the Prometheus registry served at /metrics
     * @param webroot  absolute folder of the static files
     */
    public HttpVerticle(ServerState state, PrometheusMeterRegistry registry, String webroot) {
        this.state = state;
        this.registry = registry;
        this.webroot = webroot;
    }

    @Override
    public Future<?> start() {
        // a long tokenisation is expected on this lane: Vert.x's blocked-thread warnings only past half an hour
        longText = vertx.createSharedWorkerExecutor("ds4j-long-text", LONG_TEXT_THREADS, 30, java.util.concurrent.TimeUnit.MINUTES);
        Router r = Router.router(vertx);
        r.route().handler(this::first);
        r.get("/health").handler(this::health);
        r.get("/v1/health").handler(this::health);
        // load balancers and uptime checks probe with HEAD: the same status and headers, without the body
        r.head("/health").handler(this::health);
        r.head("/v1/health").handler(this::health);
        r.route().handler(this::auth);
        for (String p : List.of("/v1/chat/completions", "/chat/completions"))
            r.post(p).handler(ctx -> withBody(ctx, (b, rd) -> readGeneration(b, rd, true, null), g -> generate(ctx, g)));
        for (String p : List.of("/v1/completions", "/completions"))
            r.post(p).handler(ctx -> withBody(ctx, (b, rd) -> readGeneration(b, rd, false, null), g -> generate(ctx, g)));
        // the Anthropic Messages API, translated into chat requests (AnthropicApi)
        r.post(AnthropicApi.MESSAGES).handler(ctx -> withBody(ctx, (b, rd) -> readGeneration(b, rd, true,
                body -> AnthropicApi.translate(body, true)), g -> generate(ctx, g)));
        r.post(AnthropicApi.COUNT_TOKENS).handler(ctx -> withBody(ctx, (b, rd) -> readCountTokens(b, rd, body -> AnthropicApi.translate(body, false)),
                c -> countTokens(ctx, c, n -> Json.object().put("input_tokens", n))));
        // OpenAI's Responses API, translated into chat requests (ResponsesApi); a stored response's routes are a 404,
        // as nothing is stored (their body, if any, is not read)
        r.post(ResponsesApi.RESPONSES).handler(ctx -> withBody(ctx, (b, rd) -> readGeneration(b, rd, true, ResponsesApi::translate),
                g -> generate(ctx, g)));
        r.post(ResponsesApi.INPUT_TOKENS).handler(ctx -> withBody(ctx, (b, rd) -> readCountTokens(b, rd, ResponsesApi::translate),
                c -> countTokens(ctx, c, n -> Json.object().put("object", "response.input_tokens").put("input_tokens", n))));
        Handler<RoutingContext> notStored = ctx -> error(ctx, ResponsesApi.notStored(routed(ctx)));
        r.getWithRegex(ResponsesApi.STORED_ID + "(?:/input_items)?").method(HttpMethod.HEAD).handler(notStored);
        r.deleteWithRegex(ResponsesApi.STORED_ID).handler(notStored);
        r.postWithRegex(ResponsesApi.STORED_ID + "/cancel").handler(notStored);
        // every GET route answers HEAD too: GET's status and headers without the body (first() adds the length)
        r.get("/v1/models").method(HttpMethod.HEAD).handler(withModel(this::models));
        r.get("/models").method(HttpMethod.HEAD).handler(withModel(this::models));
        // one model by id; the id may hold '/' (an organisation/name id), so the rest of the path is the id
        r.getWithRegex("/v1/models/(?<id>.+)").method(HttpMethod.HEAD).handler(withModel(this::model));
        r.getWithRegex("/models/(?<id>.+)").method(HttpMethod.HEAD).handler(withModel(this::model));
        r.get("/props").method(HttpMethod.HEAD).handler(this::props);
        r.post("/tokenize").handler(ctx -> withBody(ctx, this::readTokenize, t -> tokenize(ctx, t)));
        r.post("/detokenize").handler(ctx -> withBody(ctx, this::readDetokenize, d -> detokenize(ctx, d)));
        Handler<RoutingContext> scrape = PrometheusScrapingHandler.create(registry);  // scrapes at once, on this thread
        r.get("/metrics").method(HttpMethod.HEAD).handler(ctx -> {
            state.metrics().scrapeStarting();
            scrape.handle(ctx);
        });
        Handler<RoutingContext> files = staticFiles(webroot);
        // no method restriction on the route itself, so an unknown POST path is a 404, not a 405
        r.route("/*").handler(ctx -> {
            HttpMethod m = ctx.request().method();
            String path = routed(ctx);
            String allow = allowed(path);
            if (allow != null) {
                // a known API path reached here with a method it does not answer
                ctx.response().putHeader("Allow", allow);
                error(ctx, notAllowed(m, path, allow));
            } else if ((m == HttpMethod.GET || m == HttpMethod.HEAD) && !isApi(path)) {
                files.handle(ctx);
            } else ctx.next();
        });
        // the router refuses a path it cannot decode (a malformed percent-escape) with 400, and first() a path with bad
        // escapes; without this handler the router answers plain text and logs a stack trace at ERROR for every such
        // request (one without Host never gets here: RequestFraming refuses its head)
        r.errorHandler(400, ctx -> {
            watchBody(ctx);  // a path the router cannot decode is refused before the first route ran
            error(ctx, MalformedRequests.answer(ctx.request(), ctx.failure()));
        });
        r.errorHandler(404, ctx -> error(ctx, noRoute(ctx.request().method(), shownTarget(ctx.request(), routed(ctx)))));
        r.errorHandler(416, HttpVerticle::rangeNotSatisfiable);
        r.errorHandler(405, ctx -> {
            String allow = allowed(routed(ctx));
            if (allow != null) ctx.response().putHeader("Allow", allow);
            error(ctx, notAllowed(ctx.request().method(), routed(ctx), allow));
        });
        r.errorHandler(500, ctx -> {
            Throwable t = ctx.failure();
            if (t instanceof ApiException e) {
                error(ctx, e);
                return;
            }
            LOG.error("internal error on {} {}", ctx.request().method(), ctx.request().path(), t);
            error(ctx, new ApiException(500, "server_error", "internal_error", null,
                    "internal error: " + (t != null && t.getMessage() != null ? t.getMessage() : String.valueOf(t)), null));
        });
        ServerConfig cfg = state.config();
        heads = new HeadDeadline(vertx, () -> state.config().headerReadTimeoutMs());
        // port 0 with several instances: -1 makes them share one random port (Vert.x convention)
        server = heads.server(cfg.host(), cfg.port() == 0 ? -1 : cfg.port(), r, this::invalidRequest,
                () -> state.config().maxBodyBytes(), code -> state.metrics().rejected(code), AnthropicApi::errorBody);
        return server.listen().onSuccess(s -> state.port(s.actualPort()));
    }

    /**
     * A request Netty could not decode (e.g. a header value with control characters) gets an error body in its path's
     * shape (OpenAI's, Anthropic's on the Messages routes), not an empty 400. When API keys are on and no valid key was among the headers read, it is a 401: a key sent with
     * control characters is not a valid key. The connection closes after the answer. A connection that closed before a
     * request's head was complete is only logged, at debug level: nothing was refused.
     */
    private void invalidRequest(HttpServerRequest req) {
        answerUndecodable(req, state.config().apiKeys(), code -> state.metrics().rejected(code), AnthropicApi::errorBody);
    }

    /**
     * The answer of both fronts (a single server, a cluster gateway) to a request Vert.x could not parse (a bad
     * Content-Length, a header line it cannot read, an over-long request line or header) or whose framing
     * {@link RequestFraming} refuses: an error body (the shape bodies gives for the request's path) with 400 {@code invalid_header} (414 {@code uri_too_long}
     * for a request line past {@link HeadDeadline#MAX_REQUEST_LINE}, 501 {@code unsupported_transfer_encoding} for a
     * transfer coding other than chunked, 505 {@code http_version_not_supported} for a version other than 1.0 and 1.1),
     * or 401 where API keys are set and the request's key is not among them, the connection closed after it (lingering:
     * {@link LingeringClose}), one INFO line naming the request's id, which the answer's {@code X-Request-Id} carries
     * (the client's sane one where its headers were read, else {@code req-...}, whatever the path); a connection that closed in the middle of its head gets no answer and
     * a DEBUG line.
     * @param keys     server.apiKeys of the front
     * @param rejected counts the refusal under its error code
     * @param bodies   the front's error body for the request's path, where its request line was read
     */
    public static void answerUndecodable(HttpServerRequest req, List<String> keys, java.util.function.Consumer<String> rejected,
                                         ApiException.Bodies bodies) {
        Throwable cause = req.decoderResult().cause();
        if (cause instanceof io.netty.handler.codec.PrematureChannelClosureException) {
            // Netty reports a connection that closed in the middle of a request's head (the client went away, or this
            // server closed it) as an undecodable request: nothing was refused and nobody is left to answer
            LOG.debug("connection from {} closed before its request headers arrived", req.remoteAddress());
            return;
        }
        String why = decodeProblem(cause);
        ApiException e;
        String refused = keys.isEmpty() ? null : keyRefusal(req, "", keys);
        if (refused != null) {
            // what is wrong with the key (missing, or not valid) first, then why the request cannot be read
            req.response().putHeader("WWW-Authenticate", "Bearer");
            e = new ApiException(401, "invalid_request_error", "invalid_api_key", null,
                    refused + "; the request cannot be read either (" + why + ")", null);
        } else if (cause instanceof RequestFraming.Refused framing) {
            // a body whose length is ambiguous (Content-Length with Transfer-Encoding, ...): 400, or 501 for a transfer
            // coding this server does not decode; 505 for an HTTP version other than 1.0 and 1.1
            e = new ApiException(framing.status, "invalid_request_error", framing.code, null,
                    "the request cannot be read: " + why, null);
        } else if (cause instanceof io.netty.handler.codec.http.TooLongHttpLineException) {
            // Netty's decoder raises this for the request line only (a header past its limit is a
            // TooLongHttpHeaderException); a long target is the usual cause, so the answer is HTTP's 414
            e = new ApiException(414, "invalid_request_error", "uri_too_long", null, why, null);  // decodeProblem's TOO_LONG_LINE
        } else if (cause instanceof io.netty.handler.codec.http.TooLongHttpHeaderException) {
            // the header fields past their limit together (a chunked body's trailers too): HTTP's 431 (RFC 6585)
            e = new ApiException(431, "invalid_request_error", "request_header_fields_too_large", null,
                    "the request cannot be read: " + why, null);
        } else {
            e = new ApiException(400, "invalid_request_error", "invalid_header", null,
                    "the request cannot be read: " + why, null);
        }
        rejected.accept(e.code());
        // such a request never reaches the router, which gives the API routes' answers their ids (requestIds): it
        // gets one here, whatever its path (a request line that could not be read has none), the client's where its
        // header was read and is sane
        String id = requestIdOf(req.getHeader(REQUEST_ID));
        req.response().putHeader(REQUEST_ID, id);
        // in the answer's words (a 414's are the server's limit, not the decoder's "An HTTP line is larger than ...")
        LOG.info("request {}: malformed HTTP request rejected with {}: {}", id, e.status(), e.getMessage());
        // a header Netty cannot read comes after a request line it did read: the answer takes that path's shape, as
        // the route's own errors do; a request line it could not read has no path (Netty's placeholder routes nowhere)
        String path = req.uri() != null ? RequestFraming.routedPath(req.uri()) : "";
        // the close lingers: the client may still be sending the body (or, after HTTP/2's preface, its frames), and a
        // connection closed at once answers those bytes with a reset that can reach the client before the answer
        LingeringClose.onClose(req.connection());
        req.response().setStatusCode(e.status()).putHeader(HttpHeaders.CONTENT_TYPE, "application/json")
                .putHeader(HttpHeaders.CONNECTION, "close").end(Json.write(bodies.of(path, e)))
                .onComplete(v -> req.connection().close());
    }

    /**
     * Vert.x's message for a header value with a prohibited character: the character (its code in decimal, e.g.
     * {@code '11'}, or the character itself) and then the whole value, which may be an API key.
     */
    private static final java.util.regex.Pattern PROHIBITED_IN_VALUE =
            java.util.regex.Pattern.compile("(?s)^a header value contains a prohibited character '(\\d+|.)'.*$");

    /** Netty's message for the same: the character's code in hex and its index, no value. */
    private static final java.util.regex.Pattern PROHIBITED_IN_VALUE_HEX =
            java.util.regex.Pattern.compile("(?s)^a header value contains prohibited character 0x([0-9a-fA-F]+)( at index \\d+)?.*$");

    /**
     * Netty's message for a Content-Length it cannot take as a length, a negative one or one past a long included
     * ("Content-Length value is not a number: -5"), then the value.
     */
    private static final java.util.regex.Pattern CONTENT_LENGTH_NOT_A_NUMBER =
            java.util.regex.Pattern.compile("(?s)^Content-Length value is not a number: (.*)$");

    /** Vert.x's other messages about a header value's line breaks, each followed by the value. */
    private static final List<String> VALUE_FOLLOWS = List.of("a header value must not end with '\\r' or '\\n'",
            "only '\\n' is allowed after '\\r'", "only ' ' and '\\t' are allowed after '\\n'");

    /** What a 414 says (and a 401 for the same request, after what is wrong with its key). */
    private static final String TOO_LONG_LINE = "the request line is longer than " + HeadDeadline.MAX_REQUEST_LINE
            + " bytes, the server's limit: shorten it (a long path or query is the usual cause)";

    /**
     * Netty's or Vert.x's reason for refusing a request, fit for the log and the answer: a header value (which may be
     * an API key) is never shown, a prohibited character is named by its code point (U+XXXX), and other control
     * characters are written as U+XXXX.
     */
    static String decodeProblem(Throwable cause) {
        // Netty's message ("HTTP header is larger than 8192 bytes.") reads as one header, but the limit is for all of
        // them together (a chunked body's trailers too)
        if (cause instanceof io.netty.handler.codec.http.TooLongHttpHeaderException)
            return "its header fields take more than " + HeadDeadline.MAX_HEADERS + " bytes together, the server's limit for"
                    + " all of them: send fewer or shorter headers";
        // the request line alone (a long header is the exception above): in the 414's words, not "An HTTP line is ..."
        if (cause instanceof io.netty.handler.codec.http.TooLongHttpLineException) return TOO_LONG_LINE;
        String m = cause != null && cause.getMessage() != null ? cause.getMessage() : "malformed HTTP request";
        java.util.regex.Matcher length = CONTENT_LENGTH_NOT_A_NUMBER.matcher(m);
        if (length.matches() && length.group(1).matches("-?[0-9]+")) {
            // a number all the same: say what is wrong with it (other values keep Netty's words below); a minus zero
            // ("-0") is no negative number, but its sign is refused all the same
            String n = length.group(1);
            if (n.startsWith("-"))
                return "Content-Length " + n + (n.matches("-0+") ? " has a minus sign: give the body's length in bytes, digits alone"
                        : " is negative: give the body's length in bytes");
            return "Content-Length " + n + " is past the largest length a request can give (" + Long.MAX_VALUE + " bytes)";
        }
        java.util.regex.Matcher lengths = SEVERAL_LENGTHS.matcher(m);
        if (lengths.matches()) {
            // the values are shown where they are short digits (any other value is the client's text, not repeated)
            String vals = lengths.group(1);
            return "Content-Length is not one length" + (SHOWN_LENGTHS.matcher(vals).matches() ? " (" + vals + ")" : "")
                    + ": give the body's length once, in one Content-Length header";
        }
        java.util.regex.Matcher name = PROHIBITED_IN_NAME.matcher(m);
        if (name.matches()) return badHeaderName(name.group(1));
        java.util.regex.Matcher v = PROHIBITED_IN_VALUE.matcher(m);
        java.util.regex.Matcher hex = PROHIBITED_IN_VALUE_HEX.matcher(m);
        if (v.matches()) {
            // Vert.x writes a control character as its decimal code (a digit itself is never prohibited), others as is
            String c = v.group(1);
            int code = c.chars().allMatch(Character::isDigit) ? Integer.parseInt(c) : c.codePointAt(0);
            m = "a header value contains a prohibited character " + codePoint(code) + " (the value is not shown)";
        } else if (hex.matches()) {
            m = "a header value contains a prohibited character " + codePoint(Integer.parseInt(hex.group(1), 16))
                    + (hex.group(2) != null ? hex.group(2) : "");
        } else {
            // any other message about a value: what comes before the value, never the value
            String head = VALUE_FOLLOWS.stream().filter(m::startsWith).findFirst()
                    .orElse(!m.startsWith("a header value") ? null : m.indexOf(':') >= 0 ? m.substring(0, m.indexOf(':')) : m);
            if (head != null) m = head + " (the value is not shown)";
        }
        StringBuilder b = new StringBuilder(m.length());
        m.codePoints().forEach(c -> {
            if (Character.isISOControl(c)) b.append(codePoint(c));
            else b.appendCodePoint(c);
        });
        return b.toString();
    }

    /** Netty's message for a Content-Length of several values (headers or a list), with them. */
    private static final java.util.regex.Pattern SEVERAL_LENGTHS =
            java.util.regex.Pattern.compile("(?s)Multiple Content-Length values found: \\[(.*)\\]");

    /** Content-Length values short enough, and digits enough, to be shown back in that message. */
    private static final java.util.regex.Pattern SHOWN_LENGTHS = java.util.regex.Pattern.compile("(?=.*[0-9])[0-9, ]{1,200}");

    /** Vert.x's message for a header name with a prohibited character, ending with the whole name. */
    private static final java.util.regex.Pattern PROHIBITED_IN_NAME =
            java.util.regex.Pattern.compile("(?s)^a header name cannot contain some prohibited characters, such as : (.*)$");

    /**
     * What is wrong with a header name Vert.x refused, in words: a blank before its colon (Vert.x's message shows the
     * name with the blank, "such as : Host ", which reads as if the colon were the character), else its first byte
     * that is no RFC 9110 token character, by code point.
     */
    static String badHeaderName(String name) {
        String trimmed = name.replaceAll("[ \t]+$", "");
        String shown = (trimmed.length() > 64 ? trimmed.substring(0, 64) + "..." : trimmed).codePoints()
                .mapToObj(c -> Character.isISOControl(c) ? codePoint(c) : Character.toString(c)).collect(java.util.stream.Collectors.joining());
        int bad = -1;
        for (int i = 0; i < trimmed.length() && bad < 0; i++) if (!tokenChar(trimmed.charAt(i))) bad = trimmed.charAt(i);
        if (bad < 0 && trimmed.length() < name.length() && !trimmed.isEmpty())
            return "the header name '" + shown + "' has a blank before its colon; RFC 9112 allows none between a field name"
                    + " and its colon";
        if (bad < 0) return "a header name is empty or has a prohibited character";
        return "the header name '" + shown + "' contains a prohibited character " + codePoint(bad)
                + " (a field name is letters, digits and !#$%&'*+-.^_`|~)";
    }

    /** RFC 9110's tchar. */
    private static boolean tokenChar(char c) {
        return c < 0x80 && (Character.isLetterOrDigit(c) || "!#$%&'*+-.^_`|~".indexOf(c) >= 0);
    }

    /** A character's name in a message: its code point as U+XXXX. */
    static String codePoint(int c) {
        return String.format("U+%04X", c);
    }


        /** The port the server actually listens on (useful with server.port 0). */
    public int actualPort() {
        return server.actualPort();
    }

    // ------------------------------------------------------------------------------------------------ filters

    /** Arrival time, the body's deadline, HEAD's length, CORS headers, a path's bad escapes, and preflight. */
    private void first(RoutingContext ctx) {
        ctx.put("t0", System.nanoTime());
        if (apiForIds(ctx)) requestIds(ctx);
        watchBody(ctx);
        if (ctx.request().method() == HttpMethod.HEAD) headLength(ctx);
        List<String> allowed = state.config().corsOrigins();
        boolean originAllowed = cors(ctx.request(), ctx.response(), allowed);
        // answered by the 400 handler, as a path the router cannot decode is; a preflight to such a path too
        ApiException badPath = MalformedRequests.path(ctx.request().path());
        if (badPath != null) {
            ctx.fail(400, badPath);
            return;
        }
        if (preflight(ctx, originAllowed, allowed, e -> error(ctx, e))) return;
        ctx.next();
    }

    /**
     * Gives a request of the API routes its id: the client's {@code X-Request-Id} where it sent a sane one
     * ({@link #clientRequestId}), else the server's own, {@code req-} and random characters, which a generation replaces
     * with its completion's id once its body is read ({@code chatcmpl-...}, {@code resp_...}: the id its answer
     * carries). The answer, a refusal included, carries it in its {@code X-Request-Id} header, and the request's log
     * lines name it.
     */
    private static void requestIds(RoutingContext ctx) {
        String client = clientRequestId(ctx.request().getHeader(REQUEST_ID));
        if (client != null) ctx.put(CLIENT_ID_KEY, client);
        ctx.put(ID_KEY, requestIdOf(client));
        HttpServerResponse resp = ctx.response();
        // a header already there is a relayed answer's (a cluster gateway's, from the engine node that answered)
        ctx.addHeadersEndHandler(v -> {
            if (!resp.headers().contains(REQUEST_ID)) resp.putHeader(REQUEST_ID, (String) ctx.get(ID_KEY));
        });
    }

    /**
     * A cluster gateway's request id, as {@link #requestIds} gives a single server's: an answer the gateway writes
     * itself (health, models, a 401, a 503 without engines) carries the client's sane {@code X-Request-Id} or
     * {@code req-} and random characters; a relayed answer keeps the header its engine node wrote, which saw the
     * client's header and named a generation by its completion id, so a cluster answers as a single server does.
     * Only for the API routes ({@link #isApi}, {@link #allowed}), as on a single server.
     */
    public static void gatewayRequestId(RoutingContext ctx) {
        if (apiForIds(ctx)) requestIds(ctx);
    }

    /**
     * Whether a request's answers carry a request id: its path is an API path ({@link #isApi}, {@link #allowed}). A path
     * the router cannot decode (a malformed percent-escape, {@code /v1/%zz}) is judged as written, so that its 400
     * under {@code /v1/} carries an id as every refusal there does; decoded, it would be "" and no API path.
     */
    private static boolean apiForIds(RoutingContext ctx) {
        String path = decodedPath(ctx);
        if (path.isEmpty()) path = ctx.request().path() == null ? "" : ctx.request().path();
        return isApi(path) || allowed(path) != null;
    }

    /**
     * A client's {@code X-Request-Id} as the request's id: the value without blanks around it, where it is 1 to
     * {@link #MAX_REQUEST_ID} printable ASCII characters; else null, and the server gives its own (an odd value would
     * go into the answer's header and the log as it came).
     */
    static String clientRequestId(String value) {
        if (value == null) return null;
        String v = value.strip();
        if (v.isEmpty() || v.length() > MAX_REQUEST_ID) return null;
        for (int i = 0; i < v.length(); i++)
            if (v.charAt(i) < 0x20 || v.charAt(i) > 0x7e) return null;
        return v;
    }

    /**
     * A request's id from its X-Request-Id header's value (null for none): the value where it is sane
     * ({@link #clientRequestId}), else the server's own, {@code req-} and 24 random letters and digits.
     */
    static String requestIdOf(String header) {
        String client = clientRequestId(header);
        return client != null ? client : "req-" + randomId();
    }

    /** The request's id ({@link #requestIds}), or null for a request outside the API routes. */
    static String requestId(RoutingContext ctx) {
        return ctx.get(ID_KEY);
    }

    /**
     * "request ID: " for a log line about the request, or "" where it has no id: the client's X-Request-Id where it sent
     * a sane one, else the server's (BodyDeadline's and a cluster gateway's lines use it too).
     */
    public static String named(RoutingContext ctx) {
        String id = requestId(ctx);
        return id == null ? "" : "request " + id + ": ";
    }

    /**
     * Answers a CORS preflight: an OPTIONS from an allowed origin gets 204 with the methods and headers it may use; a
     * preflight (Access-Control-Request-Method) from another origin 403 {@code cors_origin_not_allowed}, instead of a
     * 405 for the OPTIONS method. A single server calls it for every path, a cluster gateway for the paths it does not
     * relay (an engine answers the others).
     * @param originAllowed what {@link #cors} returned for the request
     * @param allowed       server.cors.allowedOrigins of the front
     * @param refuse        sends the front's error answer
     * @return whether the request was answered here
     */
    public static boolean preflight(RoutingContext ctx, boolean originAllowed, List<String> allowed,
                                    java.util.function.Consumer<ApiException> refuse) {
        HttpServerRequest req = ctx.request();
        if (req.method() != HttpMethod.OPTIONS) return false;
        String origin = req.getHeader(HttpHeaders.ORIGIN);
        if (originAllowed) {
            // Echo the headers the browser asks for: SDKs send their own (the openai JS SDK sends X-Stainless-*),
            // and a fixed list would block them. The origin is already allowed, and it may send what it likes.
            String asked = req.getHeader("Access-Control-Request-Headers");
            String headers = asked != null && !asked.isBlank() && SAFE_HEADER_LIST.matcher(asked).matches()
                    ? asked.trim() : DEFAULT_ALLOW_HEADERS;
            ctx.response().putHeader("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
                    .putHeader("Access-Control-Allow-Headers", headers)
                    .putHeader("Access-Control-Max-Age", "600")
                    .putHeader("Vary", allowed.contains("*") ? "Access-Control-Request-Headers" : "Origin, Access-Control-Request-Headers")
                    .setStatusCode(204).end();
            return true;
        }
        if (origin == null || req.getHeader("Access-Control-Request-Method") == null) return false;
        refuse.accept(new ApiException(403, "invalid_request_error", "cors_origin_not_allowed", null, "origin '" + origin
                + "' is not allowed by server.cors.allowedOrigins" + (allowed.isEmpty() ? " (CORS is off)" : ""), null));
        return true;
    }

    /**
     * For an HTTP/1.0 request answered with a body of unknown length (a stream): says {@code Connection: close} and closes
     * the connection once the answer ends. Both HTTP fronts call it before the answer's head goes out.
     */
    public static void closeAfterUnframedAnswer(RoutingContext ctx) {
        HttpServerRequest req = ctx.request();
        HttpServerResponse resp = ctx.response();
        if (req.version() != HttpVersion.HTTP_1_0) return;
        // HTTP/1.0 has no chunked encoding: such an answer ends only when the connection closes, even when the client
        // asked to keep it alive (Vert.x writes "keep-alive" back for such a request; the headers-end hook runs after it).
        // The context's hooks, not the response's own: a response has one end handler and one headers-end handler, and
        // the context's are among them (its end handlers count a generation's response as closed, so replacing them
        // left a finished stream counted as open until the shutdown gave up on it)
        ctx.addHeadersEndHandler(v -> resp.putHeader(HttpHeaders.CONNECTION, "close"));
        ctx.addEndHandler(v -> req.connection().close());
    }

    /**
     * Puts the CORS headers on the answer to a request whose Origin is allowed (server.cors.allowedOrigins; {@code *} =
     * any). Both HTTP fronts, a single server and a cluster gateway, call it, so their answers agree.
     *
     * @return whether the request has an Origin and it is allowed
     */
    public static boolean cors(HttpServerRequest req, HttpServerResponse resp, List<String> allowed) {
        String origin = req.getHeader(HttpHeaders.ORIGIN);
        // with listed origins every answer depends on the Origin, also one without CORS headers (another origin, or
        // none): a cache must not serve it to an allowed origin, nor an allowed origin's answer to another
        if (!allowed.isEmpty() && !allowed.contains("*")) resp.putHeader("Vary", "Origin");
        if (origin == null || allowed.isEmpty() || !allowed.contains("*") && !allowed.contains(origin)) return false;
        resp.putHeader("Access-Control-Allow-Origin", allowed.contains("*") ? "*" : origin);
        // a browser shows a script only the simple response headers and those named here
        resp.putHeader("Access-Control-Expose-Headers", RequestFields.HEADER + ", " + NOTES_HEADER + ", " + REQUEST_ID);
        return true;
    }

    /**
     * A HEAD answer carries the Content-Length GET's would have: Vert.x drops the body of an answer to HEAD and leaves
     * its length out, unless a handler set it (the static files and {@link #json} do). A handler that writes GET's body
     * (the Prometheus scrape, an error) has it counted here, as the headers go out.
     */
    public static void headLength(RoutingContext ctx) {
        HttpServerResponse resp = ctx.response();
        ctx.addHeadersEndHandler(v -> {
            if (!resp.isChunked() && !resp.headers().contains(HttpHeaders.CONTENT_LENGTH))
                resp.putHeader(HttpHeaders.CONTENT_LENGTH, Long.toString(resp.bytesWritten()));
        });
    }

    /**
     * The path the router routes a request by: the request's path with dot segments removed, doubled slashes joined and
     * percent-escaped unreserved characters decoded ({@code //v1/./models} and {@code /%76%31/models} reach
     * {@code /v1/models}). Every decision about a path (the API key, API or file, 404 and 405) takes this one, never the
     * path as written, or a path written another way would reach an API route without the key. Both HTTP fronts use it.
     */
    public static String routed(RoutingContext ctx) {
        String p = ctx.normalizedPath();
        return p != null ? p : ctx.request().path();
    }

    /**
     * The path of the exact route (a route without wildcards or parameters) that the router matches path to: the path
     * less one trailing '/', since the router takes {@code /v1/messages/} as {@code /v1/messages}. Decisions about a
     * known route (its methods, the shape of its errors) take this, so that they agree with the handler that runs.
     */
    static String exactRoute(String path) {
        return path.length() > 1 && path.endsWith("/") ? path.substring(0, path.length() - 1) : path;
    }

    /**
     * A request's target as an answer or a log line names it: the path given, or the target as sent where it is no path
     * (a CONNECT's {@code host:port}, {@code OPTIONS *}), which the router's path writes with a '/' before it.
     * @param path the path to name otherwise ({@link #routed}, or the request's path as written)
     */
    public static String shownTarget(io.vertx.core.http.HttpServerRequest req, String path) {
        String uri = req.uri();
        return uri == null || uri.startsWith("/") || uri.contains("://") ? path : uri;
    }

    /**
     * Whether a path is the API's (it needs the API key when keys are set, and is never a static file): a known API
     * path, with or without one trailing '/' (the router takes both as the route: {@link #exactRoute}), or any path under
     * {@code /v1/} or {@code /models/}. Both HTTP fronts, a single server and a cluster gateway, route by it.
     */
    public static boolean isApi(String path) {
        return path.startsWith("/v1/") || path.startsWith("/models/") || API_PATHS.contains(exactRoute(path));
    }

    /**
     * The methods an API path answers ("POST", "GET, HEAD"), or null for a path no API route answers. Both HTTP fronts
     * route by it: a cluster gateway relays only what an engine's API answers, and answers 404 and 405 itself.
     */
    public static String allowed(String path) {
        String allow = ALLOW.get(exactRoute(path));
        if (allow == null && (path.startsWith("/v1/models/") || path.startsWith("/models/"))) return "GET, HEAD";
        if (allow == null && path.startsWith(ResponsesApi.RESPONSES + "/")) return ResponsesApi.allowed(path);
        return allow;
    }

    /**
     * The 404 for a path no route answers (its body, if any, is not read). A HEAD gets GET's answer, as everywhere, so
     * that its Content-Length is GET's; its log line says HEAD.
     */
    public static ApiException noRoute(HttpMethod m, String path) {
        String near = nearestRoute(path);
        String hint = near == null ? "" : "; did you mean " + ALLOW.get(near).split(",")[0] + " " + near + "?";
        return asHead(m, new ApiException(404, "invalid_request_error", "not_found", null, "no route for " + asGet(m) + " "
                + path + hint, null), "no route for " + m + " " + path + hint);
    }

    /** Known routes in the order a suggestion prefers them (the {@code /v1} paths first). */
    private static final List<String> ROUTES = ALLOW.keySet().stream()
            .sorted(java.util.Comparator.comparing((String k) -> !k.startsWith("/v1/")).thenComparing(k -> k)).toList();

    /**
     * The known route a mistyped path most likely meant ({@code /v1/chat/completion}, {@code /v1/Models}), or null
     * when none is within a few edits (a path written quite differently gets no guess rather than a wrong one).
     */
    static String nearestRoute(String path) {
        if (path.length() > 64) return null; // bounds the edit-distance work for long junk paths
        String lower = path.toLowerCase(java.util.Locale.ROOT);
        String best = null;
        int bestDistance = Integer.MAX_VALUE;
        for (String r : ROUTES) {
            int d = ServerConfig.editDistance(lower, r);
            if (d < bestDistance) {
                best = r;
                bestDistance = d;
            }
        }
        return best != null && !best.equals(path) && bestDistance <= Math.min(3, best.length() / 4) ? best : null;
    }


    /**
     * The 405 for a method a path does not answer; {@code allow}: the methods it answers, or null when unknown. A HEAD
     * gets GET's answer, as in {@link #noRoute}.
     */
    public static ApiException notAllowed(HttpMethod m, String path, String allow) {
        String rest = " is not allowed on " + path + (allow != null ? " (allowed: " + allow + ")" : "");
        return asHead(m, new ApiException(405, "invalid_request_error", "method_not_allowed", null, asGet(m) + rest, null),
                m + rest);
    }

    private static HttpMethod asGet(HttpMethod m) {
        return m == HttpMethod.HEAD ? HttpMethod.GET : m;
    }

    /** A refusal answered as GET's: for a HEAD, logged with the reason as the HEAD was asked. */
    private static ApiException asHead(HttpMethod m, ApiException answered, String asked) {
        return m == HttpMethod.HEAD ? answered.loggedAs(asked) : answered;
    }

    /**
     * The playground's files from a folder, for GET and HEAD; both HTTP fronts serve them so. A file's answer gets its
     * Content-Type here, from {@link #fileType}, for GET and HEAD alike: Vert.x's static handler types what it sends for
     * GET but answers HEAD without a type, and one decision for both keeps HEAD's headers GET's, however the path was
     * written (an escaped letter, a name with no known type, a directory's index). A path with no file goes on to the
     * next route (a 404).
     */
    public static Handler<RoutingContext> staticFiles(String webroot) {
        // the page and its scripts change with every ds4j release: browsers revalidate instead of caching for a day
        StaticHandler files = StaticHandler.create(FileSystemAccess.ROOT, webroot).setIndexPage("index.html")
                .setCachingEnabled(false).setMaxAgeSeconds(0);
        return ctx -> {
            // HTTP defines ranges for GET only: a HEAD with a Range is answered as without one (GET's 200 and the whole
            // length), where the static handler would pair 200 with the length of the range, a length no GET gets
            io.vertx.core.MultiMap headers = ctx.request().headers();
            if (ctx.request().method() == HttpMethod.HEAD) headers.remove("Range");
            // The files' answers carry no validator (caching is off: no ETag, no Last-Modified), so no If-Range can
            // match them, and RFC 9110 has a Range with a non-matching If-Range ignored: 200 with the whole file. The
            // static handler does not read If-Range and would serve the range, or refuse it with 416.
            if (headers.contains("If-Range")) headers.remove("Range");
            String path = routed(ctx);
            // a file's path with a trailing '/' ("/index.html/"): served there, the page's relative links would resolve
            // under it ("/index.html/app.css", no file), so the client is sent to the file's own path
            String filePath = fileWithoutSlash(webroot, path);
            if (filePath != null) {
                String query = ctx.request().query();
                ctx.response().setStatusCode(301).putHeader(HttpHeaders.LOCATION, filePath + (query != null ? "?" + query : ""))
                        .putHeader(HttpHeaders.CONTENT_LENGTH, "0").end();
                return;
            }
            java.nio.file.Path file = servedFile(webroot, path);
            // a folder without an index page: no page at any spelling of its path, so a 404 now rather than the static
            // handler's redirect to the path with a '/', which is a 404
            if (file != null && java.nio.file.Files.isDirectory(file)) {
                ctx.next();
                return;
            }
            String range = headers.get("Range");
            if (range != null && file != null) range = suffixRange(range, file);
            if (range != null) {
                String served = clampedRange(range);
                if (served == null) headers.remove("Range");
                else headers.set("Range", served);
            }
            ctx.addHeadersEndHandler(v -> {
                // only a file's answer (200, or 206 for a range) is typed here; a redirect, a 404, a 416 keep their own
                int status = ctx.response().getStatusCode();
                if (status == 200 || status == 206) ctx.response().putHeader(HttpHeaders.CONTENT_TYPE, fileType(webroot, path));
            });
            files.handle(ctx);
        };
    }

    /**
     * For a static path that ends in '/' but names a regular file under webroot (not a folder), that path without its
     * trailing '/'s and with one leading '/' (so that no Location reads as another host, "//host"); else null.
     */
    static String fileWithoutSlash(String webroot, String path) {
        // a backslash or a control character (a tab a browser drops) could make a Location read as another host
        if (path.length() < 2 || !path.endsWith("/") || path.chars().anyMatch(c -> c == '\\' || c < 0x20 || c == 0x7f)) return null;
        String trimmed = "/" + path.replaceAll("^/+", "").replaceAll("/+$", "");
        if (trimmed.length() < 2) return null;
        java.nio.file.Path f = underRoot(webroot, trimmed);
        return f != null && java.nio.file.Files.isRegularFile(f) ? trimmed : null;
    }

    /** A suffix range, the last N bytes of a file (RFC 9110 section 14.1.2). */
    private static final java.util.regex.Pattern SUFFIX_RANGE = java.util.regex.Pattern.compile("bytes=-(\\d+)");

    /**
     * A suffix Range ({@code bytes=-N}) as the first-last range the static handler reads (it knows only those and
     * served the whole file with 200): the last N bytes, the whole file where it is shorter, and for N = 0 or an
     * empty file a first byte at the file's end, which the handler refuses with 416 as RFC 9110 has it (no byte of
     * the file is asked). Any other Range, or a file that cannot be read, is returned as is.
     */
    static String suffixRange(String range, java.nio.file.Path file) {
        java.util.regex.Matcher m = SUFFIX_RANGE.matcher(range);
        if (!m.matches()) return range;
        long size;
        try {
            size = java.nio.file.Files.size(file);
        } catch (java.io.IOException | SecurityException e) {
            return range;
        }
        long n = digits(m.group(1));
        if (n == 0 || size == 0) return "bytes=" + size + "-";
        return "bytes=" + (n < 0 || n >= size ? 0 : size - n) + "-";
    }

    /**
     * The file or folder under webroot a static path names (a folder's index page where it has one), or null where
     * there is none or the path would leave webroot; what the static handler will serve, read here for a Range's size
     * and to tell a folder without an index page.
     */
    static java.nio.file.Path servedFile(String webroot, String path) {
        java.nio.file.Path f = underRoot(webroot, path);
        try {
            if (f == null) return null;
            if (java.nio.file.Files.isDirectory(f) && java.nio.file.Files.isRegularFile(f.resolve("index.html")))
                f = f.resolve("index.html");
            return java.nio.file.Files.exists(f) ? f : null;
        } catch (SecurityException e) {
            return null;
        }
    }

    /** The file or folder a static path names under webroot (unescaped, not checked to exist), or null where it would leave webroot. */
    private static java.nio.file.Path underRoot(String webroot, String path) {
        try {
            String p = java.net.URLDecoder.decode(path.replace("+", "%2B"), StandardCharsets.UTF_8);
            java.nio.file.Path root = java.nio.file.Path.of(webroot).toAbsolutePath().normalize();
            java.nio.file.Path f = root.resolve(p.replaceAll("^/+", "")).normalize();
            return f.startsWith(root) ? f : null;
        } catch (IllegalArgumentException | SecurityException e) { // a malformed escape, a path the file system cannot name
            return null;
        }
    }

    /** A single byte range as the static handler reads it (any other Range it ignores, serving the whole file). */
    private static final java.util.regex.Pattern BYTE_RANGE = java.util.regex.Pattern.compile("bytes=(\\d+)-(\\d*)");

    /**
     * A Range with its last position cut to what the static handler can read: a last position past what a long holds
     * is past any file's end, which RFC 9110 has served as the file's end, where the static handler fails to parse it
     * and answers 416. An open end ({@code bytes=N-}) means just that. A last position before the first makes the range
     * invalid, and RFC 9110 has a Range without a valid range ignored: null (serve the whole file; the static handler
     * would answer 416). Any other Range is returned as is.
     */
    static String clampedRange(String range) {
        java.util.regex.Matcher m = BYTE_RANGE.matcher(range);
        if (!m.matches() || m.group(2).isEmpty()) return range;
        long first = digits(m.group(1)), last = digits(m.group(2));
        if (last < 0) return "bytes=" + m.group(1) + "-";
        // a first byte past what a long holds is past any file: the handler's 416 stands
        return first >= 0 && last < first ? null : range;
    }

    /** A run of ASCII digits as a long, or -1 where the number does not fit one. */
    private static long digits(String d) {
        try {
            return Long.parseLong(d);
        } catch (NumberFormatException tooLarge) {
            return -1;
        }
    }

    /**
     * The answer to a GET of a static file whose Range no byte of the file satisfies (a first byte at or past its end):
     * 416 with the OpenAI error body and the {@code Content-Range: bytes *}{@code /LENGTH} the static handler set before
     * it failed the request with 416. Both HTTP fronts register it as their router's handler for 416, so they answer
     * alike; without it the router answers plain text and logs an ERROR for every such request, which any client can
     * send, so it is logged at DEBUG only.
     */
    public static void rangeNotSatisfiable(RoutingContext ctx) {
        HttpServerResponse resp = ctx.response();
        if (resp.ended() || resp.closed() || resp.headWritten()) return;
        String range = ctx.request().getHeader("Range");
        if (range != null && range.length() > 64) range = range.substring(0, 64) + "...";
        String contentRange = resp.headers().get(HttpHeaders.CONTENT_RANGE);
        String size = contentRange != null && contentRange.startsWith("bytes */") ? contentRange.substring(8) : null;
        ApiException e = new ApiException(416, "invalid_request_error", "range_not_satisfiable", null, "the range '"
                + range + "' is not satisfiable" + (size != null ? ": the file has " + size + " bytes" : ""), null);
        LOG.debug("{} {} answered with 416: {}", ctx.request().method(), ctx.request().path(), e.getMessage());
        resp.setStatusCode(416).putHeader(HttpHeaders.CONTENT_TYPE, "application/json").end(Json.write(e.body()));
    }

    /**
     * The Content-Type of the file a static path is answered with: from the name of the file served (for a path ending
     * in '/', the directory's index.html when it names a directory), text as UTF-8 (the playground's files are), a
     * Markdown or LICENSE file as text/plain, and application/octet-stream for a name with no known type.
     * @param path the path as routed ({@link #routed}), of a file that is being answered
     */
    static String fileType(String webroot, String path) {
        String p;
        try {
            // the static handler decodes what the router left escaped ("%2F"); '+' is no space in a path
            p = java.net.URLDecoder.decode(path.replace("+", "%2B"), StandardCharsets.UTF_8);
        } catch (IllegalArgumentException e) {
            p = path;  // a malformed escape: the router refuses such paths before any route, this is only a fallback
        }
        String name = p.substring(p.lastIndexOf('/') + 1);
        if (name.isEmpty()) {
            // a directory's index page, or a file whose path was given a trailing slash (the file system serves it)
            String trimmed = p.replaceAll("/+$", "");
            boolean dir;
            try {
                dir = trimmed.isEmpty() || java.nio.file.Files.isDirectory(java.nio.file.Path.of(webroot, trimmed));
            } catch (java.nio.file.InvalidPathException e) {
                dir = false;
            }
            name = dir ? "index.html" : trimmed.substring(trimmed.lastIndexOf('/') + 1);
        }
        String type = io.vertx.core.http.MimeMapping.mimeTypeForFilename(name);
        // the vendored libraries' notices (README.md, LICENSE, LICENSE-MPL) are text to read in the browser, which
        // would offer to save them as octet-stream (Vert.x knows neither name)
        String upper = name.toUpperCase(java.util.Locale.ROOT);
        if (type == null && (upper.endsWith(".MD") || upper.startsWith("LICENSE"))) type = "text/plain";
        if (type == null) return "application/octet-stream";
        return type.startsWith("text") ? type + ";charset=UTF-8" : type;
    }

    /** API key check (a Bearer token or x-api-key, {@link ApiKeys}) for API routes when server.apiKeys is set. */
    private void auth(RoutingContext ctx) {
        List<String> keys = state.config().apiKeys();
        String path = routed(ctx);
        if (keys.isEmpty() || !isApi(path)) {
            ctx.next();
            return;
        }
        String refused = keyRefusal(ctx.request(), path, keys);
        if (refused == null) {
            ctx.next();
            return;
        }
        ctx.response().putHeader("WWW-Authenticate", "Bearer");
        error(ctx, new ApiException(401, "invalid_request_error", "invalid_api_key", null, refused, null));
    }

    /**
     * Why a request's keys do not let it in, or null when they do ({@link ApiKeys#refusal}: every key it sends, in
     * each Authorization and x-api-key header, must be valid), read from its headers for both fronts alike.
     * @param path the routed path: a request without a key on the Anthropic routes is told of x-api-key first
     */
    public static String keyRefusal(HttpServerRequest req, String path, List<String> keys) {
        return ApiKeys.refusal(req.headers().getAll(HttpHeaders.AUTHORIZATION), req.headers().getAll(ApiKeys.X_API_KEY),
                keys, AnthropicApi.speaks(path));
    }

    @Override
    public Future<?> stop() {
        if (heads != null) heads.stop();
        return longText != null ? longText.close() : Future.succeededFuture();
    }

    /** The body's deadline ({@link BodyDeadline}), its 408s counted as refusals. */
    private void watchBody(RoutingContext ctx) {
        BodyDeadline.watch(ctx, state.config().bodyReadTimeoutMs(), () -> state.metrics().rejected("request_timeout"),
                AnthropicApi::errorBody);
    }

    /**
     * The codings of a Content-Encoding header other than identity (the server decodes none: a compressed body would
     * only fail as malformed UTF-8 or JSON), or null when there are none.
     */
    static String unsupportedEncoding(String header) {
        if (header == null) return null;
        StringBuilder other = new StringBuilder();
        for (String coding : header.split(",")) {
            String c = coding.trim();
            if (c.isEmpty() || c.equalsIgnoreCase("identity")) continue;
            if (!other.isEmpty()) other.append(", ");
            other.append(c.length() > 64 ? c.substring(0, 64) + "..." : c);
        }
        return other.isEmpty() ? null : other.toString();
    }

    /**
     * Reads a body as one endpoint takes it: the checks that need only the body, the configuration and the model,
     * which write no answer and touch no request state, so that they may run on any thread.
     * @param <R> what the endpoint goes on with
     */
    @FunctionalInterface
    private interface BodyReader<R> {
        /** @throws ApiException the refusal to answer */
        R read(JsonNode body, Reading reading);
    }

    /**
     * What reading a body leaves beside its result: the request's method and path for the log, and the value of the
     * {@link RequestFields#HEADER} header to put on the answer (refusals included), or null. Written by the reading
     * thread, read on the event loop once the reading has ended.
     */
    private static final class Reading {
        final String method, path;
        /** The request's id ({@link #requestIds}) when the reading began, or null. */
        final String requestId;
        /** The client's own {@code X-Request-Id}, or null for none. */
        final String clientId;
        String ignoredFields;
        /** The {@link #NOTES_HEADER} header's value (a schema not enforced, ...), or null. */
        String notes;
        /** A generation's id, which becomes the request's where the client gave none, or null. */
        String generationId;

        Reading(RoutingContext ctx) {
            method = ctx.request().method().name();
            path = ctx.request().path();
            requestId = requestId(ctx);
            clientId = ctx.get(CLIENT_ID_KEY);
        }
    }

    /**
     * Reads the body up to server.maxBodyBytes, parses it as JSON and reads it with {@code reader}, then goes on with
     * {@code then} on the event loop; a refusal is answered. What the head alone decides is answered first
     * ({@link #admitBody}: 415, 413, or 100 Continue); a chunked body whose chunk sizes pass the limit gets 413 from
     * {@link RequestFraming} as soon as the size that passes it is read, its connection closed (the check here is for a
     * connection that check could not be put on). A body that has not fully arrived limits.bodyReadTimeoutMs
     * after the headers gets 408 and its connection is closed ({@link BodyDeadline}). A body of
     * {@link #LARGE_BODY_BYTES} or more is parsed and read on Vert.x's worker pool, a smaller one on the event loop;
     * the answers are the same.
     */
    private <R> void withBody(RoutingContext ctx, BodyReader<R> reader, Consumer<R> then) {
        HttpServerRequest req = ctx.request();
        int limit = state.config().maxBodyBytes();
        Buffer body = Buffer.buffer();
        ApiException refused = admitBody(ctx, limit);
        boolean[] over = {refused != null};
        if (refused != null) error(ctx, refused);
        req.handler(chunk -> {
            if (over[0] || BodyDeadline.passed(ctx)) return;
            if (body.length() + chunk.length() > limit) {
                over[0] = true;
                error(ctx, tooLarge(limit, -1));
                return;
            }
            body.appendBuffer(chunk);
        });
        req.exceptionHandler(t -> {
            BodyDeadline.arrived(ctx);
            LOG.debug("request body: {}", t.toString());
        });
        req.endHandler(v -> {
            BodyDeadline.arrived(ctx);
            if (over[0] || BodyDeadline.passed(ctx)) return;
            ctx.put("bodyBytes", body.length());
            Reading reading = new Reading(ctx);
            byte[] bytes = body.getBytes();
            boolean urlencoded = URLENCODED.equals(formBody(req.getHeader(HttpHeaders.CONTENT_TYPE)));
            if (bytes.length < LARGE_BODY_BYTES) {
                R read;
                try {
                    read = readBody(bytes, urlencoded, reader, reading);
                } catch (RuntimeException e) {
                    afterReading(ctx, reading, null, e, then);
                    return;
                }
                afterReading(ctx, reading, read, null, then);
                return;
            }
            // counted as an open exchange while it is read, as while it is tokenised: a shutdown waits for its answer
            state.exchangeOpened();
            vertx.executeBlocking(() -> readBody(bytes, urlencoded, reader, reading), false).onComplete(ar -> {
                try {
                    afterReading(ctx, reading, ar.result(), ar.cause(), then);
                } finally {
                    state.exchangeClosed();  // after then: tokenizing has counted the request itself
                }
            });
        });
        req.resume();
    }

    /**
     * Parses a body as JSON and reads it. An empty one (nothing, or a byte order mark and whitespace alone) is refused as
     * invalid_json whatever its type; urlencoded: its Content-Type is {@link #URLENCODED}, whose body, where it is not
     * JSON and does not open as JSON ({@code {} or {@code [} after a byte order mark and whitespace), is a form: 415
     * ({@link #notJson}).
     */
    private static <R> R readBody(byte[] bytes, boolean urlencoded, BodyReader<R> reader, Reading reading) {
        int start = significant(bytes);
        if (start == bytes.length) {
            // nothing, or a byte order mark and whitespace alone (curl -d ''): no JSON value, whatever the type says
            int bom = bom(bytes), blanks = bytes.length - bom;
            String what = (bom > 0 ? "a byte order mark" + (blanks > 0 ? " and " : "") : "")
                    + (blanks > 0 ? blanks + (blanks == 1 ? " byte" : " bytes") + " of whitespace" : "");
            throw new ApiException(400, "invalid_request_error", "invalid_json", null,
                    "the request body is empty" + (what.isEmpty() ? "" : " (" + what + ")"), null);
        }
        JsonNode n;
        try {
            n = Json.read(bytes);
        } catch (Json.Unreadable e) {
            // a urlencoded body that sets out as JSON (curl -d '{...' with a mistake in it) gets the JSON's own 400,
            // which says where the mistake is; any other is a form
            if (urlencoded && bytes[start] != '{' && bytes[start] != '[') throw notJson(URLENCODED);
            throw new ApiException(400, "invalid_request_error", "invalid_json", e.field(),
                    e.problem() == Json.Problem.UTF8 ? "the request body is " + e.getMessage() : e.getMessage(), null);
        }
        return reader.read(n, reading);
    }

    /** The length of the UTF-8 byte order mark that starts bytes: 3, or 0 where none does. */
    static int bom(byte[] bytes) {
        return bytes.length >= 3 && (bytes[0] & 0xff) == 0xef && (bytes[1] & 0xff) == 0xbb && (bytes[2] & 0xff) == 0xbf ? 3 : 0;
    }

    /**
     * Where a body's content starts: after a UTF-8 byte order mark and JSON whitespace (its length when nothing else
     * is there).
     */
    static int significant(byte[] bytes) {
        int i = bom(bytes);
        while (i < bytes.length && (bytes[i] == ' ' || bytes[i] == '\t' || bytes[i] == '\n' || bytes[i] == '\r')) i++;
        return i;
    }

    /** On the event loop once a body was read: the ignored fields' and the notes' headers, then the refusal or {@code then}. */
    private <R> void afterReading(RoutingContext ctx, Reading reading, R read, Throwable failure, Consumer<R> then) {
        HttpServerResponse resp = ctx.response();
        if (reading.ignoredFields != null && !resp.headWritten() && !resp.closed())
            resp.putHeader(RequestFields.HEADER, reading.ignoredFields);
        if (reading.notes != null && !resp.headWritten() && !resp.closed()) resp.putHeader(NOTES_HEADER, reading.notes);
        // the answer names the generation as its body does, unless the client named the request itself
        if (reading.generationId != null && requestId(ctx) != null && ctx.get(CLIENT_ID_KEY) == null)
            ctx.put(ID_KEY, reading.generationId);
        if (failure != null) {
            error(ctx, asApi(failure));
            return;
        }
        try {
            then.accept(read);
        } catch (RuntimeException e) {
            error(ctx, asApi(e));
        }
    }

    /**
     * What a request's head alone decides about its body, before any of it is read: 415 for a Content-Encoding other
     * than identity (with the Accept-Encoding header the answer needs) or a multipart form's Content-Type
     * ({@link #formBody}), 413
     * for a declared length over {@code limit};
     * otherwise a client that waits for {@code 100 Continue} gets it now. Both HTTP fronts, a single server and a
     * cluster gateway, call it where a route starts reading a body, after the route and the API key were accepted.
     *
     * @return the refusal to answer (the caller writes it, then discards what comes of the body), or null to read it
     */
    public static ApiException admitBody(RoutingContext ctx, int limit) {
        HttpServerRequest req = ctx.request();
        // every Content-Encoding line counts: two lines are one list (RFC 9110 section 5.3)
        String encoding = unsupportedEncoding(String.join(",", req.headers().getAll(HttpHeaders.CONTENT_ENCODING)));
        if (encoding != null) {
            // RFC 9110 section 15.5.16: Accept-Encoding says which codings would have been taken
            ctx.response().putHeader(HttpHeaders.ACCEPT_ENCODING, "identity");
            return new ApiException(415, "invalid_request_error", "unsupported_content_encoding", null, "the request"
                    + " body's Content-Encoding '" + encoding + "' is not supported: send the JSON uncompressed (identity)", null);
        }
        // a multipart body is never JSON: refused before it is read. A urlencoded one is what curl -d sends without a
        // type, JSON or not: read, and refused only where it is not JSON (readBody)
        if (MULTIPART.equals(formBody(req.getHeader(HttpHeaders.CONTENT_TYPE))))
            return notJson(MULTIPART);
        long declared = -1;
        try {
            String cl = req.getHeader(HttpHeaders.CONTENT_LENGTH);
            if (cl != null) declared = Long.parseLong(cl.trim());
        } catch (NumberFormatException ignored) {
            // Netty rejects malformed lengths before we get here
        }
        if (declared > limit) return tooLarge(limit, declared);
        // the client (curl, for bodies over 1 MB) waits for this before it sends the body; HTTP/1.0 has no such answer
        if ("100-continue".equalsIgnoreCase(req.getHeader(HttpHeaders.EXPECT)) && req.version() != HttpVersion.HTTP_1_0)
            ctx.response().writeContinue();
        return null;
    }

    /** A form's media types (formBody). */
    static final String MULTIPART = "multipart/form-data", URLENCODED = "application/x-www-form-urlencoded";

    /**
     * The media type of a form body ({@link #MULTIPART}: what {@code curl -F} sends; {@link #URLENCODED}: what
     * {@code curl -d} sends without a type, often with JSON in it), or null for any other Content-Type or none: those
     * are read as JSON (docs/api.md, HTTP).
     */
    static String formBody(String contentType) {
        if (contentType == null) return null;
        int semi = contentType.indexOf(';');
        String type = (semi < 0 ? contentType : contentType.substring(0, semi)).trim().toLowerCase(java.util.Locale.ROOT);
        return type.equals(MULTIPART) || type.equals(URLENCODED) ? type : null;
    }

    /** The 415 for a body of a form's media type that this JSON API cannot read. */
    static ApiException notJson(String form) {
        return new ApiException(415, "invalid_request_error", "unsupported_media_type", null, "the request body is "
                + form + (URLENCODED.equals(form) ? " and not JSON" : "") + "; this API takes a JSON body (Content-Type:"
                + " application/json)", null);
    }

    /**
     * The error body of e for a request to path, in that route's API shape: Anthropic's on the Anthropic routes, OpenAI's
     * elsewhere (AnthropicApi decides); for a cluster gateway's own answers, which a single server gives in that shape.
     */
    public static com.fasterxml.jackson.databind.node.ObjectNode errorBody(String path, ApiException e) {
        return AnthropicApi.errorBody(path, e);
    }

    /** The 413 for a body over server.maxBodyBytes; {@code declared}: its declared length, or -1 when it was not. */
    public static ApiException tooLarge(int limit, long declared) {
        return new ApiException(413, "invalid_request_error", "request_too_large", null, "the request body"
                + (declared >= 0 ? " (" + declared + " bytes)" : "") + " is larger than the limit of " + limit
                + " bytes (server.maxBodyBytes)", null);
    }

    /**
     * The frame that ends a generation's stream on path that fails after it started, in the shape of that path's API
     * (as {@link AnswerWriter#failed} writes it): Anthropic's {@code error} event on the Messages route, the Responses
     * API's {@code error} event numbered {@code events} on its route, else OpenAI's {@code data:} frame with the error
     * body. For a front that relays such a stream without writing it (a cluster gateway).
     * @param events the events already sent on the stream (a Responses event's {@code sequence_number} counts them)
     */
    public static String streamFailure(String path, ApiException e, int events) {
        String route = exactRoute(path);
        if (AnthropicApi.MESSAGES.equals(route)) return AnthropicResponse.errorEvent(e);
        if (ResponsesApi.RESPONSES.equals(route)) return ResponsesResponse.errorEvent(e, events);
        return "data: " + Json.write(e.body()) + "\n\n";
    }

    /**
     * Sends an OpenAI error body, or, when an SSE stream already started, an error event that ends the stream; on the
     * Anthropic routes in Anthropic's shapes ({@link AnthropicApi#errorBody}, an {@code error} event). Refusals before
     * generation (4xx, 503) are counted in ds4j:requests_rejected_total by their code.
     */
    void error(RoutingContext ctx, ApiException e) {
        error(ctx, e, false);
    }

    /** As {@link #error(RoutingContext, ApiException)}; countedByEngine: the engine already counted the request. */
    private void error(RoutingContext ctx, ApiException e, boolean countedByEngine) {
        HttpServerResponse resp = ctx.response();
        if (resp.ended() || resp.closed()) return;
        String path = decodedPath(ctx);
        if (resp.headWritten()) {
            // a generation's stream (its exchange set its writer before the head went out) ends in its API's shape; any
            // other answer whose head went out gets the OpenAI error frame, as before there were writers
            AnswerWriter w = ctx.get(WRITER);
            resp.end(w != null ? w.failed(e) : "data: " + Json.write(e.body()) + "\n\n");
            return;
        }
        // a path no route answers (404 not_found) and a method its path does not answer (405) are refusals like any
        // other: counted and logged, so that a client calling a wrong URL can be found in the log
        if ((e.status() < 500 || e.status() == 503) && !countedByEngine) {
            state.metrics().rejected(e.code() != null ? e.code() : "http_" + e.status());
            if (e.status() != 429) // the engine logs queue-full refusals with the queue state
                LOG.info("{}{} {} rejected with {}: {}", named(ctx), ctx.request().method(),
                        shownTarget(ctx.request(), ctx.request().path()), e.status(), e.logReason());
        }
        if (e.retryAfterSeconds() != null) resp.putHeader("Retry-After", Integer.toString(e.retryAfterSeconds()));
        resp.setStatusCode(e.status()).putHeader(HttpHeaders.CONTENT_TYPE, "application/json")
                .end(Json.write(AnthropicApi.errorBody(path, e)));
    }

    /**
     * The path a request was routed by, which decides the shape of its answers (Anthropic's on the Anthropic routes);
     * "" for a path the router cannot decode (a malformed percent-escape): its 400 is OpenAI's, as on every such path.
     */
    static String decodedPath(RoutingContext ctx) {
        try {
            return routed(ctx);
        } catch (RuntimeException undecodable) {
            return "";
        }
    }

    private static void json(RoutingContext ctx, int status, JsonNode body) {
        HttpServerResponse resp = ctx.response();
        if (resp.ended() || resp.closed()) return;
        // a HEAD answer drops the body and gets its length from headLength (first())
        resp.setStatusCode(status).putHeader(HttpHeaders.CONTENT_TYPE, "application/json").end(Json.write(body));
    }

    /** The routing context's key of a generation's {@link AnswerWriter}. */
    private static final String WRITER = "ds4j.answerWriter";

    /** Error code of requests refused or ended because the server shuts down. */
    public static final String SHUTTING_DOWN = "server_shutting_down";
    /** Their Retry-After (s). */
    static final int SHUTDOWN_RETRY_SECONDS = 5;
    /**
     * How long an exchange keeps listening, once it has ended, for events the engine sent before it learned of the end
     * (each choice's 503 at the shutdown, sent in one loop; the tokens of the step it was in when the client went away):
     * ample, since they are already on their way.
     */
    static final long STRAY_EVENTS_MS = 5_000;

    /** The answer to a generation request once the server is shutting down ({@link ServerState#draining}). */
    public static ApiException shuttingDown() {
        return new ApiException(503, "unavailable_error", SHUTTING_DOWN, null,
                "the server is shutting down and takes no new requests; retry on another instance or once it is back",
                SHUTDOWN_RETRY_SECONDS);
    }

    /** A route that needs the loaded model: handler with it, or the 503 {@link #ready()} gives while there is none. */
    private io.vertx.core.Handler<RoutingContext> withModel(java.util.function.BiConsumer<RoutingContext, ModelInfo> handler) {
        return ctx -> {
            ModelInfo m;
            try {
                m = ready();
            } catch (ApiException e) {
                error(ctx, e);
                return;
            }
            handler.accept(ctx, m);
        };
    }

    /** The model, or a 503 (loading / failed) answer. */
    private ModelInfo ready() {
        ModelInfo m = state.model();
        if (m != null) return m;
        if (state.loadError() != null)
            throw new ApiException(503, "unavailable_error", "model_load_failed", null, "the model failed to load: " + state.loadError(), null);
        throw new ApiException(503, "unavailable_error", "model_loading", null, "the model is loading", 5);
    }

    // ------------------------------------------------------------------------------------------------ small endpoints

    private void health(RoutingContext ctx) {
        ObjectNode o = Json.object();
        if (state.draining()) {
            // load balancers stop routing here while the running requests finish
            o.put("status", "shutting_down");
            json(ctx, 503, o);
        } else if (state.model() != null) {
            o.put("status", "ready");
            json(ctx, 200, o);
        } else if (state.loadError() != null) {
            o.put("status", "error");
            o.set("error", ApiException.errorBody("the model failed to load: " + state.loadError(), "unavailable_error", null,
                    "model_load_failed").get("error"));
            json(ctx, 503, o);
        } else {
            o.put("status", "loading");
            ctx.response().putHeader("Retry-After", "5");
            json(ctx, 503, o);
        }
    }

    /** GET /v1/models: the served model's object in a list (OpenAI's shape). */
    private void models(RoutingContext ctx, ModelInfo m) {
        ObjectNode root = Json.object().put("object", "list");
        root.putArray("data").add(modelObject(m));
        json(ctx, 200, root);
    }

    /**
     * GET /v1/models/{id}: the served model's object (as listed by /v1/models), or 404 model_not_found for any other
     * id, as OpenAI answers.
     */
    private void model(RoutingContext ctx, ModelInfo m) {
        String id = pathModelId(ctx.pathParam("id"), m.id()::equals);
        if (!m.id().equals(id)) {
            error(ctx, Requests.modelNotFound(id, m.id()));
            return;
        }
        json(ctx, 200, modelObject(m));
    }

    /**
     * The model id of a path {@code /v1/models/{id}} as its rest gives it: the router takes every other path with a
     * trailing slash as without it ({@code POST /v1/chat/completions/}), so one trailing slash is no part of the id,
     * unless {@code served} says a served model's id itself ends with it. For a single server and a cluster gateway.
     */
    public static String pathModelId(String rest, java.util.function.Predicate<String> served) {
        return rest.length() > 1 && rest.endsWith("/") && !served.test(rest) ? rest.substring(0, rest.length() - 1) : rest;
    }

    /**
     * One model in OpenAI's shape, with vLLM's {@code max_model_len} (the context limit in effect, which clients such as
     * Open WebUI read to size their requests: the same value as {@code meta.n_ctx}) and ds4j's {@code meta}.
     */
    private ObjectNode modelObject(ModelInfo m) {
        ObjectNode e = Json.object();
        e.put("id", m.id()).put("object", "model").put("created", state.startedAtMillis() / 1000).put("owned_by", "ds4j")
                .put("max_model_len", state.maxContext());
        ObjectNode meta = e.putObject("meta");
        // the checkpoint's rows and the tokenizer's ids, which can differ (129,280 and 128,815 for DeepSeek-V4): token
        // ids and top_k are bounded by the tokenizer's
        meta.put("n_vocab", m.vocabSize()).put("n_vocab_tokenizer", m.tokenizer().vocabSize()).put("n_ctx", state.maxContext())
                .put("n_ctx_train", m.maxPositions())
                .put("n_layers", m.layers()).put("n_embd", m.hidden()).put("backend", m.backend()).put("path", m.path())
                .put("embedded", m.embedded());
        return e;
    }

    private void props(RoutingContext ctx) {
        ServerState.Reloads reloads = state.reloads();  // the configuration, its pending keys and outcome of one reload
        ServerConfig cfg = reloads.config();
        ModelInfo m = state.model();
        ObjectNode o = Json.object();
        o.put("build_info", FINGERPRINT);
        o.put("status", m != null ? "ready" : state.loadError() != null ? "error" : "loading");
        ObjectNode model = o.putObject("model");
        if (m != null) {
            model.put("id", m.id()).put("path", m.path()).put("embedded", m.embedded()).put("tokenizer", m.tokenizer().source())
                    .put("n_vocab", m.vocabSize()).put("n_vocab_tokenizer", m.tokenizer().vocabSize())
                    .put("n_ctx_train", m.maxPositions()).put("n_layers", m.layers())
                    .put("n_embd", m.hidden()).put("n_experts", m.experts());
            if (m.embedded()) model.put("note", "embedded default: a random 'tiny' DeepSeek-V4 model; its text is meaningless");
        }
        o.put("backend", cfg.backend());
        ObjectNode spec = o.putObject("speculative");
        spec.put("draft", m != null ? m.draft() : cfg.draft()).set("q", Json.MAPPER.valueToTree(cfg.specQWritten()));
        // the backend's effective state once loaded (it may differ from the configuration: hybrid placement turns the
        // F16-KV verifier off); while loading, only what was asked for is known
        EngineStatus st = m != null ? m.engine() : null;
        ObjectNode verify = o.putObject("verify");
        verify.put("f16KvRequested", st != null ? st.f16KvRequested() : cfg.verifyF16Kv());
        if (st != null) verify.put("f16KvActive", st.f16KvActive()).put("attention", st.verifyAttention());
        else verify.putNull("f16KvActive").putNull("attention");
        verify.put("f32ShortContextRows", st != null && st.f32ShortContextRows() > 0 ? st.f32ShortContextRows()
                : cfg.verifyF32ShortContextRows());
        if (st != null && st.diagnostic() != null) verify.put("diagnostic", st.diagnostic()); else verify.putNull("diagnostic");
        ObjectNode engine = o.putObject("engine");
        if (st != null) engine.put("backend", st.backend()).put("expertPlacement", st.expertPlacement()).put("hostExperts", st.hostExperts());
        else engine.putNull("backend").putNull("expertPlacement").putNull("hostExperts");
        engine.put("expertPlacementConfigured", cfg.expertPlacement()).put("devices", cfg.gpuDevices())
                .put("memoryBudgetMiB", cfg.memoryBudgetMiB());
        // the values in effect, as the engine's scheduler takes them (the configured ones are under "config"): the
        // prefill chunk is at most the token budget, the floor under the latency bound at most that chunk
        io.ds4j.engine.Scheduler.Limits sl = EngineVerticle.limits(cfg);
        int prefillChunk = io.ds4j.engine.Scheduler.prefillChunk(cfg.prefillChunk(), sl);
        // each limit as in effect: the context capped by the model's, the prefill chunk by the token budget (a
        // configured value that showed here read as applied while the log said it was capped); the configured value
        // of a capped key beside it, named so
        ObjectNode limits = o.putObject("limits");
        limits.put("n_ctx", state.maxContext()).put("maxContextTokens", state.maxContext())
                .put("maxContextTokensConfigured", cfg.maxContextTokens()).put("maxQueue", cfg.maxQueue())
                .put("maxActive", cfg.maxActive()).put("maxTokensDefault", cfg.maxTokensDefault())
                .put("prefillChunk", prefillChunk).put("prefillChunkConfigured", cfg.prefillChunk())
                .put("maxBodyBytes", cfg.maxBodyBytes()).put("cacheTokens", cfg.cacheTokens())
                .put("bodyReadTimeoutMs", cfg.bodyReadTimeoutMs()).put("headerReadTimeoutMs", cfg.headerReadTimeoutMs())
                .put("streamBufferBytes", cfg.streamBufferBytes());
        o.putObject("scheduler").put("maxBatchRows", sl.maxBatchRows()).put("tokenBudget", sl.tokenBudget())
                .put("prefillChunk", prefillChunk)
                .put("maxTickStretch", sl.maxTickStretch()).put("minPrefillChunk", sl.floor())
                .put("layerSlices", sl.layerSlices());
        ObjectNode pc = o.putObject("prefix_cache");
        io.ds4j.engine.PrefixCache.Stats ps = state.metrics().prefixCache();
        pc.put("enabled", ps != null).put("configured", cfg.prefixCacheEnabled()).put("budgetMiB", cfg.prefixCacheBudgetMiB())
                .put("blockTokens", ps != null ? ps.blockTokens() : cfg.prefixCacheBlockTokens())
                .put("intervalTokens", cfg.prefixCacheIntervalTokens());
        if (ps != null) pc.put("snapshots", ps.snapshots()).put("bytes", ps.bytes()).put("hits", ps.hits())
                .put("misses", ps.misses()).put("hitTokens", ps.hitTokens()).put("evictions", ps.evictions());
        o.put("total_slots", cfg.maxActive());
        ServerConfig.SamplingDefaults s = cfg.sampling();
        ObjectNode g = o.putObject("default_generation_settings");
        g.put("n_ctx", state.maxContext()).put("temperature", s.temperature()).put("top_p", s.topP()).put("top_k", s.topK())
                .put("min_p", s.minP()).put("presence_penalty", s.presencePenalty()).put("frequency_penalty", s.frequencyPenalty())
                .put("repetition_penalty", s.repetitionPenalty()).put("max_tokens", cfg.maxTokensDefault());
        if (s.seed() == null) g.putNull("seed"); else g.put("seed", s.seed());
        ObjectNode load = o.putObject("load");
        load.put("running", state.metrics().running.get()).put("waiting", state.metrics().waiting.get());
        o.set("config", cfg.toJson(true));
        ArrayNode pending = o.putArray("pending_restart");
        for (ServerConfig.Change c : reloads.pending()) {
            ObjectNode p = pending.addObject();
            p.put("key", c.key());
            p.set("running", Json.MAPPER.valueToTree(c.running()));
            p.set("configured", Json.MAPPER.valueToTree(c.proposed()));
        }
        ServerState.ReloadOutcome rl = reloads.last();
        if (rl != null) {
            o.putObject("config_reload").put("at", rl.at().toString()).put("outcome", rl.outcome()).put("message", rl.message());
        } else {
            o.putNull("config_reload");
        }
        ObjectNode caps = o.putObject("capabilities");
        caps.put("reasoning", true).put("tools", true).put("speculative", m != null && !m.draft().equals("none"));
        caps.putArray("reasoning_efforts").add("none").add("high").add("max");
        if (state.clusterView() != null) o.set("cluster", state.clusterView().get());
        json(ctx, 200, o);
    }

    /** A /tokenize body as read: the text (or chat messages and options) and how to answer. */
    private record TokenizeRead(Tokenizer tok, String plain, List<ChatMessage> messages, ChatOptions opts,
                                boolean pieces, boolean addSpecial) {}

    /** Reads a /tokenize body ({@link BodyReader}): its fields checked, a huge text refused before it is tokenised. */
    private TokenizeRead readTokenize(JsonNode b, Reading reading) {
        ModelInfo m = ready();
        if (!b.isObject()) throw ApiException.bodyNotAnObject(b);
        Requests.checkModel(b, m);
        boolean pieces = Requests.bool(b, "with_pieces", false);
        boolean addSpecial = Requests.bool(b, "add_special", false);
        // one text to count: a body giving two of them would count one and drop the other (it was reported as an
        // unknown field, and refused as unrecognised under server.rejectUnknownFields)
        List<String> given = new java.util.ArrayList<>();
        for (String f : new String[]{"content", "prompt", "messages"})
            if (Requests.present(b, f)) given.add(f);
        if (given.size() > 1)
            throw ApiException.badField(given.get(1), "give the text to tokenize as one of content, prompt or messages; "
                    + "this body gives " + String.join(", ", given.subList(0, given.size() - 1)) + " and " + given.getLast());
        String text = Requests.optString(b, "content", "content");
        String field = "content";
        if (text == null) {
            text = Requests.optString(b, "prompt", "prompt");
            field = "prompt";
        }
        final String plain = text;
        final List<ChatMessage> messages;
        final ChatOptions opts;
        if (plain == null) {
            if (!Requests.present(b, "messages"))
                throw ApiException.badField("content", "give the text to tokenize as content (or prompt), or chat messages");
            // read as a chat request, so that a chat body counts its prompt's tokens as sent (its other fields checked)
            Requests.Gen g = Requests.parse(b, true, m, state.config());
            messages = g.messages();
            opts = g.options();
        } else {
            messages = null;
            opts = null;
        }
        ignoredFields(reading, b, null);
        Tokenizer tok = m.tokenizer();
        // the bound the generation endpoints apply, so that a huge text is refused before it is tokenised
        checkChars(tok, plain, messages, state.maxContext(), plain != null ? field : "messages");
        return new TokenizeRead(tok, plain, messages, opts, pieces, addSpecial);
    }

    private void tokenize(RoutingContext ctx, TokenizeRead t) {
        Tokenizer tok = t.tok();
        String plain = t.plain();
        boolean addSpecial = t.addSpecial(), pieces = t.pieces();
        List<ChatMessage> messages = t.messages();
        ChatOptions opts = t.opts();
        // a text is tokenised as a completion's prompt is (its control-token strings are control tokens), messages as a
        // chat's (only the template's markers are)
        tokenizing(ctx, null, 0, () -> plain != null ? tok.encode(addSpecial && !plain.startsWith(V4Format.BOS) ? V4Format.BOS + plain : plain)
                : chatPrompt(tok, messages, opts), result -> {
            ObjectNode o = Json.object();
            ArrayNode arr = o.putArray("tokens");
            for (int id : result) {
                if (!pieces) {
                    arr.add(id);
                    continue;
                }
                ObjectNode p = arr.addObject().put("id", id);
                byte[] bytes = tok.tokenBytes(id);
                String s = new String(bytes, StandardCharsets.UTF_8);
                if (java.util.Arrays.equals(s.getBytes(StandardCharsets.UTF_8), bytes)) p.put("piece", s);
                else {
                    ArrayNode bs = p.putArray("piece");
                    for (byte x : bytes) bs.add(x & 0xff);
                }
            }
            o.put("count", result.length).put("max_model_len", state.maxContext());
            json(ctx, 200, o);
        });
    }

    /** A tokenisation not started because the client had gone (nothing to answer). */
    private static final class ClientGone extends RuntimeException {
        ClientGone() {
            super("the client went away", null, false, false);
        }
    }

    /**
     * Runs a request's tokenisation (work) off the event loop, then {@code then} with its result on the event loop;
     * a failure is answered as an error. Bodies of {@link #LONG_TEXT_BYTES} or more take the long-text lane, the others
     * Vert.x's worker pool; one waiting for a thread of that lane counts against limits.maxQueue
     * ({@link #queueLongText}). Work whose client has gone by the time it would start is not done, nor work that would
     * start after the shutdown began (503). A client that goes away before the tokenisation ends is told of at once
     * ({@link #clientGone}), and what the tokenisation then gives is dropped.
     * @param generation the generation's request id, or null for a request that generates nothing
     * @param choices    the generation's choices (each counts as a request in the counters), 0 without a generation
     */
    private <T> void tokenizing(RoutingContext ctx, String generation, int choices, java.util.concurrent.Callable<T> work,
                                Consumer<T> then) {
        // settled once: by the client's going, or by the tokenisation's end (event loop only)
        boolean[] settled = {false};
        if (ctx.response().closed()) {
            // it went while its body was read off the event loop
            clientGone(ctx, generation, choices, "before the request was tokenised", settled);
            return;
        }
        Integer bytes = ctx.get("bodyBytes");
        boolean longBody = bytes != null && bytes >= LONG_TEXT_BYTES;
        if (longBody) queueLongText(ctx);
        // set while the body waits for a lane thread: cleared by the first of its start and its end
        java.util.concurrent.atomic.AtomicBoolean waits = new java.util.concurrent.atomic.AtomicBoolean(longBody);
        java.util.concurrent.Callable<T> guarded = () -> {
            if (waits.getAndSet(false)) state.longTextDequeued();
            if (ctx.response().closed()) throw new ClientGone();
            if (state.draining()) throw shuttingDown();  // no new work once the shutdown began: 503
            if (!longBody) return work.call();
            state.longTextStarted();
            try {
                return work.call();
            } finally {
                state.longTextEnded();
            }
        };
        // a client that goes while its prompt is tokenised (seconds for a large one) is said and counted then: the
        // tokenisation cannot be stopped, and what it gives goes nowhere (its end said nothing of a request it dropped)
        ctx.addEndHandler(ar -> {
            if (ar.failed()) clientGone(ctx, generation, choices, waits.get() ? "before the request was tokenised"
                    : "while the request was being tokenised", settled);
        });
        // counted as an open exchange while it is tokenised, so that a shutdown waits for it (up to its grace); a
        // generation's Exchange counts itself from then on
        state.exchangeOpened();
        Future<T> f = longBody ? longText.executeBlocking(guarded, false) : vertx.executeBlocking(guarded, false);
        f.onComplete(ar -> {
            if (waits.getAndSet(false)) state.longTextDequeued();  // never started (the lane was closed)
            try {
                if (ar.failed() && ar.cause() instanceof ClientGone)
                    clientGone(ctx, generation, choices, "before the request was tokenised", settled);
                else if (!settled[0]) {
                    settled[0] = true;
                    answer(ctx, ar, then);
                }
            } finally {
                state.exchangeClosed();  // after then: a generation's Exchange has counted itself, so no gap at zero
            }
        });
    }

    /** Retry-After (s) of a body refused because the long-text lane's queue is full (its tokenisations take seconds). */
    static final int LONG_TEXT_RETRY_SECONDS = 5;

    /**
     * Counts a body that is about to wait for the long-text lane against {@code limits.maxQueue}, with the requests
     * waiting in the engine's queue: while it waits, its body (up to server.maxBodyBytes) and its parsed request stay
     * in the heap, so without a bound many large bodies would pile up there. Only bodies beyond the lane's free threads
     * wait: one that finds a thread free starts at once, also with {@code limits.maxQueue} 0 (it was refused there).
     * @throws ApiException 429 queue_full when the lane's waiters and the engine's queue already hold
     *                      {@code limits.maxQueue} requests
     */
    private void queueLongText(RoutingContext ctx) {
        int maxQueue = state.config().maxQueue(), engineWaiting = state.metrics().waiting.get();
        int waiting = Math.max(0, state.longTextQueued() + state.longTextRunning() - LONG_TEXT_THREADS);
        if (waiting + engineWaiting <= maxQueue) return;
        state.longTextDequeued();
        // with no queue nothing waits: the refusal says the lane is busy, not that 0 requests fill a queue of 0
        String why = maxQueue == 0
                ? "all " + LONG_TEXT_THREADS + " threads tokenising bodies of " + LONG_TEXT_BYTES + " bytes or more are busy"
                        + " and limits.maxQueue is 0, so no request may wait for one"
                : EngineVerticle.plural(waiting - 1, "request") + " of " + LONG_TEXT_BYTES + " bytes or more waiting to"
                        + " be tokenised and " + engineWaiting + " waiting for a slot (limits.maxQueue " + maxQueue + ")";
        LOG.info("{}{} {} rejected with 429: {}; Retry-After {} s", named(ctx), ctx.request().method(), ctx.request().path(), why,
                LONG_TEXT_RETRY_SECONDS);
        throw new ApiException(429, "rate_limit_exceeded", "queue_full", null, "the server is busy: " + why
                + "; retry after " + LONG_TEXT_RETRY_SECONDS + " s", LONG_TEXT_RETRY_SECONDS);
    }

    /** Reads a /detokenize body ({@link BodyReader}): its token ids, each checked against the vocabulary. */
    private int[] readDetokenize(JsonNode b, Reading reading) {
        ModelInfo m = ready();
        if (!b.isObject()) throw ApiException.bodyNotAnObject(b);
        Requests.checkModel(b, m);
        JsonNode t = b.get("tokens");
        if (t == null || t.isNull()) throw ApiException.badField("tokens", "is required (an array of token ids)");
        if (!t.isArray()) throw ApiException.badField("tokens", "must be an array of token ids");
        Tokenizer tok = m.tokenizer();
        int[] ids = new int[t.size()];
        for (int i = 0; i < ids.length; i++) {
            JsonNode x = t.get(i);
            // a number past the double range (1E400) is an integer too large, not a fraction
            boolean overflowed = Requests.beyondDouble(x);
            // an integral number however written (1000, 1e3, 1000.0), as for every integer field: JSON has one number type
            if (!overflowed && !Json.isIntegral(x))
                throw ApiException.badField("tokens[" + i + "]", "must be an integer token id, got " + Requests.describe(x));
            Integer id = Requests.intValue(x);
            if (id == null || id < 0 || id >= tok.vocabSize())
                throw ApiException.badField("tokens[" + i + "]", "is out of range: a token id is in [0, " + tok.vocabSize()
                        + "), got " + Requests.shown(x));
            ids[i] = id;
        }
        ignoredFields(reading, b, null);
        return ids;
    }

    private void detokenize(RoutingContext ctx, int[] ids) {
        Tokenizer tok = ready().tokenizer();
        vertx.executeBlocking(() -> tok.decode(ids), false).onComplete(ar -> {
            if (ar.failed()) {
                error(ctx, asApi(ar.cause()));
                return;
            }
            json(ctx, 200, Json.object().put("content", ar.result()));
        });
    }

    /**
     * Deals with the fields of a body that its endpoint did not read ({@link RequestFields}); called after the
     * handler's last read of the body and before its answer's head goes out. They are refused with 400 under
     * server.rejectUnknownFields; otherwise the request goes on, a warning names them, and so does the
     * {@link RequestFields#HEADER} header of the answer (streamed or not), so that a client can see a misspelling
     * that the answer alone would hide.
     * The header is put on the answer once the reading has ended ({@link #afterReading}).
     * @param requestId the generation's id for the log, or null to name the request by its id ({@link #requestIds}), if any
     */
    private void ignoredFields(Reading reading, JsonNode body, String requestId) {
        ignoredFields(reading, body, requestId, null);
    }

    /**
     * {@link #ignoredFields(Reading, JsonNode, String)} of another API's body, with that API's hints for the fields it
     * has not ({@link TranslatedRequest#fieldHints}).
     * @param translation the body's translation, or null for a chat or completions body
     */
    private void ignoredFields(Reading reading, JsonNode body, String requestId, TranslatedRequest translation) {
        RequestFields.Report r = translation == null ? RequestFields.report(body, RequestFields.VLLM_UNSUPPORTED)
                : RequestFields.report(body, translation.fieldHints(), translation.acceptedFields(), translation.ignoredWhenTrue());
        if (r.isEmpty()) return;
        if (state.config().rejectUnknownFields()) throw RequestFields.refusal(r);
        String list = RequestFields.list(r);
        // a generation is named as the engine's lines name it, with the client's id after its completion id
        String named = requestId != null ? EngineRequest.named(requestId, reading.clientId) : reading.requestId;
        LOG.warn("{}{} {}: ignored {}: {}", named != null ? "request " + named + ": " : "", reading.method,
                reading.path, r.total() == 1 ? "an unknown field" : r.total() + " unknown fields", list);
        reading.ignoredFields = list;
    }

    static ApiException asApi(Throwable t) {
        if (t instanceof ApiException e) return e;
        if (t instanceof ChatFormatException e) return Requests.chatError(e);
        if (t instanceof IllegalArgumentException e)
            return new ApiException(400, "invalid_request_error", null, null, e.getMessage(), null);
        LOG.error("internal error", t);
        return new ApiException(500, "server_error", "internal_error", null, "internal error: " + t, null);
    }

    // ------------------------------------------------------------------------------------------------ generation

    /** How many tools a chat body gives (the chat template writes each into the prompt). */
    private static int toolCount(JsonNode body) {
        JsonNode tools = body.get("tools");
        return tools != null && tools.isArray() ? tools.size() : 0;
    }

    /** Whether a chat body gives a response_format schema (the chat template writes it into the prompt). */
    private static boolean writesSchema(JsonNode body) {
        JsonNode rf = body.get("response_format");
        return rf != null && rf.isObject() && "json_schema".equals(rf.path("type").asText(null));
    }

    /**
     * One part of a prompt, as a refusal that states the prompt counts it.
     * @param name   how a message names it ("the 3 tools", "response_format's schema", "the messages", "the prompt")
     * @param field  the request field it comes from, the one a refusal names where this part is most of the prompt
     * @param tokens its tokens as the chat template writes it
     */
    record PromptPart(String name, String field, int tokens) {}

    /**
     * A chat prompt's tokens by what they come from, for a refusal that states the prompt (one over the context, a
     * max_tokens past the room it leaves): the tools and the response_format schema (where the body gives them), each
     * counted by rendering the prompt without it, then the messages, the rest. A large tool list or schema can fill the
     * context while the messages are short. Renders the prompt up to twice more: only on a refusal's path.
     */
    private static List<PromptPart> chatParts(Tokenizer tok, Requests.Gen g, JsonNode body, int[] ids) {
        List<PromptPart> parts = new java.util.ArrayList<>();
        int tools = toolCount(body), rest = ids.length;
        if (tools > 0) {
            int without = tok.encode(ChatEncoder.render(g.messages(), g.options().withTools(null))).length;
            parts.add(new PromptPart(tools == 1 ? "the tool" : "the " + tools + " tools", "tools", rest - without));
            rest = without;
        }
        if (writesSchema(body)) {
            int without = tok.encode(ChatEncoder.render(g.messages(), g.options().withTools(null).withResponseFormat(null))).length;
            parts.add(new PromptPart("response_format's schema", "response_format", rest - without));
            rest = without;
        }
        parts.add(new PromptPart("the messages", "messages", rest));
        return parts;
    }

    /**
     * The part a refusal names, what to shorten: one written beside the messages (tools, a schema) that is most of the
     * prompt rather than the messages the client would look at first, else the last part (the messages, the prompt).
     */
    private static PromptPart largestPart(List<PromptPart> parts, int prompt) {
        for (PromptPart x : parts.subList(0, parts.size() - 1)) if (2L * x.tokens() > prompt) return x;
        return parts.getLast();
    }

    /**
     * A generation's body as read: the request, its prediction's text, cache_prompt, its id, the model, and the
     * translation of another API's body (null for chat and completions).
     */
    private record GenerationRead(JsonNode body, boolean chat, Requests.Gen g, String predictionText, boolean cachePrompt,
                                  String id, ModelInfo m, TranslatedRequest translation) {}

    /**
     * Reads a generation's body ({@link BodyReader}): every field checked, a prompt too long in characters refused.
     * @param translator for another API's body (the Anthropic Messages API, OpenAI's Responses API), its translation
     *                   into the chat request it means, which is read as any chat request and answered in that API's
     *                   shapes; null for a chat or completions body
     */
    private GenerationRead readGeneration(JsonNode clientBody, Reading reading, boolean chat,
                                          java.util.function.Function<JsonNode, TranslatedRequest> translator) {
        if (state.draining()) throw shuttingDown();
        ModelInfo m = ready();
        ServerConfig cfg = state.config();
        TranslatedRequest translation = translator == null ? null : translator.apply(clientBody);
        // the body the endpoint's parser reads; unknown fields are judged on the client's own body
        JsonNode body = translation != null ? translation.chat() : clientBody;
        Requests.Gen g = parse(body, chat, m, cfg, translation);
        if (chat) {
            try {
                // chat's way out (a prefix) is not another API's: a translated body is told to end with the user's turn
                Requests.checkAnswerable(g, translation == null);
            } catch (ApiException e) {
                throw renamed(translation, e);
            }
        }
        String predictionText = Requests.prediction(body, chat);
        boolean cachePrompt = Requests.bool(body, "cache_prompt", true);
        String id = (translation != null ? translation.idPrefix() : chat ? "chatcmpl-" : "cmpl-") + randomId();
        reading.generationId = id;
        ignoredFields(reading, clientBody, id, translation);
        // the notes in the client's API's words (text.format on the Responses API), its own id beside the generation's
        List<String> notes = translation == null ? g.notes() : g.notes().stream().map(translation::renamedNote).toList();
        Requests.logNotes(notes, EngineRequest.named(id, reading.clientId));
        reading.notes = Requests.notesHeader(notes);
        // the prompt's own characters (a chat template adds more) against the bound, before it is tokenised, so that a
        // prompt it refuses does not wait for a tokenising thread
        try {
            checkChars(m.tokenizer(), chat ? null : g.promptText(), chat ? g.messages() : null, state.maxContext(),
                    chat ? "messages" : "prompt");
        } catch (ApiException e) {
            throw renamed(translation, e);
        }
        return new GenerationRead(body, chat, g, predictionText, cachePrompt, id, m, translation);
    }

    /** A chat error named as the client sent the fields where its body was translated (t not null), else as it is. */
    private static ApiException renamed(TranslatedRequest t, ApiException e) {
        return t == null ? e : t.renamed(e);
    }

    private void generate(RoutingContext ctx, GenerationRead read) {
        JsonNode body = read.body();
        boolean chat = read.chat(), cachePrompt = read.cachePrompt();
        Requests.Gen g = read.g();
        String predictionText = read.predictionText(), id = read.id();
        long t0 = ctx.get("t0");
        String model = read.m().id();
        Tokenizer tok = read.m().tokenizer();
        tokenizing(ctx, id, g.n(), renaming(read.translation(), () -> {
            // the first constrained request builds the tokenizer's token trie (about a second) here, off the engine thread
            if (g.grammar() != null) io.ds4j.grammar.TokenTrie.of(tok);
            int ctxLimit = state.maxContext();
            if (chat) {
                // what the messages (and tools, schema) hold is plain text: a user cannot write a role marker or an end of
                // sentence into the prompt; only the template's own markers are control tokens
                int[] ids = chatPrompt(tok, g.messages(), g.options());
                // the prompt's parts where the tools or a schema are written in and the prompt will be refused, stated by
                // its parts: over the context, or under a client's max_tokens past the room it leaves (the two refusals
                // below, the same conditions)
                boolean refused = ids.length >= ctxLimit
                        || g.maxTokensParam() != null && (long) ids.length + g.params().maxTokens() > ctxLimit;
                List<PromptPart> parts = refused && (toolCount(body) > 0 || writesSchema(body)) ? chatParts(tok, g, body, ids) : null;
                return new Encoded(ids, null, null, encodePrediction(tok, predictionText, ids.length, ctxLimit), parts);
            }
            String echo = !g.echo() ? null : g.promptText() != null ? g.promptText() : tok.decode(g.promptIds());
            int[] ids;
            boolean addedBos = false;
            if (g.promptIds() != null) {
                ids = g.promptIds();
            } else {
                // like HF/vLLM for DeepSeek: a completion prompt starts with BOS unless it already does. Its control-token
                // strings are control tokens: the prompt is the model's whole input as the client writes it (a chat
                // template it rendered itself, a fill-in-the-middle prompt), with no turns of others in it to protect
                addedBos = !g.promptText().startsWith(V4Format.BOS);
                ids = tok.encode(addedBos ? V4Format.BOS + g.promptText() : g.promptText());
            }
            List<String> promptTokens = null;
            if (echo != null && g.logprobs()) {
                // the echoed prompt's tokens, as listed in logprobs (not the BOS the server added: it is not echoed)
                promptTokens = new java.util.ArrayList<>(ids.length);
                for (int i = addedBos ? 1 : 0; i < ids.length; i++)
                    promptTokens.add(new String(tok.tokenBytes(ids[i]), StandardCharsets.UTF_8));
            }
            return new Encoded(ids, echo, promptTokens, encodePrediction(tok, predictionText, ids.length, ctxLimit), null);
        }), enc -> {
            if (state.draining()) throw shuttingDown();  // tokenised while the shutdown began
            int[] prompt = enc.ids();
            int ctxLimit = state.maxContext();
            // echo with max_tokens 0 generates nothing: the prompt may fill the context; anything else needs a token's room
            boolean echoOnly = !chat && g.echo() && g.params().maxTokens() == 0;
            int fit = echoOnly ? ctxLimit : ctxLimit - 1;
            // the prompt as the refusals below state it: by its parts where tools or a schema are written in, else whole
            List<PromptPart> parts = enc.parts() != null ? enc.parts()
                    : List.of(new PromptPart(chat ? "the messages" : "the prompt", chat ? "messages" : "prompt", prompt.length));
            PromptPart largest = largestPart(parts, prompt.length);
            if (prompt.length > fit) {
                String account = parts.size() == 1 ? "" : " as the chat template writes it ("
                        + String.join(", ", parts.stream().map(x -> x.name() + ": " + x.tokens() + " tokens").toList()) + ")";
                error(ctx, renamed(read.translation(), ApiException.bad(largest.field(), "context_length_exceeded",
                        largest.field() + ": the prompt is " + prompt.length + " tokens" + account + "; this server's context limit is " + ctxLimit
                        + " tokens (prompt + output), so at most " + fit + " prompt tokens fit"
                        + (echoOnly ? " (echo with max_tokens 0 generates nothing)" : ""))));
                return;
            }
            int[] predicted = enc.prediction();
            if (predicted != null && predicted.length > ctxLimit - prompt.length) {
                error(ctx, ApiException.bad("prediction", "context_length_exceeded", "prediction: the prediction is "
                        + predicted.length + " tokens; after the " + prompt.length + "-token prompt this server's context limit of "
                        + ctxLimit + " tokens leaves room for at most " + (ctxLimit - prompt.length) + " output tokens"));
                return;
            }
            // a client's own max_tokens past the room the context leaves is refused, as vLLM and OpenAI refuse it: cut
            // without a word, the answer would end with "length" short of what was asked. The server's default is cut to
            // that room instead, and to the room the cache leaves (model.cacheTokens), as a client that sent none cannot
            // be refused for it; a client's own max_tokens past the cache is refused by the engine's admission, naming
            // it (at least 1: the engine then refuses a prompt that leaves the cache no room, naming the prompt)
            int room = ctxLimit - prompt.length, cache = state.config().cacheTokens();
            String mt = g.maxTokensParam();
            if (mt != null && g.params().maxTokens() > room) {
                error(ctx, renamed(read.translation(), ApiException.bad(mt, "context_length_exceeded", mt + ": this model's"
                        + " maximum context length is " + ctxLimit + " tokens. However, you requested "
                        + ((long) prompt.length + g.params().maxTokens()) + " tokens ("
                        + String.join(", ", parts.stream().map(x -> x.tokens() + " in " + x.name()).toList()) + ", "
                        + g.params().maxTokens() + " in the completion). Please reduce the length of " + largest.name()
                        + " or completion: at most " + room + " completion tokens fit after this prompt")));
                return;
            }
            // likewise a min_tokens past that room, which could never be met: the answer would end at the context's end,
            // short of it (with a max_tokens of its own the client was told above, as min_tokens is at most max_tokens)
            if (g.minTokens() > room) {
                error(ctx, ApiException.bad("min_tokens", "context_length_exceeded", "min_tokens: the prompt is "
                        + prompt.length + " tokens and this server's context limit is " + ctxLimit + " tokens (prompt + output),"
                        + " so at most " + room + " tokens can be generated after it, fewer than min_tokens (" + g.minTokens() + ")"));
                return;
            }
            if (mt == null && cache > 0) {
                int cacheRoom = cache - prompt.length;
                // likewise under the cache's room, which cuts the server's default max_tokens (a client's own max_tokens
                // past it is refused by admission); a prompt the cache cannot hold at all is refused there, naming the prompt
                if (cacheRoom >= 1 && g.minTokens() > cacheRoom) {
                    error(ctx, ApiException.bad("min_tokens", "context_length_exceeded", "min_tokens: the server's cache of " + cache
                            + " tokens (model.cacheTokens) leaves room for " + cacheRoom + " tokens after the "
                            + prompt.length + "-token prompt, fewer than min_tokens (" + g.minTokens() + ")"));
                    return;
                }
                room = Math.max(1, Math.min(room, cacheRoom));
            }
            // only the server's default can be past the room here: a client's own max_tokens fits, or was refused above
            int maxTokens = Math.min(g.params().maxTokens(), room);
            EngineRequest req = new EngineRequest(id, chat, chat && ChatEncoder.answerStartsInReasoning(g.messages(), g.options()), prompt,
                    g.params().withMaxTokens(maxTokens), g.specQ(), ctxLimit, t0, "ds4j.out." + id, g.skipSpecialTokens(),
                    enc.promptTokens() != null ? g.topLogprobs() : -1).maxTokensField(g.maxTokensParam())
                    // a scored prompt needs every prompt row's logits: it prefills in full (it may still leave snapshots)
                    .cachePrompt(cachePrompt && enc.promptTokens() == null).constrain(g.grammar()).predict(predicted)
                    .limitReasoning(g.reasoningBudget()).stopTokens(g.stopTokenIds(), g.includeStopStr())
                    .minTokens(g.minTokens()).clientId(ctx.get(CLIENT_ID_KEY));
            // n > 1: each choice is a request of its own to the engine (its own sequence, sampler and draft)
            List<EngineRequest> reqs = new java.util.ArrayList<>(g.n());
            if (g.n() == 1) reqs.add(req);
            else for (int i = 0; i < g.n(); i++) reqs.add(req.choice(i, id + "-" + i));
            new Exchange(ctx, g, reqs, id, model, enc.echo(), enc.promptTokens(), read.translation()).start();
        });
    }

    /**
     * Says, once per request ({@code settled}), that its client went away before its tokenisation ended; a generation
     * so dropped is counted as cancelled, as those cancelled later are: each of its choices once.
     * @param generation the generation's request id, or null for a request that generates nothing (tokenize, count_tokens)
     * @param choices    the generation's choices
     * @param when "before the request was tokenised" or "while the request was being tokenised"
     */
    private void clientGone(RoutingContext ctx, String generation, int choices, String when, boolean[] settled) {
        if (settled[0]) return;
        settled[0] = true;
        if (generation != null) {
            for (int i = 0; i < choices; i++) state.metrics().cancelled();
            // led by its id, as the generation's other lines are, so that a grep for the id finds how it ended
            LOG.info("request {}: {} {}: the client went away {}; dropped before it reached the engine",
                    EngineRequest.named(generation, ctx.get(CLIENT_ID_KEY)), ctx.request().method(), ctx.request().path(), when);
        } else {
            LOG.info("{}{} {}: the client went away {}; nothing to answer", named(ctx), ctx.request().method(),
                    ctx.request().path(), when);
        }
    }

    /** tokenizing's end: then with the result, or the failure answered. */
    private <T> void answer(RoutingContext ctx, io.vertx.core.AsyncResult<T> ar, Consumer<T> then) {
        if (ar.failed()) {
            error(ctx, asApi(ar.cause()));
            return;
        }
        try {
            then.accept(ar.result());
        } catch (RuntimeException e) {
            error(ctx, asApi(e));
        }
    }

    /** A tokenizer and the length of its longest token in bytes (the last one asked about). */
    private record Longest(Tokenizer tok, int bytes) {}

    private volatile Longest longest;

    /**
     * The prediction's tokens (plain text of the answer: no template, no BOS), or null without one or when the prompt
     * alone exceeds the context (that error is reported). A prediction too long in characters to fit the room the
     * context leaves after the prompt is refused before it is tokenised, so a huge one costs no tokenisation: its text
     * is the concatenation of its tokens' bytes (no normaliser in a DeepSeek tokenizer), each token at most the
     * tokenizer's longest, and a UTF-8 text has at least as many bytes as UTF-16 characters; so it has at least
     * chars / longest tokens. One within that bound is tokenised and checked exactly by the caller.
     * @throws ApiException 400 context_length_exceeded naming {@code prediction}
     */
    private int[] encodePrediction(Tokenizer tok, String text, int promptTokens, int ctxLimit) {
        if (text == null || promptTokens >= ctxLimit) return null;
        long room = ctxLimit - promptTokens, most = longestTokenBytes(tok);
        if (text.length() > room * most)
            throw ApiException.bad("prediction", "context_length_exceeded", "prediction: the prediction is " + text.length()
                    + " characters, more than the " + room + " tokens the context limit of " + ctxLimit + " leaves after the "
                    + promptTokens + "-token prompt can hold (a token holds at most " + most + " bytes)");
        return tok.encode(text);
    }

    /**
     * Refuses a prompt whose characters cannot fit the context limit, on the event loop before it is tokenised (a huge
     * one would cost seconds of tokenizer time): it has at least chars / longest tokens, as for a prediction
     * ({@link #encodePrediction}). The longest token is found once per tokenizer (a few ms).
     * @param text     the prompt's text, or null for chat messages
     * @param messages chat messages (their contents count; a template adds more), or null
     * @throws ApiException 400 context_length_exceeded naming {@code field}
     */
    private void checkChars(Tokenizer tok, String text, List<ChatMessage> messages, int ctxLimit, String field) {
        long chars = text != null ? text.length() : 0;
        if (messages != null) for (ChatMessage msg : messages) chars += msg.content() != null ? msg.content().length() : 0;
        long most = longestTokenBytes(tok);
        if (chars > ctxLimit * most)
            throw ApiException.bad(field, "context_length_exceeded", field + ": the prompt is " + chars
                    + " characters, more than this server's context limit of " + ctxLimit + " tokens can hold (a token"
                    + " holds at most " + most + " bytes)");
    }

    private int longestTokenBytes(Tokenizer tok) {
        Longest known = longest;
        if (known != null && known.tok() == tok) return known.bytes();
        int m = 1;
        for (int id = 0; id < tok.vocabSize(); id++) {
            try {
                m = Math.max(m, tok.tokenBytes(id).length);
            } catch (IllegalArgumentException unused) {
                // an id without a token (a gap in the vocabulary)
            }
        }
        longest = new Longest(tok, m);
        return m;
    }

    /**
     * A tokenised prompt, the text to echo (completions with echo), the tokenised prediction (or null), and a chat
     * prompt's parts ({@link #chatParts}) where tools or a schema are written into one that is refused (else null).
     */
    private record Encoded(int[] ids, String echo, List<String> promptTokens, int[] prediction, List<PromptPart> parts) {}

    /**
     * A chat request's prompt tokens: its messages, tools and options as the chat template writes them (only the
     * template's own markers are control tokens). Chat and Messages generation, /tokenize and count_tokens count alike.
     */
    private static int[] chatPrompt(Tokenizer tok, List<ChatMessage> messages, ChatOptions opts) {
        return tok.encode(ChatEncoder.render(messages, opts));
    }

    /** Requests.parse, its errors named as the client sent the fields where the body was translated (or null). */
    private static Requests.Gen parse(JsonNode body, boolean chat, ModelInfo m, ServerConfig cfg, TranslatedRequest t) {
        try {
            return Requests.parse(body, chat, m, cfg);
        } catch (ApiException e) {
            throw renamed(t, e);
        }
    }

    /** Work whose errors name chat fields, naming them as the client sent them where the body was translated. */
    private static <T> java.util.concurrent.Callable<T> renaming(TranslatedRequest t, java.util.concurrent.Callable<T> work) {
        if (t == null) return work;
        return () -> {
            try {
                return work.call();
            } catch (ApiException | IllegalArgumentException e) {
                throw t.renamed(asApi(e));
            }
        };
    }

    /**
     * {@code POST /v1/messages/count_tokens} ({@code {"input_tokens": N}}) and {@code POST /v1/responses/input_tokens}
     * ({@code {"object": "response.input_tokens", "input_tokens": N}}): the prompt tokens of the same body sent to
     * {@code /v1/messages} or {@code /v1/responses} (read and checked the same way), without generating.
     *
     * @param answer the answer's body for the count
     */
    private void countTokens(RoutingContext ctx, CountRead c, java.util.function.IntFunction<ObjectNode> answer) {
        Tokenizer tok = c.m().tokenizer();
        tokenizing(ctx, null, 0, renaming(c.translation(), () -> chatPrompt(tok, c.g().messages(), c.g().options()).length),
                n -> json(ctx, 200, answer.apply(n)));
    }

    /** A token-counting body as read: the chat request it translates into, its translation and the model. */
    private record CountRead(Requests.Gen g, TranslatedRequest translation, ModelInfo m) {}

    /**
     * Reads a token-counting body ({@link BodyReader}) as its API's generation route reads one.
     *
     * @param translator the body's translation into the chat request it means
     */
    private CountRead readCountTokens(JsonNode body, Reading reading, java.util.function.Function<JsonNode, TranslatedRequest> translator) {
        ModelInfo m = ready();
        TranslatedRequest t = translator.apply(body);
        Requests.Gen g = parse(t.chat(), true, m, state.config(), t);
        ignoredFields(reading, body, null, t);
        try {
            checkChars(m.tokenizer(), null, g.messages(), state.maxContext(), "messages");
        } catch (ApiException e) {
            throw t.renamed(e);
        }
        return new CountRead(g, t, m);
    }

    /** 24 random letters and digits: the random part of a request's id (and of the items of an answer). */
    static String randomId() {
        String a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        ThreadLocalRandom r = ThreadLocalRandom.current();
        StringBuilder s = new StringBuilder(24);
        for (int i = 0; i < 24; i++) s.append(a.charAt(r.nextInt(a.length())));
        return s.toString();
    }

    /** An engine event that came before its request's admission was known, with the index of its choice. */
    private record Early(int choice, EngineEvent event) {}

    /**
     * One generation request in flight: submission, then the engine's events written to the client. A request asking
     * for several choices ({@code n} > 1) has one engine request per choice, submitted together
     * ({@link EngineRequest.Group}); their events interleave on the response, each chunk carrying its choice's index,
     * and the answer ends once the last choice ended, or as soon as one failed (the others are then cancelled, which
     * frees their engine state).
     */
    private final class Exchange {
        final RoutingContext ctx;
        final HttpServerResponse resp;
        final Requests.Gen g;
        /** The choices' engine requests in index order (one where n = 1). */
        final List<EngineRequest> reqs;
        /** The first choice's request (the only one where n = 1). */
        final EngineRequest req;
        /** The response's id: the single request's own where n = 1; its choices' ids add "-" and their index. */
        final String id;
        /** The response's id as log lines name it: the client's X-Request-Id after it where one was sent. */
        final String named;
        final String model;
        final String echo;
        final List<String> promptTokens;
        final long created = System.currentTimeMillis() / 1000;
        /** The translation of another API's body, answered in that API's shapes; null for chat and completions. */
        final TranslatedRequest translation;
        final List<io.vertx.core.eventbus.MessageConsumer<Object>> consumers = new java.util.ArrayList<>();
        /** One writer per choice, in index order. */
        final AnswerWriter[] outs;
        /** Sent to the engine (from then on the engine says what became of it); admitted by it; answered or gone. */
        boolean submitted, admitted, completed;
        /** Per choice, completions with echo and logprobs: the echo waits for the prompt's scores. */
        final boolean[] scoresPending;
        /** Per choice of a request with several: its end, once it came; and how many came. */
        final EngineEvent.Done[] dones;
        int doneCount;
        /** A stream's limits.streamBufferBytes when it started (a reload applies to later streams). */
        int streamBufferBytes;
        java.util.List<Early> early = new java.util.ArrayList<>();

        /** @param id the response's id */
        Exchange(RoutingContext ctx, Requests.Gen g, List<EngineRequest> reqs, String id, String model, String echo,
                 List<String> promptTokens, TranslatedRequest translation) {
            this.translation = translation;
            this.promptTokens = promptTokens;
            this.ctx = ctx;
            this.resp = ctx.response();
            this.g = g;
            this.reqs = reqs;
            this.req = reqs.getFirst();
            this.id = id;
            this.named = EngineRequest.named(id, ctx.get(CLIENT_ID_KEY));
            this.model = model;
            this.echo = echo;
            this.outs = new AnswerWriter[reqs.size()];
            this.scoresPending = new boolean[reqs.size()];
            this.dones = new EngineEvent.Done[reqs.size()];
        }

        /** Whether the request asks for several choices (the answer then gathers them; n = 1 writes as it always did). */
        private boolean several() {
            return reqs.size() > 1;
        }

        void start() {
            if (resp.closed()) {
                dropped("the client went away before it was submitted");
                return;
            }
            // counted until its response ends or its connection closes: shutdown waits for the last ones to go out
            state.exchangeOpened();
            io.vertx.core.Context here = vertx.getOrCreateContext();
            for (EngineRequest r : reqs) state.generationOpened(r.id(), why -> here.runOnContext(v -> endByServer(why)));
            ctx.addEndHandler(v -> {
                state.exchangeClosed();
                for (EngineRequest r : reqs) state.generationClosed(r.id());
            });
            Handler<Void> gone = v -> clientGone();
            resp.closeHandler(gone);
            // a translated API has no n: its one choice is written in its shapes
            for (int i = 0; i < outs.length; i++)
                outs[i] = translation != null ? translation.writer(req.id(), created, model, g, req.prompt.length, req.params.maxTokens())
                        : new ResponseBuilder(id, created, model, g.chat(), g.stream(), g.includeUsage(), g.continuousUsage(), req.prompt.length)
                        .forcedToolCall(g.grammar() != null && g.grammar().isToolCall()).logprobsAsked(g.logprobs()).choice(i);
            // an error after the stream started ends it with the writer's frame (error()); the choices' frames are alike
            ctx.put(WRITER, outs[0]);
            List<Future<Void>> registered = new java.util.ArrayList<>();
            for (int i = 0; i < reqs.size(); i++) {
                int choice = i;
                var consumer = vertx.eventBus().localConsumer(reqs.get(i).address, msg -> onEvent(choice, (EngineEvent) msg.body()));
                consumers.add(consumer);
                registered.add(consumer.completion());
            }
            Future.all(registered).onComplete(reg -> {
                if (completed) return;
                submitted = true;
                // one message for all the choices: the engine admits them together or refuses them together
                Object submission = several() ? new EngineRequest.Group(reqs) : req;
                if (several())
                    LOG.info("request {}: n = {}: its choices are submitted together as requests {} to {}", named, reqs.size(),
                            req.id(), reqs.getLast().id());
                vertx.eventBus().<Object>request(EngineVerticle.SUBMIT, submission, SUBMIT).onComplete(ar -> {
                    if (completed) return;
                    if (ar.failed()) {
                        finish();
                        error(ctx, new ApiException(503, "unavailable_error", "engine_unavailable", null,
                                "the engine did not accept the request: " + ar.cause().getMessage(), 5));
                        return;
                    }
                    Admission a = (Admission) ar.result().body();
                    if (!a.accepted()) {
                        finish();
                        // the admission names chat's fields (max_tokens past the cache), as the client sent them
                        error(ctx, renamed(translation, a.error()));
                        return;
                    }
                    admitted = true;
                    if (outs[0] instanceof AnthropicResponse messages && a.cachedTokens() >= 0) messages.cached(a.cachedTokens());
                    if (promptTokens != null) {
                        // echo with logprobs: the echo goes out with the prompt's scores, once prefill has made them
                        java.util.Arrays.fill(scoresPending, true);
                    }
                    if (g.stream()) {
                        // Netty queues what the socket does not take; past this many bytes the queue reports full
                        streamBufferBytes = state.config().streamBufferBytes();
                        resp.setWriteQueueMaxSize(streamBufferBytes);
                        resp.setChunked(true).setStatusCode(200)
                                .putHeader(HttpHeaders.CONTENT_TYPE, "text/event-stream; charset=utf-8")
                                .putHeader(HttpHeaders.CACHE_CONTROL, "no-cache")
                                .putHeader("X-Accel-Buffering", "no");
                        closeAfterUnframedAnswer(ctx);
                        // each choice's first chunk (chat's role, completions' echo) before any of its text
                        for (int i = 0; i < outs.length; i++) if (!scoresPending[i]) write(outs[i].start(echo, null));
                    } else if (echo != null && promptTokens == null) {
                        for (AnswerWriter o : outs) o.start(echo, null);
                    }
                    for (Early e : early) onEvent(e.choice(), e.event());
                    early = null;
                });
            });
        }

        void onEvent(int choice, EngineEvent e) {
            if (completed) return;
            if (!admitted) {
                early.add(new Early(choice, e));
                return;
            }
            AnswerWriter out = outs[choice];
            switch (e) {
                case EngineEvent.PromptLogprobs p -> {
                    scoresPending[choice] = false;
                    // the listed prompt tokens are the echoed ones: a BOS the server added is scored by nobody
                    List<EngineEvent.TokenLogprob> scored = p.tokens().subList(p.tokens().size() - promptTokens.size(), p.tokens().size());
                    String first = out.start(echo, scored);
                    if (g.stream()) write(first);
                }
                case EngineEvent.Delta d -> {
                    // the engine's flush to the bytes handed to the socket: what a stream's gaps gain past the engine
                    Future<Void> w = write(out.delta(d));
                    if (w != null && g.stream()) w.onSuccess(v -> state.metrics().delivery(System.nanoTime() - d.flushedNanos()));
                }
                case EngineEvent.Done d when several() -> choiceDone(choice, d);
                case EngineEvent.Done d -> {
                    finish();
                    if (g.stream()) {
                        write(out.done(d));
                        resp.end();
                    } else {
                        json(ctx, 200, out.full(d));
                    }
                }
                case EngineEvent.Failed f -> {
                    finish();
                    // one failed choice ends the answer: the others would generate for nobody
                    if (several()) cancelOthers(choice, f);
                    // requests the shutdown ended were counted by the engine (refused when queued, aborted when running),
                    // and so were those whose output constraint grew past its limit (the engine logged why)
                    error(ctx, f.status() < 500 ? new ApiException(f.status(), "invalid_request_error", f.code(), null, f.message(), null)
                            : f.status() == 503 ? new ApiException(503, "unavailable_error", f.code(), null, f.message(), f.retryAfterSeconds())
                            : new ApiException(f.status(), "server_error", f.code() != null ? f.code() : "internal_error", null, f.message(), null),
                            SHUTTING_DOWN.equals(f.code()) || EngineVerticle.GRAMMAR_TOO_COMPLEX.equals(f.code()));
                }
            }
        }

        /**
         * The end of one choice of several: its finish chunk goes out at once (streaming); once every choice ended, the
         * stream's usage chunk (all choices' usage) and [DONE], or the whole answer with the choices in index order.
         */
        private void choiceDone(int choice, EngineEvent.Done d) {
            dones[choice] = d;
            doneCount++;
            ResponseBuilder b = (ResponseBuilder) outs[choice];
            if (doneCount < dones.length) {
                if (g.stream()) write(b.finish(d));
                return;
            }
            finish();
            List<EngineEvent.Done> ends = List.of(dones);
            if (g.stream()) {
                write(b.finish(d) + b.end(Usage.ofChoices(ends.stream().map(EngineEvent.Done::usage).toList())));
                resp.end();
            } else {
                List<ResponseBuilder> builders = new java.util.ArrayList<>(outs.length);
                for (AnswerWriter o : outs) builders.add((ResponseBuilder) o);
                json(ctx, 200, ResponseBuilder.full(builders, ends));
            }
        }

        /** After choice {@code failed} failed: asks the engine to stop the choices that have not ended, freeing their state. */
        private void cancelOthers(int failed, EngineEvent.Failed f) {
            // the shutdown ends every request itself (the queued at once, the running at the grace period's end): only
            // a choice still running may need stopping, so that its slot is free before the grace period ends
            boolean shutdown = SHUTTING_DOWN.equals(f.code());
            List<EngineRequest> stopping = new java.util.ArrayList<>();
            for (int i = 0; i < reqs.size(); i++) {
                if (i == failed || dones[i] != null) continue;
                EngineRequest r = reqs.get(i);
                if (!shutdown || state.runs(r.id())) stopping.add(r);
            }
            if (stopping.isEmpty()) return;
            // said before the cancels are raised: the engine thread may see a flag and log its own line at once
            LOG.info("request {}: choice {} ended with {}; asking the engine to stop its {} at the next step boundary", named,
                    failed, f.status(), stopping.size() == 1 ? "other unfinished choice" : stopping.size() + " other unfinished choices");
            for (EngineRequest r : stopping) {
                r.cancel("choice " + failed + " of its request failed");
                vertx.eventBus().send(EngineVerticle.CANCEL, r.id(), LOCAL);
            }
        }

        /** Writes s to the response; the write's completion, or null when nothing was written. */
        private Future<Void> write(String s) {
            if (s.isEmpty() || resp.ended() || resp.closed()) return null;
            Future<Void> w = resp.write(s);
            // a client that stops reading would otherwise have its whole answer buffered here while it runs on
            if (!completed && g.stream() && resp.writeQueueFull()) notReading();
            return w;
        }

        /**
         * A streaming client that does not read: more than limits.streamBufferBytes wait unsent. The request stops as
         * for a disconnect (its engine slot is freed at the next step boundary) and the connection is closed.
         */
        private void notReading() {
            // said before the cancel, as for a disconnect: the engine's own line comes after it
            LOG.warn("request {}: the client is not reading its stream: more than {} bytes wait unsent (limits.streamBufferBytes);"
                    + " asking the engine to stop {} at the next step boundary and closing the connection", named, streamBufferBytes,
                    several() ? "its choices" : "it");
            stop("the client stopped reading its stream");
            ctx.request().connection().close();
        }

        private void finish() {
            finish(several());
        }

        /**
         * Ends the exchange.
         * @param strays the engine may still send an event (a choice it was still ending, as the shutdown's 503 to each,
         *               sent together; the tokens of the step it was in when the client went away): the consumers stay
         *               a moment to take those quietly (onEvent ignores them once completed), where unregistered ones
         *               have the event bus warn of a discarded message
         */
        private void finish(boolean strays) {
            completed = true;
            if (!strays) for (var c : consumers) c.unregister();
            else vertx.setTimer(STRAY_EVENTS_MS, t -> consumers.forEach(io.vertx.core.eventbus.MessageConsumer::unregister));
        }

        /**
         * The shutdown ends this request here, because the engine did not answer in time (its thread is stuck inside
         * one step): 503 server_shutting_down (an error event on a stream that started), and the engine is asked to
         * drop it should its thread come back.
         */
        void endByServer(String why) {
            if (completed) return;
            List<EngineRequest> running = reqs.stream().filter(r -> state.runs(r.id())).toList();
            stop("the server ended it while shutting down");
            // counted as the engine would: refused while it waited (error() counts and logs that), aborted while it ran
            for (EngineRequest r : running) {
                state.metrics().success("abort");
                LOG.info("request {} ended with 503 by the HTTP side: the server is shutting down and {}", r.named(), why);
            }
            error(ctx, new ApiException(503, "unavailable_error", SHUTTING_DOWN, null, "the server is shutting down and " + why
                    + "; retry on another instance or once it is back", SHUTDOWN_RETRY_SECONDS), !running.isEmpty());
        }

        void clientGone() {
            if (completed) return;
            if (!submitted) {
                finish();
                dropped("the client went away before it was submitted");
                return;
            }
            // a request an engine node relays: its "client" is the node, which closes the connection when the gateway
            // gives the request up, having left why
            String gateway = state.relayStopReason(ctx.request().getHeader(ServerState.RELAY_HEADER));
            String why = gateway != null ? "its cluster gateway stopped it: " + gateway : "the client went away";
            // said before the cancel is raised: the engine thread may see the flag and log its own line at once
            LOG.info("request {}: {}; asking the engine to stop {} at the next step boundary", named,
                    gateway != null ? why : "client disconnected", several() ? "its " + reqs.size() + " choices" : "it");
            stop(why);
        }

        /**
         * Ends a request the engine never got: said in one line and counted as cancelled, as the engine does for those
         * it cancels (each choice, where there are several: each is a request to the engine).
         */
        private void dropped(String why) {
            for (EngineRequest r : reqs) {
                r.cancel(why);
                state.metrics().cancelled();
                state.record(new ServerState.JobRecord(r.id(), "cancelled", r.prompt.length, 0, 0, 0));
                LOG.info("request {} dropped before it reached the engine: {}", r.named(), why);
            }
        }

        /**
         * Ends the exchange and cancels its requests in the engine (it frees their state); a choice that already ended
         * has nothing left there.
         */
        private void stop(String reason) {
            finish(true);
            for (int i = 0; i < reqs.size(); i++) {
                if (dones[i] != null) continue;
                EngineRequest r = reqs.get(i);
                r.cancel(reason);
                vertx.eventBus().send(EngineVerticle.CANCEL, r.id(), LOCAL);
            }
        }
    }
}
