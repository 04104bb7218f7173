package io.ds4j.server;

import io.ds4j.json.Json;
import io.netty.buffer.ByteBuf;
import io.netty.buffer.Unpooled;
import io.netty.channel.ChannelDuplexHandler;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelPipeline;
import io.netty.channel.ChannelPromise;
import io.netty.handler.codec.DecoderResult;
import io.netty.handler.codec.http.DefaultFullHttpResponse;
import io.netty.handler.codec.http.FullHttpResponse;
import io.netty.handler.codec.http.HttpContent;
import io.netty.handler.codec.http.HttpHeaderNames;
import io.netty.handler.codec.http.HttpHeaderValues;
import io.netty.handler.codec.http.HttpMessage;
import io.netty.handler.codec.http.HttpRequest;
import io.netty.handler.codec.http.HttpResponse;
import io.netty.handler.codec.http.HttpResponseStatus;
import io.netty.handler.codec.http.HttpVersion;
import io.netty.handler.codec.http.LastHttpContent;
import io.netty.util.ReferenceCountUtil;
import io.vertx.core.http.HttpConnection;
import io.vertx.core.http.HttpServerOptions;
import io.vertx.core.http.impl.VertxHttpRequestDecoder;
import io.vertx.core.net.impl.ConnectionBase;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.nio.channels.ClosedChannelException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.function.Consumer;
import java.util.function.IntSupplier;

/**
 * Refuses a request whose body cannot be framed beyond doubt, the ground of request smuggling (a proxy in front that
 * frames the bytes otherwise sees one request where this server sees two): Content-Length together with
 * Transfer-Encoding, a Transfer-Encoding that does not end with {@code chunked} or names it twice, one in an HTTP/1.0
 * request, and a chunked body that cannot be read (a chunk size that is no hexadecimal number, a line too long). Each
 * gets 400 with an error (OpenAI's; a chunked body's refusal takes its path's shape, Anthropic's on the Messages
 * routes) and its connection closed, as RFC 9112 (sections 6.1 and 6.3) asks, since the bytes
 * after it cannot be told from a next request; a transfer coding other than chunked (gzip, ...) gets 501. Netty
 * accepts all of these: it drops the Content-Length of a chunked HTTP/1.1 request and decodes the chunks, takes the
 * Content-Length where the last coding is another, and closes the connection without an answer at a bad chunk.
 *
 * It also refuses a request target that is not printable ASCII ({@link #target}), which the router would misread, and
 * a chunked body whose chunk sizes add up past server.maxBodyBytes (413, at the size that passes it: the routes see a
 * body only as its bytes come).
 *
 * <p>A refused head goes to the front's handler for requests Vert.x could not read, so it is answered as those are
 * ({@link HttpVerticle#answerUndecodable}). A bad chunk comes after its head was handed on: it is answered here, once
 * the answers to the requests before it are written, unless this request's answer has begun (a 413 for a body too large,
 * a 401), after which the connection is closed.
 *
 * <p>Both pieces are Netty handlers put into each connection's pipeline when it opens (the HTTP server's connection
 * handler, before any byte is read): Vert.x has no option for them. The decoder is Vert.x's own with one method
 * overridden, the one Netty provides for a request with both headers.
 */
final class RequestFraming {
    private static final Logger LOG = LoggerFactory.getLogger(RequestFraming.class);
    private static volatile boolean warned;

    private RequestFraming() {}

    /**
     * A request target's path as the router will route it (the query left out, an absolute form's authority too, dot
     * segments and escapes of unreserved characters normalised), so that a refusal here takes the shape the route's
     * own errors take. A path that cannot be normalised is "": it routes nowhere.
     */
    static String routedPath(String uri) {
        int end = uri.length();
        for (char c : new char[] {'?', '#'}) {
            int i = uri.indexOf(c);
            if (i >= 0 && i < end) end = i;
        }
        String p = uri.substring(0, end);
        int scheme = p.indexOf("://");
        if (scheme >= 0) {
            int slash = p.indexOf('/', scheme + 3);
            p = slash < 0 ? "/" : p.substring(slash);
        }
        // the router's own normalisation (RoutingContext.normalizedPath reads the same), from Vert.x's internal package:
        // a Vert.x without it gives "" (the refusal then takes the chat routes' shape), as an undecodable path does
        try {
            return io.vertx.core.internal.net.RFC3986.normalizePath(p);
        } catch (RuntimeException | LinkageError undecodable) {
            return "";
        }
    }

    /**
     * Why a request's framing is refused: the status of the answer, its error code and the reason; for a request line
     * refused whole, its method and target where they could be read (the answer then takes the target's shape, as the
     * route's own errors do: Anthropic's on the Messages routes), else null.
     */
    static final class Refused extends RuntimeException {
        final int status;
        final String code;
        final String method, target;

        Refused(int status, String code, String message) {
            this(status, code, message, null, null);
        }

        Refused(int status, String code, String message, String method, String target) {
            super(message, null, false, false);
            this.status = status;
            this.code = code;
            this.method = method;
            this.target = target;
        }
    }

    private static final String BOTH_LENGTHS = "it has both Content-Length and Transfer-Encoding, so its body's length is"
            + " ambiguous: send one of them";

    /**
     * Puts the checks into a connection's pipeline: its decoder replaced by one that refuses a chunked request with a
     * Content-Length, and a handler in front of Vert.x's. Where the connection is not the kind expected (a Vert.x whose
     * internals changed), says so once at WARN and leaves it as it is.
     * @param options     the options the HTTP server was made with (the decoder's limits)
     * @param maxBodyBytes the current server.maxBodyBytes: a chunked body whose chunk sizes add up past it is refused
     * @param rejected    counts a refused chunked body under its error code
     * @param bodies      the front's error body for a refused chunked body, by the request's path
     */
    static void install(HttpConnection connection, HttpServerOptions options, IntSupplier maxBodyBytes,
                        Consumer<String> rejected, ApiException.Bodies bodies) {
        ChannelPipeline p = connection instanceof ConnectionBase c ? c.channelHandlerContext().pipeline() : null;
        if (p == null || !(p.get("httpDecoder") instanceof VertxHttpRequestDecoder) || p.get("handler") == null) {
            if (!warned) {
                warned = true;
                LOG.warn("this Vert.x's HTTP connections are not built as expected: requests with both Content-Length and"
                        + " Transfer-Encoding, or a malformed chunked body, are handled by Netty's defaults");
            }
            return;
        }
        p.replace("httpDecoder", "httpDecoder", new Decoder(options, maxBodyBytes));
        p.addBefore("handler", "ds4jFraming", new Guard(rejected, bodies));
    }

    /** Chunk sizes of more hex digits than this (leading zeros aside) are past what the decoder reads as a size. */
    private static final int SIZE_DIGITS = 7;

    /**
     * The decoder's state, read to know when the next bytes are a chunk-size line (null where this Netty has no such
     * field: the sizes are then left to Netty alone, said once at WARN).
     */
    private static final java.lang.invoke.VarHandle DECODER_STATE = decoderState();

    private static java.lang.invoke.VarHandle decoderState() {
        try {
            Class<?> owner = io.netty.handler.codec.http.HttpObjectDecoder.class;
            Class<?> state = Class.forName(owner.getName() + "$State");
            return java.lang.invoke.MethodHandles.privateLookupIn(owner, java.lang.invoke.MethodHandles.lookup())
                    .findVarHandle(owner, "currentState", state);
        } catch (ReflectiveOperationException | RuntimeException e) {
            LOG.warn("this Netty's request decoder has no state to read ({}): chunk sizes past 2^31 bytes are left to it", e.toString());
            return null;
        }
    }

    /**
     * Vert.x's request decoder, with a chunked HTTP/1.1 request that also has a Content-Length made invalid, and a chunk
     * size past 2^31 - 1 refused: Netty's reading of a size wraps it into an int without noticing (100000000 reads as 0,
     * the last chunk), so that the bytes of the chunk a proxy in front would read were taken as a next request. A chunk
     * size that takes the body past server.maxBodyBytes is refused too (413), as soon as its line is read: the routes only
     * see a body's bytes as they come, so one chunk declared larger than the limit was awaited until the body's deadline
     * (408), and a body past the limit, answered 413, was read to its end or that deadline.
     */
    private static final class Decoder extends VertxHttpRequestDecoder {
        private final IntSupplier maxBodyBytes;
        /** Set once a size was refused: nothing more of the connection is decoded. */
        private boolean broken;
        /** The sizes of the current request's chunks so far, added up. */
        private long declared;

        Decoder(HttpServerOptions options, IntSupplier maxBodyBytes) {
            super(options);
            this.maxBodyBytes = maxBodyBytes;
        }

        @Override
        protected void handleTransferEncodingChunkedWithContentLength(HttpMessage message) {
            super.handleTransferEncodingChunkedWithContentLength(message);
            message.setDecoderResult(DecoderResult.failure(new Refused(400, "invalid_header", BOTH_LENGTHS)));
        }

        @Override
        protected void decode(ChannelHandlerContext ctx, ByteBuf in, List<Object> out) throws Exception {
            if (broken) {
                in.skipBytes(in.readableBytes());
                return;
            }
            String state = DECODER_STATE == null ? "" : String.valueOf(DECODER_STATE.get(this));
            // a request line without a version, or whose target holds a blank or control byte: Netty splits the line at
            // the blank and names the version ("invalid version format"), so it is refused here, before Netty reads it
            if (state.equals("SKIP_CONTROL_CHARS") || state.equals("READ_INITIAL")) {
                declared = 0;
                Refused r = requestLine(in);
                if (r != null) {
                    broken = true;
                    in.skipBytes(in.readableBytes());
                    HttpMessage bad = r.target != null ? readLine(r) : createInvalidMessage();
                    bad.setDecoderResult(DecoderResult.failure(r));
                    out.add(bad);
                    return;
                }
            }
            // the decoder reads one chunk-size line per call, at its start
            if (state.equals("READ_CHUNK_SIZE")) {
                // RFC 9112's chunk-size is 1*HEXDIG from the line's start; Netty trims blanks before it, so " 3c" passed
                if (sizeLineStartsBlank(in)) {
                    refuse(in, out, new IllegalArgumentException("the chunk-size line starts with a blank; a chunk size is"
                            + " hexadecimal digits from the start of its line (RFC 9112)"));
                    return;
                }
                // a control byte in the line (a bare CR, NUL, ...) is no part of a chunk extension's tokens and quoted
                // strings; a bare CR must be refused or read as a blank (RFC 9112, section 2.2), and a front that ends
                // the line at it frames the chunks otherwise than this server
                int control = sizeLineControl(in);
                if (control >= 0) {
                    refuse(in, out, new IllegalArgumentException(String.format("the chunk-size line holds the control character"
                            + " U+%04X; after the size a line holds only chunk extensions (;name=value, a value a token or"
                            + " a quoted string) and ends with CRLF (RFC 9112)", control)));
                    return;
                }
                String size = oversizedChunkSize(in);
                if (size != null) {
                    refuse(in, out, new IllegalArgumentException("the chunk size '" + size
                            + "' is past the largest this server reads (7fffffff bytes)"));
                    return;
                }
                // counted once: with its whole line there, the decoder reads the size in this call
                long n = chunkSize(in);
                int limit = maxBodyBytes.getAsInt();
                if (n > 0 && (declared += n) > limit) {
                    refuse(in, out, new Refused(413, "request_too_large", HttpVerticle.tooLarge(limit, -1).getMessage()));
                    return;
                }
            }
            super.decode(ctx, in, out);
        }

        /**
         * The stand-in for a request whose line could not be read (too long, no version): Netty's is HTTP/1.0, and
         * Vert.x answers in the request's version, so the 414 or 400 went out as HTTP/1.0 from a server that speaks
         * HTTP/1.1 (RFC 9110 section 6.2: a server sends its own version).
         */
        @Override
        protected HttpMessage createInvalidMessage() {
            return new io.netty.handler.codec.http.DefaultFullHttpRequest(HttpVersion.HTTP_1_1,
                    io.netty.handler.codec.http.HttpMethod.GET, "/", Unpooled.EMPTY_BUFFER);
        }

        /**
         * The stand-in for a request line refused whole whose method and target were read: so that the refusal is
         * logged under them and its answer takes the target's shape.
         */
        private static HttpMessage readLine(Refused r) {
            io.netty.handler.codec.http.HttpMethod m;
            try {
                m = io.netty.handler.codec.http.HttpMethod.valueOf(r.method);
            } catch (IllegalArgumentException notAToken) {
                m = io.netty.handler.codec.http.HttpMethod.GET;
            }
            return new io.netty.handler.codec.http.DefaultFullHttpRequest(HttpVersion.HTTP_1_1, m, r.target, Unpooled.EMPTY_BUFFER);
        }

        /** Ends the body with a failed last content carrying why, and decodes nothing more of the connection. */
        private void refuse(ByteBuf in, List<Object> out, RuntimeException why) {
            broken = true;
            in.skipBytes(in.readableBytes());
            HttpContent bad = new io.netty.handler.codec.http.DefaultLastHttpContent(Unpooled.EMPTY_BUFFER);
            bad.setDecoderResult(DecoderResult.failure(why));
            out.add(bad);
        }
    }

    /**
     * The value of the chunk size at the start of in (its hex digits after optional blanks) when its whole line is there
     * and it is at most 2^31 - 1, else -1 (also for a line that holds no size: the decoder refuses that one).
     */
    static long chunkSize(ByteBuf in) {
        String digits = chunkSizeDigits(in);
        if (digits == null || digits.isEmpty() || oversized(digits)) return -1;
        return Long.parseLong(digits, 16);
    }

    /**
     * The hex digits of the chunk size at the start of in, after optional leading blanks, up to the first byte that is
     * no hex digit (an extension's ';', a blank, the line's end); null while its line is not all there.
     */
    private static String chunkSizeDigits(ByteBuf in) {
        int from = in.readerIndex(), lf = lineEnd(in, from);
        if (lf < 0) return null;
        int i = from;
        while (i < lf && (in.getByte(i) == ' ' || in.getByte(i) == '\t')) i++;
        int start = i;
        while (i < lf && Character.digit(in.getByte(i), 16) >= 0) i++;
        return in.toString(start, i - start, StandardCharsets.US_ASCII);
    }

    /**
     * The first control byte (below 0x20 but TAB, or 0x7F) of the chunk-size line at the start of in, its ending CRLF
     * aside; -1 for none or while the line is not all there. A line that ends with a bare LF is passed on: the decoder
     * refuses it ("Line Feed must be preceded by Carriage Return").
     */
    static int sizeLineControl(ByteBuf in) {
        int from = in.readerIndex(), lf = lineEnd(in, from);
        if (lf < 0) return -1;
        int end = lf > from && in.getByte(lf - 1) == '\r' ? lf - 1 : lf;
        for (int i = from; i < end; i++) {
            int b = in.getByte(i) & 0xff;
            if ((b < 0x20 && b != '\t') || b == 0x7f) return b;
        }
        return -1;
    }

    /**
     * The index of the LF that ends the line starting at from, looked for in the bytes there within
     * {@link #LINE_LOOKAHEAD}; -1 while it has not come (a longer line is left to the decoder's own limits).
     */
    private static int lineEnd(ByteBuf in, int from) {
        return in.indexOf(from, Math.min(in.writerIndex(), from + LINE_LOOKAHEAD), (byte) '\n');
    }

    /** How far a line's end is looked for: past the decoder's line limit ({@link HeadDeadline#MAX_REQUEST_LINE}). */
    private static final int LINE_LOOKAHEAD = 8192;

    /** Whether the chunk-size line at the start of in is all there and begins with a space or a TAB. */
    static boolean sizeLineStartsBlank(ByteBuf in) {
        int from = in.readerIndex();
        if (lineEnd(in, from) < 0) return false;
        byte b = in.getByte(from);
        return b == ' ' || b == '\t';
    }

    /** Whether hex digits (leading zeros aside) are past 2^31 - 1, the largest size the decoder reads. */
    private static boolean oversized(String digits) {
        int z = 0;
        while (z < digits.length() && digits.charAt(z) == '0') z++;
        int n = digits.length() - z;
        return n > SIZE_DIGITS + 1 || (n == SIZE_DIGITS + 1 && Character.digit(digits.charAt(z), 16) >= 8);
    }

    /**
     * The chunk size at the start of in when its whole line is there and its value is past 2^31 - 1 (shown at most 24
     * characters long), else null: the size's hex digits after optional leading blanks, up to the first byte that is no
     * hex digit (an extension's ';', a blank, the line's end).
     */
    static String oversizedChunkSize(ByteBuf in) {
        String text = chunkSizeDigits(in);
        if (text == null || !oversized(text)) return null;
        return text.length() > 24 ? text.substring(0, 24) + "..." : text;
    }

    /** RFC 9112's HTTP-version: the name in capitals, one digit on each side of the dot. */
    private static final java.util.regex.Pattern VERSION = java.util.regex.Pattern.compile("HTTP/[0-9]\\.[0-9]");

    /** What every refusal of a request line's form says after its reason: the form RFC 9112 (section 3) gives it. */
    private static final String REQUEST_LINE_FORM = ": a request line is a method, a target and a version separated by"
            + " single spaces (GET /v1/models HTTP/1.1), a space inside the target written %20";

    /**
     * Why the request line at the start of in is refused, or null, also while the line is not all there: a line that
     * does not end with an HTTP version ({@code GET /a b}, {@code GET /a}, {@code GET /a http/1.1}), which Netty read
     * as a version it could not parse ("invalid version format: B"); a space after the version, which Netty refused as
     * an illegal character of a header; more than one space between two parts ({@code GET  /a HTTP/1.1}), which Netty
     * took; or a target refused by {@link #target}. RFC 9112 (section 3) has single spaces between the parts and lets a
     * server refuse other whitespace with 400: a proxy in front that splits the line otherwise would route the request
     * by another target. The target is what lies between the first and the last space, so a TAB, VT, FF, CR or space
     * inside it is named. A version of other digits (HTTP/2.0, the preface of HTTP/2 with prior knowledge) is a 505
     * naming it: Vert.x answered it with 501, no body and no log line, in the version it does not speak.
     */
    static Refused requestLine(ByteBuf in) {
        int from = in.readerIndex(), to = in.writerIndex();
        // empty lines before a request line are skipped, as Netty does (RFC 9112 section 2.2 lets a server ignore them);
        // the line looked at is the first after them, else "\r\nGET /a\tb" was taken for an empty line and passed
        int s = from;
        while (s < to && (in.getByte(s) & 0xFF) <= 0x20) s++;
        int lf = lineEnd(in, s);
        if (lf < 0) return null;
        int e = lf;
        while (e > s && in.getByte(e - 1) == '\r') e--;
        String line = in.toString(s, e - s, StandardCharsets.ISO_8859_1);
        int version = line.length();
        while (version > 0 && line.charAt(version - 1) == ' ') version--;
        if (version < line.length() && VERSION.matcher(line.substring(line.lastIndexOf(' ', version - 1) + 1, version)).matches())
            return badRequestLine(line, "has a space after its HTTP version");
        int a = line.indexOf(' '), b = line.lastIndexOf(' ');
        if (a < 0 || b <= a || !VERSION.matcher(line.substring(b + 1)).matches())
            return badRequestLine(line, "does not end with an HTTP version");
        String target = line.substring(a + 1, b);
        if (target.isBlank()) return badRequestLine(line, "has no target");
        if (target.startsWith(" ") || target.endsWith(" "))
            return badRequestLine(line, "has more than one space between two of its parts");
        String v = line.substring(b + 1);
        if (!v.equals("HTTP/1.1") && !v.equals("HTTP/1.0"))
            return new Refused(505, "http_version_not_supported", "its HTTP version " + v + " is not supported: this"
                    + " server speaks HTTP/1.1 and HTTP/1.0" + (v.startsWith("HTTP/2") ? " (no HTTP/2 without TLS, with"
                    + " prior knowledge or an Upgrade: h2c): send the request as HTTP/1.1" : ""),
                    line.substring(0, a), target(target) == null ? target : null);
        return target(target);
    }

    private static Refused badRequestLine(String line, String why) {
        return new Refused(400, "invalid_request_line", "its request line '" + escaped(line) + "' " + why + REQUEST_LINE_FORM);
    }

    /**
     * Why a request target is refused, or null: a byte outside printable ASCII. RFC 9112 makes the target ASCII (other
     * characters percent-encoded); Netty takes each byte as a Latin-1 character, so a raw UTF-8 {@code /v1/models/ü}
     * was routed as {@code Ã¼} and answered 404 naming a model the client never wrote.
     * @param uri the target as Netty read it, one character a byte
     */
    static Refused target(String uri) {
        for (int i = 0; i < uri.length(); i++) {
            char c = uri.charAt(i);
            if (c > 0x20 && c < 0x7F) continue;
            return new Refused(400, "invalid_path", String.format("its target (path and query) holds the byte 0x%02X at"
                    + " byte %d, which is not printable ASCII: a request target is ASCII, any other character"
                    + " percent-encoded as UTF-8 (%s is %%C3%%BC)", (int) c & 0xFF, i + 1, "\u00fc"));
        }
        return null;
    }

    /**
     * Why a head's Host is refused, or null: none in an HTTP/1.1 request, more than one Host header (RFC 9112 section
     * 3.2 asks a 400 for both, equal values or not), or a value that is no {@code host[:port]} ({@link #validHost}).
     * Vert.x reads each as no Host at all, and its router answered "the 'Host' header is required" with the connection
     * kept; refused here, the head closes its connection as every other malformed head does.
     */
    static Refused host(HttpRequest req) {
        List<String> values = req.headers().getAll(HttpHeaderNames.HOST);
        // HTTP/1.0 has no Host requirement (a request line of another version was refused already, 505)
        if (values.isEmpty() && HttpVersion.HTTP_1_1.equals(req.protocolVersion()))
            return new Refused(400, "invalid_header", "it has no Host header, which HTTP/1.1 requires (RFC 9112 section 3.2)");
        if (values.size() > 1)
            return new Refused(400, "invalid_header", "it has " + values.size() + " Host headers; a request has exactly one"
                    + " (RFC 9112 section 3.2)");
        if (values.isEmpty() || validHost(values.getFirst())) return null;
        if (values.getFirst().indexOf('%') >= 0)
            return new Refused(400, "invalid_header", "its Host header '" + escaped(values.getFirst()) + "' is invalid: it"
                    + " holds '%', and percent-escapes in a Host are not accepted: give the host name as is");
        // a blank inside: a header line that starts with a space or tab continues the one before it (obsolete line
        // folding, RFC 9112 section 5.2), which the HTTP decoder joins with a space, so say that the blank may be one
        String v = values.getFirst();
        boolean blank = v.indexOf(' ') >= 0 || v.indexOf('\t') >= 0;
        return new Refused(400, "invalid_header", "its Host header '" + escaped(v) + "' is invalid: it must"
                + " be a host name, an IPv4 address or a bracketed IPv6 address, optionally followed by ':' and a port of"
                + " at most 65535 (such as example.com:8080 or [::1]:8080)" + (blank ? "; a blank in it may come from"
                + " obsolete line folding (a header line that starts with a space or tab continues the line before it)" : ""));
    }

    /**
     * Whether a Host value is RFC 3986's {@code host [":" port]}, the port's digits (none, or with leading zeros) at
     * most 65535: a registered name (letters,
     * digits, {@code -._~!$&'()*+,;=}) or an IP literal in brackets, and one Vert.x reads. Empty is valid (RFC 9112
     * allows it where the target has no authority). Percent-escapes are refused: Vert.x 5.0.7's reading of one
     * ({@code %41}) threw StringIndexOutOfBoundsException, and the connection hung without an answer.
     */
    static boolean validHost(String h) {
        if (h.indexOf('%') >= 0 || !vertxReads(h)) return false;
        int portAt;
        if (h.startsWith("[")) {
            int close = h.indexOf(']');
            if (close < 0 || !ipLiteral(h.substring(1, close))) return false;
            if (close + 1 == h.length()) return true;
            if (h.charAt(close + 1) != ':') return false;
            portAt = close + 2;
        } else {
            int colon = h.indexOf(':');
            String name = colon < 0 ? h : h.substring(0, colon);
            for (int i = 0; i < name.length(); i++) {
                char c = name.charAt(i);
                if (!(unreserved(c) || "!$&'()*+,;=".indexOf(c) >= 0)) return false;
            }
            if (colon < 0) return true;
            portAt = colon + 1;
        }
        // RFC 3986's port is *DIGIT: empty (the scheme's default) and leading zeros are valid; the number it makes is
        // what must be a port
        String port = h.substring(portAt);
        for (int i = 0; i < port.length(); i++) if (port.charAt(i) < '0' || port.charAt(i) > '9') return false;
        int digits = port.length();
        for (int i = 0; i < port.length() && port.charAt(i) == '0'; i++) digits--;
        return digits <= 5 && (digits == 0 || Integer.parseInt(port.substring(port.length() - digits)) <= 65535);
    }

    /**
     * Whether Vert.x's own Host parsing reads the value without throwing: what it cannot read past this check would
     * be thrown on the event loop, and the connection left without an answer.
     */
    private static boolean vertxReads(String h) {
        if (h.isEmpty()) return true;
        try {
            return io.vertx.core.net.HostAndPort.parseAuthority(h, -1) != null;  // the public entry to the same parser
        } catch (RuntimeException e) {
            return false;
        }
    }

    private static boolean unreserved(char c) {
        return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~';
    }

    /** Inside the brackets: an IPv6 address, or RFC 3986's IPvFuture ({@code v1.xyz}). */
    private static boolean ipLiteral(String s) {
        if (io.netty.util.NetUtil.isValidIpV6Address(s)) return true;
        int dot = s.indexOf('.');
        if (s.length() < 4 || (s.charAt(0) != 'v' && s.charAt(0) != 'V') || dot < 2 || dot == s.length() - 1) return false;
        for (int i = 1; i < dot; i++) if (Character.digit(s.charAt(i), 16) < 0) return false;
        for (int i = dot + 1; i < s.length(); i++) {
            char c = s.charAt(i);
            if (!(unreserved(c) || c == ':' || "!$&'()*+,;=".indexOf(c) >= 0)) return false;
        }
        return true;
    }

    /**
     * A header value fit for a message: printable ASCII as is, any other byte (Netty reads one a character) as \xHH,
     * at most 64 characters of it.
     */
    static String escaped(String v) {
        StringBuilder b = new StringBuilder();
        int i = 0;
        for (; i < v.length() && b.length() < 64; i++) {
            char c = v.charAt(i);
            if (c >= 0x20 && c < 0x7F && c != '\\') b.append(c);
            else b.append(String.format("\\x%02X", (int) c & 0xFF));
        }
        return i < v.length() ? b + "..." : b.toString();
    }

    /**
     * What a head's framing headers say is wrong, or null: Netty has decided how to read its body by then, and the
     * cases it reads where it should refuse are refused here (the connection closes after the answer, so its reading
     * does not matter).
     */
    static Refused check(HttpRequest req) {
        List<String> values = req.headers().getAll(HttpHeaderNames.TRANSFER_ENCODING);
        if (values.isEmpty()) return null;
        if (req.protocolVersion().equals(HttpVersion.HTTP_1_0))
            return new Refused(400, "invalid_header", "it is an HTTP/1.0 request with a Transfer-Encoding, which HTTP/1.0"
                    + " does not have: send the body with a Content-Length");
        if (req.headers().contains(HttpHeaderNames.CONTENT_LENGTH)) return new Refused(400, "invalid_header", BOTH_LENGTHS);
        List<String> codings = new ArrayList<>();
        boolean chunkedParameters = false;
        for (String v : values) {
            for (String element : v.split(",", -1)) {
                int semi = element.indexOf(';');
                String coding = (semi >= 0 ? element.substring(0, semi) : element).trim().toLowerCase(Locale.ROOT);
                if (!coding.isEmpty()) codings.add(coding);
                chunkedParameters |= semi >= 0 && coding.equals("chunked");
            }
        }
        String all = String.join(", ", values);
        String shown = all.length() > 64 ? all.substring(0, 64) + "..." : all;
        // chunked has no parameters, and Netty reads a request whose chunked has some as one without a body
        if (chunkedParameters)
            return new Refused(400, "invalid_header", "its Transfer-Encoding '" + shown + "' gives chunked parameters;"
                    + " chunked takes none");
        if (codings.isEmpty() || !codings.getLast().equals("chunked"))
            return new Refused(400, "invalid_header", "its Transfer-Encoding '" + shown + "' does not end with chunked, so"
                    + " its body's length cannot be told: send the body chunked or with a Content-Length");
        if (codings.indexOf("chunked") < codings.size() - 1)
            return new Refused(400, "invalid_header", "its Transfer-Encoding '" + shown + "' names chunked more than once");
        for (String c : codings)
            if (!c.equals("chunked"))
                return new Refused(501, "unsupported_transfer_encoding", "the transfer coding '" + (c.length() > 64
                        ? c.substring(0, 64) + "..." : c) + "' is not supported: send the body chunked alone or with a"
                        + " Content-Length");
        return null;
    }

    /**
     * Between the decoder and Vert.x: refuses heads by their framing headers ({@link #check}) and answers a chunked body
     * that cannot be read or is past server.maxBodyBytes. It counts the heads that came and the answers written (an answer is begun by a head of status
     * 200 or more, 100 Continue aside, and ended by its last content), to know whether the request with the bad body is
     * the one being answered.
     */
    private static final class Guard extends ChannelDuplexHandler {
        private final Consumer<String> rejected;
        private final ApiException.Bodies bodies;
        private int heads, answered;
        private boolean answering;
        /**
         * Set once a head was refused (by Netty or here) or a body could not be read: nothing after it is handed on, as
         * its bytes cannot be told from a next request (a request smuggled in a body would be answered otherwise).
         */
        private boolean discarding;
        private HttpVersion version = HttpVersion.HTTP_1_1;
        /** The current request's method and path, for the log. */
        private String request = "";
        /** The current request's path as the router routes it, for the shape of its refusal. */
        private String path = "";
        /** The current request's X-Request-Id header, or null: its refusal's id comes from it (HttpVerticle.requestIdOf). */
        private String clientId;
        /** Why the current request's body cannot be read, once it cannot. */
        private Refused broken;
        /** Set when the connection is being closed: nothing more is written. */
        private boolean closing;

        Guard(Consumer<String> rejected, ApiException.Bodies bodies) {
            this.rejected = rejected;
            this.bodies = bodies;
        }

        @Override
        public void channelRead(ChannelHandlerContext ctx, Object msg) {
            if (discarding) {
                ReferenceCountUtil.release(msg);
                return;
            }
            if (msg instanceof HttpRequest req) {
                heads++;
                version = req.protocolVersion();
                int query = req.uri().indexOf('?');
                request = req.method() + " " + (query < 0 ? req.uri() : req.uri().substring(0, query));
                clientId = req.headers().get(HttpVerticle.REQUEST_ID);
                path = routedPath(req.uri());
                if (req.decoderResult().isSuccess()) {
                    Refused r = target(req.uri());
                    if (r == null) r = host(req);
                    if (r == null) r = check(req);
                    if (r != null) req.setDecoderResult(DecoderResult.failure(r));
                }
                // Vert.x answers a refused head as a request it could not read, and closes the connection after it
                discarding = !req.decoderResult().isSuccess();
            } else if (msg instanceof HttpContent content && !content.decoderResult().isSuccess()) {
                Throwable cause = content.decoderResult().cause();
                ReferenceCountUtil.release(msg);
                broken = cause instanceof Refused r ? r : new Refused(400, "invalid_chunked_body",
                        "the request's chunked body cannot be read: " + chunkProblem(cause));
                discarding = true;
                settle(ctx);
                return;
            }
            ctx.fireChannelRead(msg);
        }

        @Override
        public void write(ChannelHandlerContext ctx, Object msg, ChannelPromise promise) {
            if (closing) {
                ReferenceCountUtil.release(msg);
                promise.tryFailure(new ClosedChannelException());
                return;
            }
            if (msg instanceof HttpResponse r && r.status().code() >= 200) answering = true;
            boolean ends = answering && msg instanceof LastHttpContent;
            ctx.write(msg, promise);
            if (ends) {
                answering = false;
                answered++;
                if (broken != null) settle(ctx);
            }
        }

        /**
         * After a bad chunk: answers it once every earlier request is answered and this one's answer has not begun, or
         * closes the connection once this one's answer (begun before the chunk came) is written; else waits for the
         * next answer to end.
         */
        private void settle(ChannelHandlerContext ctx) {
            if (answered >= heads) {
                LOG.info("{}: answered before its body was read; {} ({}): closing the connection", request,
                        broken.getMessage(), broken.code);
                closing = true;
                LingeringClose.after(ctx.writeAndFlush(Unpooled.EMPTY_BUFFER));
            } else if (answered == heads - 1 && !answering) {
                rejected.accept(broken.code);
                // answered here, not by the route: it carries an id as the route's answers do (the client's, else one)
                String id = HttpVerticle.requestIdOf(clientId);
                LOG.info("request {}: {} rejected with {}: {}; closing the connection", id, request, broken.status,
                        broken.getMessage());
                ApiException e = new ApiException(broken.status, "invalid_request_error", broken.code, null,
                        broken.getMessage(), null);
                ByteBuf body = Unpooled.copiedBuffer(Json.write(bodies.of(path, e)), StandardCharsets.UTF_8);
                FullHttpResponse resp = new DefaultFullHttpResponse(version, HttpResponseStatus.valueOf(broken.status), body);
                resp.headers().set(HttpHeaderNames.CONTENT_TYPE, HttpHeaderValues.APPLICATION_JSON)
                        .set(HttpVerticle.REQUEST_ID, id)
                        .set(HttpHeaderNames.CONNECTION, HttpHeaderValues.CLOSE)
                        .setInt(HttpHeaderNames.CONTENT_LENGTH, body.readableBytes());
                LingeringClose.after(ctx.writeAndFlush(resp));
                closing = true;
            }
        }
    }

    /**
     * What is wrong with a chunked body Netty could not read, in words: a size line that is no hexadecimal number
     * (Netty says "Invalid character in chunk size" or "Empty chunk size", and for a byte past ASCII fails with an index
     * out of bounds of its own table), a size line past the decoder's line limit (its extensions: not the request
     * line, which {@link HttpVerticle#decodeProblem} names for the same exception), else decodeProblem's reading of
     * its message.
     */
    static String chunkProblem(Throwable cause) {
        String m = cause != null && cause.getMessage() != null ? cause.getMessage() : "";
        if (cause instanceof IndexOutOfBoundsException || m.startsWith("Invalid character in chunk size") || m.startsWith("Empty chunk size"))
            return "a chunk's size is not a hexadecimal number: each chunk of a chunked body starts with its size in"
                    + " hexadecimal digits alone, then CRLF";
        if (cause instanceof io.netty.handler.codec.http.TooLongHttpLineException)
            return "a chunk-size line is longer than the server reads (" + m.strip() + "): send shorter chunk extensions, or none";
        return HttpVerticle.decodeProblem(cause);
    }
}
